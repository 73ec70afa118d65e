#!/usr/bin/env bash
# run_lineage.sh: issue 21's run-lineage and checks-before-work items. --overwrite_output_dir never
# deletes what the same command reads; a fork (a resume from another folder's checkpoint) gets its
# own run id and flash snapshot, so resuming the parent never loads the fork's newer state; the lock
# file is never written through a planted symbolic link; a validation file too short for one
# sequence stops the run before the first step; flags that need another are refused, not ignored.
# Each refusal: a non-zero exit below 128 and exactly one `ztrain: error:` line.
# usage: run_lineage.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export ZT_FLASH_DIR="$W/shm" OMP_NUM_THREADS=1
mkdir -p "$ZT_FLASH_DIR"
PY=/usr/bin/python3
cat > "$W/cfg.json" <<'J'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32}
J
$PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(256).to_bytes(2, 'little') for _ in range(20000)))" > "$W/tok.bin"
model=(--model_config_path "$W/cfg.json")
args=(--train_file "$W/tok.bin" --per_device_train_batch_size 2 --model_max_length 32 --max_steps 16
      --save_steps 4 --logging_steps 1 --threads 1 --seed 7 --report_to none --lr_scheduler_type constant)
fail=0; pass=0
ok() { pass=$((pass+1)); echo "ok    $*"; }
bad() { fail=$((fail+1)); echo "FAIL  $*"; }
# $1 name, $2 pattern the error must match, then the command.
one_error() {
  local name=$1 pat=$2; shift 2
  "$@" > "$W/out.log" 2> "$W/err.log"; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(grep -c . "$W/err.log")" -eq 1 ] &&
     grep -q "^ztrain: error: .*$pat" "$W/err.log"; then ok "$name: $(cut -c1-160 "$W/err.log")"
  else bad "$name: exit $rc: $(head -3 "$W/err.log")"; fi
}
run_id() { $PY -c "import json,sys; print(json.load(open(sys.argv[1] + '/run.json'))['run_id'])" "$1"; }

# 1. --overwrite_output_dir never deletes what the command reads.
"$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/a" >/dev/null 2>&1 || { echo "FAIL first run"; exit 1; }
one_error "overwrite keeps --model_name_or_path" "would delete .*checkpoint-8, which --model_name_or_path" \
  "$Z" train "${args[@]}" --model_name_or_path "$W/a/checkpoint-8" --output_dir "$W/a" --overwrite_output_dir
cp "$W/tok.bin" "$W/a/checkpoint-4/tok.bin"
one_error "overwrite keeps --train_file" "would delete .*checkpoint-4, which --train_file" \
  "$Z" train "${model[@]}" "${args[@]}" --train_file "$W/a/checkpoint-4/tok.bin" --output_dir "$W/a" --overwrite_output_dir
[ -f "$W/a/checkpoint-8/model.safetensors" ] && [ -f "$W/a/checkpoint-4/tok.bin" ] &&
  ok "the checkpoints named as inputs are still there" || bad "an input was deleted"
"$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/a" --overwrite_output_dir --max_steps 2 >/dev/null 2>&1 &&
  [ ! -d "$W/a/checkpoint-8" ] && ok "overwrite without such inputs still clears the old checkpoints" ||
  bad "overwrite without inputs inside"

# 2. A fork gets its own run id and snapshot. A fails at step 9 (snapshot of step 8), its fork B
# (from A's checkpoint-4) fails at step 13 (snapshot of step 12); resuming A must not take B's.
ZT_TEST_FAIL_AT=0:9 "$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/A" --flash_checkpoint >/dev/null 2>&1
ZT_TEST_FAIL_AT=0:13 "$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/B" --flash_checkpoint \
  --resume_from_checkpoint "$W/A/checkpoint-4" > "$W/B.log" 2>&1
ra=$(run_id "$W/A"); rb=$(run_id "$W/B")
parent=$($PY -c "import json,sys; print(json.load(open(sys.argv[1] + '/run.json'))['forked_from']['run_id'])" "$W/B")
if [ -n "$ra" ] && [ "$ra" != "$rb" ] && [ "$parent" = "$ra" ] && [ "$(ls "$ZT_FLASH_DIR" | wc -l)" -eq 2 ]; then
  ok "fork: run $rb, forked from $ra; two snapshots: $(ls "$ZT_FLASH_DIR" | tr '\n' ' ')"
else bad "fork: A $ra, B $rb (parent $parent), snapshots: $(ls "$ZT_FLASH_DIR" | tr '\n' ' ')"; fi
"$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/A" --flash_checkpoint --resume_from_checkpoint latest \
  > "$W/A2.log" 2>&1
if grep -qE "Resuming from .* at step 8( |$)" "$W/A2.log"; then ok "the parent resumes its own state: $(grep Resuming "$W/A2.log")"
else bad "the parent resumed: $(grep -E 'Resuming|error' "$W/A2.log")"; fi

# 3. The lock file is never written through a planted link (nor is anything else in the folder).
mkdir -p "$W/c"
echo precious > "$W/victim"
ln -s "$W/victim" "$W/c/.ztrain.lock"
one_error "lock file link" "is a symbolic link" "$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/c"
[ "$(cat "$W/victim")" = precious ] && ok "the link's target is untouched" || bad "the link's target was written"

# 4. A validation file too short for one sequence: refused before the first step.
$PY -c "import sys; sys.stdout.buffer.write(bytes(20))" > "$W/val.bin"
one_error "short validation file" "--validation_file .* fewer than one sequence" \
  "$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/v" --validation_file "$W/val.bin" --max_steps 100000
grep -q "'loss'" "$W/out.log" && bad "short validation file: it trained first" || ok "short validation file: no step ran"

# 5. Flags that only act with another are refused when it is missing.
for extra in "--eval_steps 5" "--max_eval_samples 3" "--eos_token_id 1" "--spike_window 10" \
             "--resume_allow_changes data" "--save_strategy no --save_total_limit 2" \
             "--spike_policy skip --spike_max_rollbacks 2" "--report_to none --logging_dir $W/tb"; do
  # shellcheck disable=SC2086
  one_error "refused: $extra" "has no effect without" "$Z" train "${model[@]}" "${args[@]}" --output_dir "$W/f" $extra
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
