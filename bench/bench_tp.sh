#!/usr/bin/env bash
# bench_tp.sh: tensor parallel speed on this machine (docs/parallelism-tp.md): GPT-2 124M at
# B=8, T=256, fp32, random tokens: TP 2 x 1 thread (mpirun -np 2) against one process x 2
# threads, tokens/s as the median step time after the first (one-time costs) step.
# usage: bench/bench_tp.sh [BUILD_DIR] [STEPS] [extra ztrain flags...]   (default build, 6)
set -euo pipefail
BUILD=${1:-build}
STEPS=${2:-6}
shift $(( $# > 2 ? 2 : $# )) || true
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/configs/gpt2-124m.json
B=8 T=256
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 - "$TMP/tokens.bin" $((B * T * (STEPS + 2) + 1)) <<'PY'
import random, struct, sys
rng = random.Random(0)
n = int(sys.argv[2])
open(sys.argv[1], "wb").write(struct.pack("<%dH" % n, *[rng.randrange(50257) for _ in range(n)]))
PY
run() {  # name, launcher..., -- , threads, extra flags
  local name=$1 threads=$2; shift 2
  local out=$TMP/$name
  "$@" "$BUILD/ztrain" train --model_config_path "$CFG" --train_file "$TMP/tokens.bin" --output_dir "$out" \
    --overwrite_output_dir --per_device_train_batch_size $B --model_max_length $T --max_steps "$STEPS" \
    --logging_steps 1 --threads "$threads" --save_strategy no --learning_rate 1e-4 --report_to none \
    "${EXTRA[@]}" > "$out.log" 2>&1 || { tail -5 "$out.log"; exit 1; }
  /usr/bin/python3 - "$out/metrics.jsonl" $((B * T)) "$name" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
t = statistics.median(r["step_time_s"] for r in rows[1:])
print(f"{sys.argv[3]:>24}: {int(sys.argv[2]) / t:8.1f} tokens/s (median step {t:.3f} s over {len(rows) - 1} steps)")
PY
}
EXTRA=("$@")
run "1 process x 2 threads" 2 env
EXTRA=("$@" --tensor-model-parallel-size 2)
run "TP 2 x 1 thread" 1 mpirun -np 2 --bind-to none
EXTRA=("$@" --tensor-model-parallel-size 2 --sequence-parallel)
run "TP 2 + SP x 1 thread" 1 mpirun -np 2 --bind-to none
