#!/usr/bin/env bash
# bench_planner_moe.sh: the planner's step times for a mixture-of-experts model against measured runs
# (docs/planner.md, "Expert parallelism"). A Mixtral-shaped model (C 256, 4 layers, 8 experts top 2,
# F 512, T 128, global batch 8) on 2 ranks: for each of EP 2, TP 2 + SP and DP 2, `ztrain plan --json`
# pinned to the layout (its measured sgemm) predicts the step, then the layout trains 40 steps twice and
# the median step_time_s of steps 11-40 is the measurement. Run it alone on the machine.
# usage: bench/bench_planner_moe.sh [build] [ranks=2]
set -euo pipefail
B=${1:-build}
N=${2:-2}
Z=$(cd "$B" && pwd)/ztrain
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
/usr/bin/python3 "$HERE/../tests/parity/make_model.py" --config "$HERE/../tests/fixtures/configs/mixtral-8x7b-v0.1.json" \
  --vocab_size 512 --hidden_size 256 --n_layer 4 --n_head 4 --n_kv_head 4 --ffn 512 --seed 1 --num_tokens 200000 \
  --set '{"num_local_experts": 8, "num_experts_per_tok": 2}' --out "$W/m" --tokens "$W/t.bin" >/dev/null
printf '%-18s %12s %12s %8s\n' layout predicted measured ratio
for layout in "EP_2 --expert-model-parallel-size 2" "TP_2+SP --tensor-model-parallel-size 2 --sequence-parallel" \
  "DP_2 --expert-model-parallel-size 1 --tensor-model-parallel-size 1"; do
  set -- $layout; name=$1; shift
  pin=("$@")
  [ "$name" = "TP_2+SP" ] && pin=(--tensor-model-parallel-size 2)
  "$Z" plan --model_name_or_path "$W/m" --model_max_length 128 --global_batch 8 --nproc "$N" \
    --pipeline-model-parallel-size 1 --context-parallel-size 1 "${pin[@]}" --json > "$W/plan.json"
  read -r pred flags < <(/usr/bin/python3 -c "
import json, sys; L = json.load(open(sys.argv[1]))['layouts']; b = L[0]
print(b['time_s']['step'], b['flags'])" "$W/plan.json")
  meds=()
  for run in 1 2; do
    "$Z" launch --nproc_per_node "$N" -- train --model_name_or_path "$W/m" --train_file "$W/t.bin" \
      --model_max_length 128 --max_steps 40 --logging_steps 1 --save_strategy no --report_to none \
      --output_dir "$W/o" --overwrite_output_dir $flags "$@" > "$W/run.log" 2>&1 || { tail -3 "$W/run.log"; exit 1; }
    meds+=("$(/usr/bin/python3 -c "
import json, statistics, sys
t = [json.loads(l)['step_time_s'] for l in open(sys.argv[1]) if '\"step_time_s\"' in l][10:40]
print(statistics.median(t))" "$W/o/metrics.jsonl")")
  done
  meas=$(/usr/bin/python3 -c "import sys; v = [float(x) for x in sys.argv[1:]]; print(min(v))" "${meds[@]}")
  printf '%-18s %12.4f %12.4f %8.2f   (runs: %s; flags: %s)\n' "$name" "$pred" "$meas" \
    "$(/usr/bin/python3 -c "print($meas / $pred)")" "${meds[*]}" "$flags"
done
