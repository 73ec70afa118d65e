#!/usr/bin/env bash
# resume_hygiene.sh: which checkpoint `--resume_from_checkpoint latest` picks and which ones
# --save_total_limit deletes, when a folder holds checkpoints of more than one attempt:
#   1. resuming from an older checkpoint-5 (checkpoint-10 of the first attempt exists) with
#      --save_total_limit 3: the new checkpoints survive, the abandoned checkpoint-10 is pruned
#      first, and `latest` afterwards picks the newest checkpoint of the resumed attempt (once
#      the new ones were pruned as they were written and `latest` went back to checkpoint-10);
#   2. `latest` orders checkpoints by the step recorded in them, not by folder name;
#   3. a fresh run with --overwrite_output_dir removes the old run's checkpoint-* at start, so
#      `latest` later picks the new run's (once it picked the old run's checkpoint-10).
# A failure mid-run is the ZT_TEST_FAIL_AT=0:STEP hook (the run stops at the start of STEP).
# usage: resume_hygiene.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
echo '{"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}' > "$W/m.json"
/usr/bin/python3 -c "
import random, sys; r = random.Random(3)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(30000)))" > "$W/t.bin"
args=(train --model_config_path "$W/m.json" --train_file "$W/t.bin" --per_device_train_batch_size 2
  --model_max_length 32 --report_to none --threads 1 --logging_steps 1)
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
cks() { (cd "$1" && ls -d checkpoint-* 2>/dev/null | sort -t- -k2 -n | tr '\n' ' '); }
# resumes_at DIR STEP: `latest` in DIR resumes at STEP (then trains on to step 20, saving nothing).
resumes_at() {
  local log
  log=$("$Z" "${args[@]}" --output_dir "$1" --max_steps 20 --save_strategy no --resume_from_checkpoint latest 2>&1)
  printf '%s' "$log" | grep -o "Resuming from .*" | grep -q "at step $2\$"
}

# 1. Resume from an older checkpoint with --save_total_limit.
o="$W/one"
"$Z" "${args[@]}" --output_dir "$o" --max_steps 10 --save_steps 5 > /dev/null 2>&1 || bad "1: first attempt failed"
ZT_TEST_FAIL_AT=0:8 "$Z" "${args[@]}" --output_dir "$o" --max_steps 10 --save_steps 1 --save_total_limit 3 \
  --resume_from_checkpoint "$o/checkpoint-5" > /dev/null 2>&1
have=$(cks "$o")
if [ "$have" = "checkpoint-6 checkpoint-7 checkpoint-8 " ]; then ok "1: pruning kept the resumed attempt's checkpoints: $have"
else bad "1: after resuming from checkpoint-5 and saving 6, 7, 8 with limit 3 the folder holds: $have"; fi
if resumes_at "$o" 8; then ok "1: latest picks checkpoint-8 of the resumed attempt"
else bad "1: latest does not resume at step 8 (holds: $(cks "$o"))"; fi

# 2. Folder names do not decide: checkpoint-50 holds step 5.
o="$W/two"
"$Z" "${args[@]}" --output_dir "$o" --max_steps 10 --save_steps 5 > /dev/null 2>&1 || bad "2: run failed"
mv "$o/checkpoint-5" "$o/checkpoint-50"
if resumes_at "$o" 10; then ok "2: latest follows the recorded step (checkpoint-10 over a renamed checkpoint-50 of step 5)"
else bad "2: latest picked the folder name over the recorded step"; fi

# 3. --overwrite_output_dir: the old run's checkpoints go.
o="$W/three"
"$Z" "${args[@]}" --output_dir "$o" --max_steps 10 --save_steps 5 > /dev/null 2>&1 || bad "3: first run failed"
ZT_TEST_FAIL_AT=0:7 "$Z" "${args[@]}" --output_dir "$o" --max_steps 10 --save_steps 3 --overwrite_output_dir \
  > /dev/null 2>&1
have=$(cks "$o")
if [ "$have" = "checkpoint-3 checkpoint-6 " ]; then ok "3: --overwrite_output_dir removed the old run's checkpoints: $have"
else bad "3: after --overwrite_output_dir and saves at 3, 6 the folder holds: $have"; fi
if resumes_at "$o" 6; then ok "3: latest picks the new run's checkpoint-6"
else bad "3: latest does not resume the new run at step 6"; fi
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
