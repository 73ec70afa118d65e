#!/usr/bin/env bash
# bench_planner.sh: the planner's predictions against measurements on this machine
# (docs/planner.md). For each model and rank count: `ztrain plan --json`, then the best layout of
# each of the top K distinct shapes (dp x tp x pp x ZeRO x recomputation, its best micro-batch)
# trained for STEPS steps on random tokens; measured step time = the median of the steps after
# the first, measured memory = the largest peak RSS over the ranks (/usr/bin/time). Prints
# predicted vs measured and whether the planner's first choice is within 10% of the fastest.
#   usage: bench/bench_planner.sh [--calibrate] [BUILD_DIR] [STEPS] [K] [NPROC...]
#   --calibrate: one process x 1 thread per model instead; prints the efficiency that makes the
#   planner's compute time equal the measured step (kDefaultEfficiency in parallel/planner.h).
# Environment: MODELS (default "gpt2-124m llama-124m"), GB (global batch, 8), T (256),
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
GB=${GB:-8} T=${T:-256}
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
  "${launch[@]}" /usr/bin/time -f "zt_maxrss_kb %M" "$BUILD/ztrain" train --model_config_path "$CFG" \
    --train_file "$TMP/tokens.bin" --output_dir "$out" --overwrite_output_dir --model_max_length "$T" \
    --max_steps "$STEPS" --logging_steps 1 --save_strategy no --learning_rate 1e-4 --report_to none \
    --disable_tqdm true "$@" > "$out.log" 2>&1 || { tail -5 "$out.log" >&2; echo "nan nan"; return; }
  /usr/bin/python3 - "$out/metrics.jsonl" "$out.log" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
t = statistics.median(r["step_time_s"] for r in rows[1:]) if len(rows) > 1 else rows[0]["step_time_s"]
rss = max(int(k) for k in re.findall(r"zt_maxrss_kb (\d+)", open(sys.argv[2]).read())) * 1024
print(t, rss)
PY
}

for model in $MODELS; do
  CFG=$HERE/configs/$model.json
  if [[ $CAL == 1 ]]; then
    read -r step rss <<< "$(train "cal_$model" 1 --per_device_train_batch_size "$GB" --threads 1)"
    "$BUILD/ztrain" plan --model_config_path "$CFG" --model_max_length "$T" --global_batch "$GB" --nproc 1 \
      --cores 1 --efficiency 1 --json ${PLAN_FLAGS:-} > "$TMP/cal.json"
    /usr/bin/python3 - "$TMP/cal.json" "$step" "$rss" "$model" "$GB" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); step, rss = float(sys.argv[2]), int(sys.argv[3])
row = next(r for r in j["layouts"] if r["micro_batch"] == int(sys.argv[5]) and not r["recompute"])
t = row["time_s"]; other = t["optimizer"]
eff = t["compute"] / max(1e-9, step - other)
mem = row["memory_bytes"]["total"] - row["memory_bytes"]["runtime"]
print(f"{sys.argv[4]}: 1 process x 1 thread: step {step:.2f} s, efficiency {eff:.3f} "
      f"(sgemm {j['machine']['gemm_gflops_core']:.0f} GFLOP/s per core); peak RSS {rss / 2**20:.0f} MiB, "
      f"model without runtime {mem / 2**20:.0f} MiB -> runtime {(rss - mem) / 2**20:.0f} MiB")
PY
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
    printf "%-5s %-100s %9s %9s %6s %9s %9s %6s\n" rank flags pred_s meas_s err pred_MiB meas_MiB err
    : > "$TMP/results"
    while IFS='|' read -r idx pred_s pred_b threads flags; do
      # shellcheck disable=SC2086
      read -r meas_s meas_b <<< "$(train "$model-$np-$idx" "$np" $flags --threads "$threads")"
      /usr/bin/python3 -c "
import sys
i, ps, pb, ms, mb, fl = sys.argv[1:7]
ps, pb, ms, mb = float(ps), float(pb), float(ms), float(mb)
print(f'{int(i)+1:<5} {fl:<100} {ps:9.2f} {ms:9.2f} {100*(ps-ms)/ms:+5.0f}% {pb/2**20:9.0f} {mb/2**20:9.0f} {100*(pb-mb)/mb:+5.0f}%')
" "$idx" "$pred_s" "$pred_b" "$meas_s" "$meas_b" "$flags --threads $threads"
      echo "$idx $meas_s" >> "$TMP/results"
    done < "$TMP/picks"
    /usr/bin/python3 - "$TMP/results" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if "nan" not in l]
if rows:
    first = float(rows[0][1]); fastest = min(float(r[1]) for r in rows)
    print(f"first choice {first:.2f} s vs fastest measured {fastest:.2f} s: {100 * (first / fastest - 1):.1f}% slower "
          f"({'within' if first <= 1.10 * fastest else 'NOT within'} 10%)")
PY
  done
done
echo "# done: load average $(cut -d' ' -f1-3 /proc/loadavg)"
