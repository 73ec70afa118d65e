#!/usr/bin/env bash
# mixed_precision.sh: fp16 loss scaling and bf16 in real runs.
#  1. An induced overflow (a DeepSpeed fp16 block starting at scale 2^40) skips every step:
#     the saved weights equal the initial ones (within 1e-20: the reference is an fp32 run
#     with learning rate 1e-30, which moves a weight by at most 1e-30; ztrain refuses 0), and
#     metrics.jsonl / trainer_state.json count the skipped steps.
#  2. fp16 resume is exact: a run stopped at a checkpoint and resumed logs the losses and loss
#     scales of the uninterrupted run (the scaler's state is in the checkpoint).
#  3. bf16 and recomputation run end to end; bad combinations are one error line.
# usage: mixed_precision.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
fail=0
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 512, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}
J
$PY -c "
import random, sys; r = random.Random(3)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(40000)))" > "$W/tok.bin"
base=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 4
      --model_max_length 32 --logging_steps 1 --threads 2 --seed 7 --report_to none)
check() { if eval "$2"; then echo "ok    $1"; else echo "FAIL  $1"; fail=$((fail+1)); fi; }

echo '{"fp16": {"enabled": true, "initial_scale_power": 40, "hysteresis": 1}}' > "$W/overflow.json"
"$Z" train "${base[@]}" --output_dir "$W/ovf" --max_steps 3 --save_strategy no --deepspeed "$W/overflow.json" \
  > "$W/ovf.log" 2>&1 || { echo "FAIL overflow run: $(tail -1 "$W/ovf.log")"; exit 1; }
"$Z" train "${base[@]}" --output_dir "$W/init" --max_steps 1 --save_strategy no --learning_rate 1e-30 \
  --adam_epsilon 1 >/dev/null 2>&1
same_weights() {
  $PY - "$1" "$2" <<'P'
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: np.frombuffer(d[v['data_offsets'][0]:v['data_offsets'][1]], np.float32) for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(not (a.keys() == b.keys() and all(np.all(np.isfinite(a[k])) and np.max(np.abs(a[k] - b[k])) < 1e-20 for k in a)))
P
}
check "every overflowed step skipped, weights untouched" 'same_weights "$W/ovf/model.safetensors" "$W/init/model.safetensors"'
check "skipped steps and loss scale logged" \
  '$PY -c "import json,sys; h=[e for e in json.load(open(sys.argv[1]))[\"log_history\"] if \"loss\" in e]; \
  sys.exit(not (h[-1][\"skipped_steps\"] == 3 and h[-1][\"loss_scale\"] == 2.0**37))" "$W/ovf/trainer_state.json"'

# Resume: the scaler's state (scale, hysteresis, window) comes back with the checkpoint.
echo '{"fp16": {"enabled": true, "initial_scale_power": 20, "loss_scale_window": 3, "hysteresis": 2}}' > "$W/dyn.json"
run=("${base[@]}" --max_steps 10 --learning_rate 1e-3 --deepspeed "$W/dyn.json")
hist() { $PY -c "import json,sys; print([(e['loss'], e.get('loss_scale')) for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e])" "$1/trainer_state.json"; }
"$Z" train "${run[@]}" --output_dir "$W/full" --save_strategy no >/dev/null 2>&1
"$Z" train "${run[@]}" --output_dir "$W/part" --save_steps 5 --max_steps 10 >/dev/null 2>&1
rm -rf "$W/part/checkpoint-10"
"$Z" train "${run[@]}" --output_dir "$W/part" --save_steps 5 --resume_from_checkpoint "$W/part/checkpoint-5" \
  >/dev/null 2>&1
check "fp16 resume logs the uninterrupted losses and scales" '[ "$(hist "$W/full")" = "$(hist "$W/part")" ]'

for mode in "--bf16" "--bf16 --gradient_checkpointing" "--fp16 --recompute-granularity selective"; do
  # shellcheck disable=SC2086
  "$Z" train "${base[@]}" --output_dir "$W/m" --overwrite_output_dir --max_steps 2 --save_strategy no $mode \
    >/dev/null 2>&1
  rc=$?
  check "runs: $mode" '[ $rc -eq 0 ]'
done
expect_error() {  # a bad combination: exit 1 and one line naming it
  local want=$1; shift
  out=$("$Z" train "${base[@]}" --output_dir "$W/bad" --overwrite_output_dir --max_steps 1 "$@" 2>&1)
  rc=$?
  check "error: $*" '[ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q -- "$want"'
}
echo '{"bf16": {"enabled": true}}' > "$W/bf16.json"
expect_error "choose one" --bf16 --fp16
expect_error "choose one" --fp16 --deepspeed "$W/bf16.json"
expect_error "exceeds the model's 2 layers" --recompute-granularity full --recompute-num-layers 3
expect_error "needs a recomputation mode" --recompute-num-layers 1
expect_error "is not one of full, selective" --recompute-granularity partial
expect_error "nothing fits in" --auto_find_batch_size --max_memory 1MB
expect_error "is not a memory size" --max_memory lots
out=$("$Z" train "${base[@]}" --output_dir "$W/fit" --overwrite_output_dir --max_steps 1 --save_strategy no \
  --per_device_train_batch_size 64 --auto_find_batch_size --max_memory 1TB 2>&1)
check "auto_find_batch_size keeps what fits" 'echo "$out" | grep -q "micro-batch 64 (asked 64), recomputation none"'
echo "mixed_precision: $fail failed"
exit $((fail > 0))
