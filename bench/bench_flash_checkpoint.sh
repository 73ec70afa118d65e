#!/usr/bin/env bash
# bench_flash_checkpoint.sh: what a save costs the training loop, GPT-2 124M with AdamW (1.49 GB of
# state per process): runs without saves, with --flash_checkpoint and with direct saves, interleaved
# REPS times, each printing its per-step times (metrics.jsonl) and the flash lines (stall, copy,
# persist, background CPU). docs/fault-tolerance.md#measurements has the figures and how to read them.
# usage: bench/bench_flash_checkpoint.sh path/to/ztrain [reps=3] [threads=2]
set -eu
Z=$1
REPS=${2:-3}
THREADS=${3:-2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/config.json" <<'J'
{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024}
J
/usr/bin/python3 -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(50257).to_bytes(2, 'little') for _ in range(300000)))" > "$W/tok.bin"
A=(--model_config_path "$W/config.json" --train_file "$W/tok.bin" --per_device_train_batch_size 1
   --model_max_length 128 --max_steps 25 --learning_rate 1e-4 --logging_steps 1 --threads "$THREADS"
   --report_to none)
for rep in $(seq "$REPS"); do
  for mode in none flash direct; do
    case $mode in
      none) extra=(--save_strategy no) ;;
      flash) extra=(--save_steps 8 --save_total_limit 2 --flash_checkpoint) ;;
      direct) extra=(--save_steps 8 --save_total_limit 2) ;;
    esac
    rm -rf "$W/out"
    t0=$(date +%s.%N)
    "$Z" train "${A[@]}" "${extra[@]}" --output_dir "$W/out" > "$W/log" 2>&1
    t1=$(date +%s.%N)
    /usr/bin/python3 -c "
import json, sys
t = [json.loads(l)['step_time_s'] for l in open(sys.argv[1]) if 'step_time_s' in l]
wall = float(sys.argv[5]) - float(sys.argv[4])
print(sys.argv[2], sys.argv[3], 'wall %.1f s, steps %.1f s, wall - steps %.1f s, step times' % (wall, sum(t), wall - sum(t)), [round(x, 2) for x in t])
" "$W/out/metrics.jsonl" "$mode" "$rep" "$t0" "$t1"
    grep "Flash checkpoint" "$W/log" || true
  done
done
