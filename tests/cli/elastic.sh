#!/usr/bin/env bash
# elastic.sh: `ztrain launch --max_restarts R` as an elastic agent on 2 ranks. A rank that fails
# mid-run (test hook ZT_TEST_FAIL_AT=rank:step:attempt, in the first attempt only) ends the job;
# the agent restarts it from the newest checkpoint and the run finishes with per-step losses bit
# for bit those of an uninterrupted run. A failure in every attempt exhausts --max_restarts and
# the agent exits non-zero saying so. Bad agent flags are one error line each.
# usage: elastic.sh path/to/ztrain   (needs mpirun)
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}
J
$PY -c "
import random, sys; r = random.Random(9)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(40000)))" > "$W/tok.bin"
args=(train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 2
      --gradient_accumulation_steps 2 --model_max_length 32 --max_steps 12 --save_steps 4 --logging_steps 1
      --learning_rate 2e-3 --report_to none --threads 1 --seed 3)
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e]))" "$1/trainer_state.json"; }
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$Z" launch --nproc_per_node 2 -- "${args[@]}" --output_dir "$W/ref" > "$W/ref.log" 2>&1 ||
  { bad "the uninterrupted run failed"; tail -n 5 "$W/ref.log"; exit 1; }
want=$(losses "$W/ref")

# Rank 1 fails at step 7 of the first attempt (checkpoint-4 exists); the agent resumes from it.
t0=$(date +%s.%N)
ZT_TEST_FAIL_AT=1:7:0 "$Z" launch --nproc_per_node 2 --max_restarts 2 -- "${args[@]}" --output_dir "$W/el" \
  > "$W/el.log" 2>&1
rc=$?
t1=$(date +%s.%N)
if [ $rc -eq 0 ] && grep -q "launch: restart 1 of 2: 2 ranks on 1 host(s), gradient accumulation 2" "$W/el.log" &&
   grep -q "Resuming from .*checkpoint-4" "$W/el.log"; then
  got=$(losses "$W/el")
  if [ "$got" = "$want" ]; then ok "a rank failed at step 7, restarted from checkpoint-4, losses equal bit for bit ($(
    $PY -c "print(round($t1 - $t0, 1))") s in all)"
  else bad "losses differ after the restart: $got vs $want"; fi
else
  bad "agent run: exit $rc"; tail -n 8 "$W/el.log"
fi

# A failure in every attempt: the agent gives up after --max_restarts and exits non-zero.
ZT_TEST_FAIL_AT=1:3 "$Z" launch --nproc_per_node 2 --max_restarts 1 -- "${args[@]}" --output_dir "$W/gu" \
  > "$W/gu.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "launch: giving up after 1 restart(s)" "$W/gu.log" &&
   [ "$(grep -c 'launch: the job failed' "$W/gu.log")" -eq 2 ]; then ok "failing every attempt: gave up after 1 restart, exit $rc"
else bad "give-up case: exit $rc"; tail -n 5 "$W/gu.log"; fi

# Bad agent flags: one error line each, non-zero.
# With --flash_checkpoint a job can fail before its first persist seals checkpoint-N: the agent
# must see the snapshot in shared memory and resume, not start over.
ZT_TEST_FAIL_AT=1:4:0 "$Z" launch --nproc_per_node 2 --max_restarts 1 -- "${args[@]}" --save_steps 3 \
  --flash_checkpoint --output_dir "$W/fl" > "$W/fl.log" 2>&1
rc=$?
"$Z" launch --nproc_per_node 2 -- "${args[@]}" --save_steps 3 --output_dir "$W/flref" > /dev/null 2>&1
if [ $rc -eq 0 ] && grep -q "launch: restart 1 of 1: .*resuming from the newest checkpoint" "$W/fl.log" &&
   grep -q "Resuming from .*at step 3" "$W/fl.log" && [ "$(losses "$W/fl")" = "$(losses "$W/flref")" ]; then
  ok "flash: a failure at step 5 resumed from step 3 ($(grep -o 'Resuming from [^(]*' "$W/fl.log" | head -1))"
else bad "flash restart: exit $rc"; grep -E "launch:|Resum" "$W/fl.log" | tail -n 4; fi

check_err() {
  local name=$1 pattern=$2 err rc
  shift 2
  err=$("$Z" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$pattern"; then
    ok "$name: $err"
  else bad "$name: exit $rc: $err"; fi
}
check_err nnodes_order "is not N or MIN:MAX" launch --nnodes 3:2 --max_restarts 1 -- "${args[@]}" --output_dir "$W/x"
check_err nnodes_hosts "needs at least 2 hosts" launch --nnodes 2:4 -- "${args[@]}" --output_dir "$W/x"
check_err not_train "restart .train. jobs" launch --max_restarts 1 -- eval --model_name_or_path "$W/ref"
check_err no_output "give train an --output_dir" launch --max_restarts 1 -- train --model_config_path "$W/cfg.json"
exit $fail
