#!/usr/bin/env bash
# bench_planner.sh: the planner's predictions against measurements on this machine
# (docs/planner.md). For each model and rank count: `ztrain plan --json`, then the best layout of
# each of the top K distinct shapes (dp x tp x pp; the planner's best ZeRO stage, micro-batch...)
# trained for STEPS steps on random tokens, ROUNDS times in turn (A B C A B C: the machine's load
# drifts); measured step time = the smallest over the rounds of the median of the steps after the
# first, measured memory = the largest peak RSS over the ranks (/usr/bin/time). Prints predicted
# vs measured and whether the planner's first choice is within 10% of the fastest measured.
#   usage: bench/bench_planner.sh [--calibrate] [BUILD_DIR] [STEPS] [K] [NPROC...]
#   --calibrate: data parallel ZeRO-1 runs of `nproc` ranks (every core busy) and of twice that
#   (oversubscribed) per model instead; prints the efficiency and the oversubscribed efficiency
#   that make the planner's compute equal the measured step (kDefault* in plan/planner.h).
# Environment: MODELS (default "gpt2-124m llama-124m"), GB (global batch, 8), T (256), ROUNDS (2),
# PLAN_FLAGS (extra `ztrain plan` flags, e.g. --link_gbps 1.5 --gemm_gflops 150).
set -euo pipefail
CAL=0
if [[ "${1:-}" == --calibrate ]]; then CAL=1; shift; fi
BUILD=${1:-build}
STEPS=${2:-3}
K=${3:-4}
shift $(( $# > 3 ? 3 : $# )) || true
NPROCS=("${@:-2 4}")
read -r -a NPROCS <<< "${NPROCS[*]}"
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${MODELS:-"gpt2-124m llama-124m"}
GB=${GB:-8} T=${T:-256} ROUNDS=${ROUNDS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 - "$TMP/tokens.bin" $((GB * T * (STEPS + 2) + 1)) <<'PY'
import random, struct, sys
rng = random.Random(0)
n = int(sys.argv[2])
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[rng.randrange(32000) for _ in range(n)]))
PY
echo "# bench_planner: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, GB=$GB T=$T"

# train NAME NP FLAGS...: one run; prints "step_s rss_bytes"
train() {
  local name=$1 np=$2; shift 2
  local out=$TMP/$name
  local launch=(env)
  [[ $np -gt 1 ]] && launch=(mpirun -np "$np" --bind-to none)
  # Each rank's peak RSS into its own file (stderr lines of several ranks interleave).
  "${launch[@]}" sh -c '/usr/bin/time -f %M -o "$0.${OMPI_COMM_WORLD_RANK:-0}" "$@"' "$out.rss" "$BUILD/ztrain" train \
    --model_config_path "$CFG" \
    --train_file "$TMP/tokens.bin" --output_dir "$out" --overwrite_output_dir --model_max_length "$T" \
    --max_steps "$STEPS" --logging_steps 1 --save_strategy no --learning_rate 1e-4 --report_to none \
    --disable_tqdm true "$@" < /dev/null > "$out.log" 2>&1 || { tail -5 "$out.log" >&2; echo "nan nan"; return; }
  /usr/bin/python3 - "$out/metrics.jsonl" "$out.rss" <<'PY'
import glob, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
t = statistics.median(r["step_time_s"] for r in rows[1:]) if len(rows) > 1 else rows[0]["step_time_s"]
rss = max(int(open(f).read().split()[-1]) for f in glob.glob(sys.argv[2] + ".*")) * 1024
print(t, rss)
PY
  rm -rf "$out" "$out".rss.*
}

for model in $MODELS; do
  CFG=$HERE/configs/$model.json
  if [[ $CAL == 1 ]]; then
    # Data parallel, ZeRO-1, 1 thread per rank: np = the cores (every core busy, as the layouts
    # run) gives the efficiency; np = twice the cores then gives the oversubscribed efficiency.
    cores=$(nproc)
    eff=1
    for np in "$cores" $((2 * cores)); do
      read -r step rss <<< "$(train "cal_${model}_$np" "$np" --zero_stage 1 --per_device_train_batch_size $((GB / np)) --threads 1)"
      "$BUILD/ztrain" plan --model_config_path "$CFG" --model_max_length "$T" --global_batch "$GB" --nproc "$np" \
        --efficiency "$eff" --oversubscribed_efficiency 1 --zero_stage 1 --json ${PLAN_FLAGS:-} > "$TMP/cal.json"
      eff=$(/usr/bin/python3 - "$TMP/cal.json" "$step" "$rss" "$model" "$GB" "$np" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); step, rss, np = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[6])
row = next(r for r in j["layouts"] if r["dp"] == np and r["micro_batch"] == int(sys.argv[5]) // np and not r["recompute"])
t = row["time_s"]
mem = row["memory_bytes"]["total"] - row["memory_bytes"]["runtime"]
cores = j["machine"]["cores_per_host"]
if np <= cores:
    # Every core busy: the compute that makes the predicted step the measured one.
    ratio = t["compute"] / max(1e-9, step - t["optimizer"] - t["dp_comm"])
    what, out = "efficiency", ratio
else:
    # Oversubscribed, predicted at the efficiency just found: the host's work over its cores
    # against the measured step (a ratio above 1 means the ranks lose nothing taking turns).
    ratio = t["step"] / step
    what, out = "oversubscribed efficiency", j["machine"]["efficiency"]
print(f"{sys.argv[4]}: {np} ranks x 1 thread, DP ZeRO-1: step {step:.2f} s (predicted {t['step']:.2f} s at "
      f"efficiency {j['machine']['efficiency']:.3f}) -> {what} {ratio:.3f} (sgemm {j['machine']['gemm_gflops_core']:.0f} "
      f"GFLOP/s per core); peak RSS {rss / 2**20:.0f} MiB, predicted without runtime {mem / 2**20:.0f} MiB -> "
      f"runtime {(rss - mem) / 2**20:.0f} MiB", file=sys.stderr)
print(f"{min(out, 1.0):.3f}")
PY
)
    done
    continue
  fi
  for np in "${NPROCS[@]}"; do
    "$BUILD/ztrain" plan --model_config_path "$CFG" --model_max_length "$T" --global_batch "$GB" --nproc "$np" \
      --json ${PLAN_FLAGS:-} > "$TMP/plan.json"
    # The best micro-batch of each of the top K distinct shapes.
    /usr/bin/python3 - "$TMP/plan.json" "$K" > "$TMP/picks" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); seen = []
for i, r in enumerate(j["layouts"]):
    key = (r["dp"], r["tp"], r["pp"])
    if key in seen or not r["fits"]: continue
    seen.append(key)
    print(i, r["time_s"]["step"], r["memory_bytes"]["total"], r["threads"], r["flags"], sep="|")
    if len(seen) == int(sys.argv[2]): break
PY
    echo "## $model, $np ranks (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    : > "$TMP/results"
    for round in $(seq "$ROUNDS"); do
      while IFS='|' read -r idx pred_s pred_b threads flags; do
        # shellcheck disable=SC2086
        read -r meas_s meas_b <<< "$(train "$model-$np-$idx" "$np" $flags --threads "$threads")"
        echo "$idx|$pred_s|$pred_b|$meas_s|$meas_b|$flags --threads $threads" >> "$TMP/results"
      done < "$TMP/picks"
    done
    /usr/bin/python3 - "$TMP/results" <<'PY'
import math, sys
runs = {}
for l in open(sys.argv[1]):
    i, ps, pb, ms, mb, fl = l.rstrip("\n").split("|")
    r = runs.setdefault(int(i), {"ps": float(ps), "pb": float(pb), "fl": fl, "ms": [], "mb": []})
    if ms != "nan": r["ms"].append(float(ms)); r["mb"].append(float(mb))
print(f"{'rank':<5} {'flags':<96} {'pred_s':>7} {'meas_s (rounds)':>22} {'err':>5} {'pred_MiB':>8} {'meas_MiB':>8} {'err':>5}")
best = {}
for i, r in runs.items():
    if not r["ms"]: print(f"{i + 1:<5} {r['fl']:<96} failed"); continue
    ms, mb = min(r["ms"]), max(r["mb"])
    best[i] = ms
    rounds = "/".join(f"{x:.2f}" for x in r["ms"])
    print(f"{i + 1:<5} {r['fl']:<96} {r['ps']:7.2f} {ms:6.2f} ({rounds:>13}) {100 * (r['ps'] - ms) / ms:+4.0f}% "
          f"{r['pb'] / 2**20:8.0f} {mb / 2**20:8.0f} {100 * (r['pb'] - mb) / mb:+4.0f}%")
if best:
    first = best[min(best)]; fastest = min(best.values())
    print(f"first choice {first:.2f} s vs fastest measured {fastest:.2f} s: {100 * (first / fastest - 1):.1f}% slower "
          f"({'within' if first <= 1.10 * fastest else 'NOT within'} 10%)")
PY
  done
done
echo "# done: load average $(cut -d' ' -f1-3 /proc/loadavg)"
