#!/usr/bin/env bash
# offload.sh: offload to disk (docs/offload.md) in real runs of a tiny GPT-2.
#  1. Exactness: per-step losses (trainer_state.json, full precision) and the saved model of runs with
#     the optimizer state on disk, and with ZeRO-3's parameters on disk too, equal the in-memory run's
#     bit for bit: AdamW, Sophia (its curvature pass streams too), bf16 optimizer state, bf16 compute; a DeepSpeed
#     JSON with the offload and aio keys (small blocks, shallow queue) gives the same.
#  2. A run resumed from an offloaded checkpoint ends with the uninterrupted in-memory run's model.
#  3. Bad input, one `ztrain: error:` line each: a missing nvme_path, one that is a file, one that is
#     not writable, a --max_host_memory below what one unit needs, an optimizer whose state cannot
#     stream, a file-size limit below the offload file (ulimit -f), and a disk that fills during
#     training (a small tmpfs, where mounting one is allowed): the checkpoint that does not fit is one
#     error line and the earlier checkpoint stays intact.
#  4. Checkpoints of a run under --max_host_memory stay under the cap (GPT-2 124M).
# usage: offload.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'umount "$W/small" 2>/dev/null; chmod -R u+w "$W" 2>/dev/null; rm -rf "$W"' EXIT
PY=/usr/bin/python3
fail=0
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 512, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}
J
$PY -c "
import random, sys; r = random.Random(3)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(40000)))" > "$W/tok.bin"
mkdir -p "$W/nv"
base=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 4
      --model_max_length 32 --logging_steps 1 --threads 2 --seed 7 --report_to none --weight_decay 0.1
      --max_steps 4 --save_strategy no)
disk=(--offload_optimizer nvme --nvme_path "$W/nv")
param=(--zero_stage 3 --offload_optimizer nvme --offload_param nvme --nvme_path "$W/nv")
check() { if eval "$2"; then echo "ok    $1"; else echo "FAIL  $1"; fail=$((fail+1)); fi; }
losses() { $PY -c "import json,sys; print([h['loss'] for h in json.load(open(sys.argv[1]))['log_history'] if 'loss' in h])" "$1/trainer_state.json"; }
run() {  # run NAME ARGS...: trains into $W/NAME
  local name=$1; shift
  "$Z" train "${base[@]}" --output_dir "$W/$name" "$@" > "$W/$name.log" 2>&1 || echo "FAIL  $name: $(tail -1 "$W/$name.log")"
}
same() { [ "$(losses "$W/$1")" = "$(losses "$W/$2")" ] && cmp -s "$W/$1/model.safetensors" "$W/$2/model.safetensors"; }

# 1. Exactness. --max_host_memory is not used here (it sizes windows for big models); a small
# window is forced through the DeepSpeed buffer_size / the cap path in section 3.
for opt in adamw_torch sophia; do
  extra=()
  [ $opt = sophia ] && extra=(--optim_args hessian_interval=2)
  run mem_$opt --optim $opt "${extra[@]}"
  if [ $opt = adamw_torch ]; then  # the optimizer-only path is the same for every optimizer
    run disk_$opt --optim $opt "${extra[@]}" "${disk[@]}"
    check "$opt: optimizer state on disk, losses and model bit for bit" "same mem_$opt disk_$opt"
  fi
  run param_$opt --optim $opt "${extra[@]}" "${param[@]}"
  check "$opt: ZeRO-3 parameters on disk too, bit for bit" "same mem_$opt param_$opt"
done
run mem_bf16 --optim_state_dtype bf16
run param_bf16 --optim_state_dtype bf16 "${param[@]}"
check "bf16 optimizer state (stochastic rounding keyed by state coordinate) on disk, bit for bit" "same mem_bf16 param_bf16"
head -c 20000 "$W/tok.bin" > "$W/val.bin"
acc=(--gradient_accumulation_steps 2 --per_device_train_batch_size 2 --validation_file "$W/val.bin" --do_eval true
     --eval_strategy steps --eval_steps 2 --max_eval_samples 16)
run mem_acc "${acc[@]}"
run param_acc "${acc[@]}" "${param[@]}"
check "gradient accumulation and evaluation during the step in flight, bit for bit" "same mem_acc param_acc"
check "... and the evaluation losses too" "grep -q eval_loss '$W/mem_acc/trainer_state.json' && [ \"\$(grep -o 'eval_loss[^,]*' '$W/mem_acc/trainer_state.json')\" = \"\$(grep -o 'eval_loss[^,]*' '$W/param_acc/trainer_state.json')\" ]"
run mem_bf16c --bf16
run param_bf16c --bf16 "${param[@]}"
check "bf16 compute (the compute copy made from the parameters read from disk), bit for bit" "same mem_bf16c param_bf16c"
cat > "$W/ds.json" <<J
{"zero_optimization": {"stage": 3, "sub_group_size": 4096,
  "offload_optimizer": {"device": "nvme", "nvme_path": "$W/nv", "buffer_count": 3, "pin_memory": true},
  "offload_param": {"device": "nvme", "nvme_path": "$W/nv", "buffer_count": 3, "buffer_size": 1e8, "max_in_cpu": 1e9}},
 "aio": {"block_size": 65536, "queue_depth": 4, "thread_count": 1, "single_submit": true, "overlap_events": false}}
J
run ds --deepspeed "$W/ds.json"
check "DeepSpeed offload_optimizer / offload_param / aio keys (4096-element chunks): bit for bit" "same mem_adamw_torch ds"
check "sub_group_size cuts the units into chunks" "grep -q 'chunks of 4096 elements' '$W/ds.log'"
check "the offload line is printed" "grep -q 'Offload to disk:' '$W/ds.log'"
check "the scratch file is gone after the run" "[ -z \"\$(ls -A '$W/nv')\" ]"

# 2. Resume from an offloaded checkpoint.
run ck "${param[@]}" --save_strategy steps --save_steps 2
run ck "${param[@]}" --save_strategy steps --save_steps 2 --resume_from_checkpoint "$W/ck/checkpoint-2" --overwrite_output_dir
check "resumed from an offloaded checkpoint: the uninterrupted in-memory model" \
  "cmp -s '$W/mem_adamw_torch/model.safetensors' '$W/ck/model.safetensors'"

# 3. Bad input: exactly one error line each.
one_error() {  # one_error LABEL PATTERN ARGS...
  local label=$1 pat=$2; shift 2
  local out
  out=$("$Z" train "${base[@]}" --output_dir "$W/bad" --overwrite_output_dir "$@" 2>&1 >/dev/null)
  if [ "$(printf '%s\n' "$out" | grep -c '^ztrain: error:')" = 1 ] && printf '%s' "$out" | grep -q -- "$pat"; then
    echo "ok    $label"
  else
    echo "FAIL  $label: $out"; fail=$((fail+1))
  fi
}
one_error "nvme_path missing" "does not exist" "${disk[@]:0:2}" --nvme_path "$W/nope"
touch "$W/afile"
one_error "nvme_path is a file" "not a folder" "${disk[@]:0:2}" --nvme_path "$W/afile"
mkdir -p "$W/ro" && chmod 555 "$W/ro"
if [ "$(id -u)" = 0 ]; then ro=/proc; else ro=$W/ro; fi  # root writes through a mode of 555
one_error "nvme_path not writable" "offload file\|not writable" "${disk[@]:0:2}" --nvme_path "$ro"
one_error "--max_host_memory below one unit" "needs .* for the fp32 gradients" "${param[@]}" --max_host_memory 100MiB
one_error "--offload_optimizer nvme without a folder" "needs a folder" --offload_optimizer nvme
one_error "--nvme_path without offload" "nothing is offloaded" --nvme_path "$W/nv"
one_error "an optimizer whose state cannot stream" "cannot be offloaded" "${disk[@]}" --optim adafactor
one_error "offload_param without ZeRO-3" "ZeRO-3" --offload_optimizer nvme --offload_param nvme --nvme_path "$W/nv"
out=$( (ulimit -f 100; "$Z" train "${base[@]}" --output_dir "$W/bad" --overwrite_output_dir "${param[@]}" 2>&1 >/dev/null) )
check "a file-size limit below the offload file: one line (file too large)" \
  "[ \"\$(printf '%s\n' \"\$out\" | grep -c '^ztrain: error:')\" = 1 ] && printf '%s' \"\$out\" | grep -q 'file too large'"
# A disk that fills during training: the offload file is reserved at start, so it is a checkpoint
# that meets the full disk; the one before it stays intact.
mkdir -p "$W/small"
if mount -t tmpfs -o size=6m tmpfs "$W/small" 2>/dev/null; then
  mkdir -p "$W/small/nv"
  out=$("$Z" train "${base[@]}" --max_steps 40 --save_strategy steps --save_steps 2 --output_dir "$W/small/out" \
    --zero_stage 3 --offload_optimizer nvme --offload_param nvme --nvme_path "$W/small/nv" 2>&1 >/dev/null)
  check "disk full during training: one error line" \
    "[ \"\$(printf '%s\n' \"\$out\" | grep -c '^ztrain: error:')\" = 1 ]"
  check "disk full: the earlier checkpoint is intact" "[ -f '$W/small/out/checkpoint-2/checksums.json' ]"
  echo "      ($(printf '%s' "$out" | grep '^ztrain: error:' | cut -c1-160))"
else
  echo "skip  disk full during training (mounting a tmpfs is not allowed here)"
fi

# 4. A checkpoint save streams the state from the file (one tensor at a time): GPT-2 124M (1.9 GiB of
# fp32 training state in memory) with checkpoints at steps 2 and 4 under --max_host_memory 1800MiB
# keeps the process's peak resident memory (its own VmHWM report) under the cap, with the in-memory
# run's losses. Not under the sanitizers (their shadow memory is resident too; and it is slow there).
if [ "${ZT_TEST_SUBSET:-}" != sanitizers ]; then
  $PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(50000).to_bytes(2, 'little') for _ in range(20000)))" > "$W/big.bin"
  big=(--model_config_path "$(dirname "$0")/../../bench/configs/gpt2-124m.json" --train_file "$W/big.bin"
       --per_device_train_batch_size 1 --model_max_length 64 --logging_steps 1 --threads 2 --seed 7 --report_to none
       --max_steps 4 --save_steps 2)
  "$Z" train "${big[@]}" --output_dir "$W/capped" --offload_optimizer nvme --nvme_path "$W/nv" \
    --max_host_memory 1800MiB > "$W/capped.log" 2>&1 || echo "FAIL  capped: $(tail -1 "$W/capped.log")"
  "$Z" train "${big[@]}" --output_dir "$W/uncapped" > "$W/uncapped.log" 2>&1 || echo "FAIL  uncapped"
  hwm=$(grep -o 'peak resident (VmHWM) *= [0-9.]* [GM]iB' "$W/capped.log" | awk '{print $(NF-1), $NF}')
  check "checkpoints at steps 2, 4 under --max_host_memory 1800MiB: peak resident $hwm stays under the cap" \
    "[ -d '$W/capped/checkpoint-4' ] && $PY -c \"import sys; v, u = sys.argv[1].split(); sys.exit(0 if float(v) * (1024 if u == 'GiB' else 1) < 1800 else 1)\" '$hwm'"
  check "  ... with the in-memory run's losses" "[ \"\$(losses '$W/capped')\" = \"\$(losses '$W/uncapped')\" ]"
fi

echo "offload: $fail failed"
exit $((fail > 0))
