#!/usr/bin/env bash
# bench_cp.sh: context parallelism at long context on this machine (docs/parallelism-cp.md,
# "Measurements"): a small Llama (configs/llama-tiny-8k.json) at T = 8192, B = 1, fp32, random
# tokens; CP 1 (one process x 2 threads) against CP 2 (mpirun -np 2, 1 thread each). Prints each
# run's activation arena, tracked temporaries and peak RSS (the chief rank's), the cp bytes per step
# against the ring formula, the losses and the median step's tokens/s after the first step.
# usage: bench/bench_cp.sh [BUILD_DIR] [STEPS]   (default build, 3)
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/configs/llama-tiny-8k.json
T=8192
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 - "$TMP/tokens.bin" $((T * (STEPS + 2) + 1)) <<'PY'
import random, struct, sys
rng = random.Random(0)
n = int(sys.argv[2])
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[rng.randrange(509) for _ in range(n)]))
PY
run() {  # name, threads, launcher...
  local name=$1 threads=$2; shift 2
  local out=$TMP/run
  "$@" "$BUILD/ztrain" train --model_config_path "$CFG" --train_file "$TMP/tokens.bin" --output_dir "$out" \
    --overwrite_output_dir --per_device_train_batch_size 1 --model_max_length $T --max_steps "$STEPS" \
    --logging_steps 1 --threads "$threads" --save_strategy no --learning_rate 1e-3 --report_to none \
    "${EXTRA[@]}" > "$out.log" 2>&1 || { tail -5 "$out.log"; exit 1; }
  /usr/bin/python3 - "$out" "$name" $T <<'PY'
import json, statistics, sys
out, name, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
dp = json.load(open(out + "/train_results.json"))["data_parallel"]
ms = dp["model_state_bytes"]
rows = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"step_time_s"' in l]
t = statistics.median(r["step_time_s"] for r in rows[1:]) if len(rows) > 1 else float("nan")
st = json.load(open(out + "/trainer_state.json"))
losses = [h["loss"] for h in st["log_history"] if "loss" in h and "train_loss" not in h]
print(f"{name}: activations {ms['activations'] / 1e6:.1f} MB, temporary {ms['temporary'] / 1e6:.1f} MB, "
      f"peak RSS {dp['peak_rss_bytes'] / 1e6:.0f} MB, {T / t:.0f} tokens/s (median step {t:.2f} s), losses {losses}")
cp = dp.get("context_parallel")
if cp:
    print(f"  cp bytes sent per step {cp['sent_bytes_per_step']:.0f} (formula {cp['formula_bytes_per_step']:.0f}); "
          f"ring transfers {cp['send_seconds_per_step']:.3f} s per step, callers blocked on them "
          f"{cp['wait_seconds_per_step']:.3f} s")
PY
}
EXTRA=()
run "CP 1 (1 process x 2 threads)" 2 env
EXTRA=(--context-parallel-size 2)
run "CP 2 (2 processes x 1 thread)" 1 mpirun -np 2 --bind-to none
