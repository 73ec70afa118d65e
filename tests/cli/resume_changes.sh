#!/usr/bin/env bash
# resume_changes.sh: resuming compares the whole resolved model config and the data it trained
# on (train file size and a hash of its first MiB, in trainer_state.json). A changed n_head, a
# changed layer_norm_epsilon or a train file with other contents is one error naming the field
# (they once resumed silently with another model or other data); --resume_allow_changes
# model / data lets a deliberate change through.
# usage: resume_changes.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
model() { echo "{\"model_type\": \"gpt2\", \"vocab_size\": 512, \"n_positions\": 64, \"n_embd\": 64, \"n_layer\": 2$1}"; }
model ', "n_head": 4' > "$W/m.json"
model ', "n_head": 8' > "$W/heads.json"
model ', "n_head": 4, "layer_norm_epsilon": 1e-3' > "$W/eps.json"
for s in 3 4; do
  /usr/bin/python3 -c "
import random, sys; r = random.Random($s)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(30000)))" > "$W/t$s.bin"
done
args=(train --per_device_train_batch_size 2 --model_max_length 32 --max_steps 8 --save_steps 4 --report_to none
  --threads 1)
"$Z" "${args[@]}" --model_config_path "$W/m.json" --train_file "$W/t3.bin" --output_dir "$W/ref" > "$W/ref.log" 2>&1 ||
  { echo "FAIL the first run failed"; tail -n 3 "$W/ref.log"; exit 1; }
rm -rf "$W/ref/checkpoint-8"
fail=0
# case NAME PATTERN(empty: resumes) ARGS...: resumes a copy of the run's folder from checkpoint-4.
case_() {
  local name=$1 pattern=$2 out="$W/$1" err rc
  shift 2
  cp -r "$W/ref" "$out"
  err=$("$Z" "${args[@]}" --output_dir "$out" --resume_from_checkpoint latest "$@" 2>&1 >"$W/$name.log"); rc=$?
  if [ -z "$pattern" ]; then
    if [ $rc -eq 0 ] && grep -q "Resuming from .*checkpoint-4 at step 4" "$W/$name.log"; then echo "ok   $name: resumed"
    else echo "FAIL $name: exit $rc, want a resume: $err"; fail=1; fi
  elif [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$pattern"; then
    echo "ok   $name: $err"
  else
    echo "FAIL $name: exit $rc (want non-zero and one line matching '$pattern'): $err"; fail=1
  fi
}
case_ same "" --model_config_path "$W/m.json" --train_file "$W/t3.bin"
case_ n_head 'model config "n_head" differs: the checkpoint has 4, this run 8; .*--resume_allow_changes model' \
  --model_config_path "$W/heads.json" --train_file "$W/t3.bin"
case_ eps 'model config "layer_norm_epsilon" differs: the checkpoint has 1e-05, this run 0.001' \
  --model_config_path "$W/eps.json" --train_file "$W/t3.bin"
case_ train_file '--train_file differs from the one the checkpoint was trained on.*--resume_allow_changes data' \
  --model_config_path "$W/m.json" --train_file "$W/t4.bin"
case_ n_head_allowed "" --model_config_path "$W/heads.json" --train_file "$W/t3.bin" --resume_allow_changes model
case_ train_file_allowed "" --model_config_path "$W/m.json" --train_file "$W/t4.bin" --resume_allow_changes data
case_ both_allowed "" --model_config_path "$W/eps.json" --train_file "$W/t4.bin" --resume_allow_changes model,data
case_ bad_value '--resume_allow_changes "modle" is not one of model, data' --model_config_path "$W/m.json" \
  --train_file "$W/t3.bin" --resume_allow_changes modle
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
