#!/usr/bin/env bash
# flash_ckpt.sh: --flash_checkpoint (docs/fault-tolerance.md#flash-checkpoints). A run saving
# through shared memory writes the same checkpoints (same tensors) and losses as one saving
# directly and frees its snapshot at the end; kill -9 while a snapshot is persisted resumes from
# the snapshot (newer than any checkpoint on disk); kill -9 while a snapshot is copied leaves a
# torn snapshot that is ignored (with a line) for the previous checkpoint; SIGTERM persists and
# exits 0; 2 ranks under mpirun agree. Losses after every resume equal the uninterrupted run's
# bit for bit (fp32). The kills land in pauses of the test hook ZT_TEST_FLASH_PAUSE.
# usage: flash_ckpt.sh path/to/ztrain [path/to/mpirun]
set -u
Z=$1
MPI=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export ZT_FLASH_DIR="$W/shm"  # the snapshots, instead of /dev/shm
mkdir -p "$ZT_FLASH_DIR"
PY=/usr/bin/python3
# Heads of 64: the attention kernels' specialised head size (other sizes take the generic path,
# about twice the CPU under the sanitizers; the kernel tests cover it).
cat > "$W/cfg.json" <<'J'
{"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 1, "num_key_value_heads": 1, "max_position_embeddings": 64}
J
$PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(100000)))" > "$W/tok.bin"
args=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 4
      --gradient_accumulation_steps 2 --model_max_length 64 --max_steps 40 --learning_rate 2e-3
      --lr_scheduler_type cosine --warmup_steps 5 --logging_steps 1 --threads 1 --seed 7 --save_steps 10
      --report_to none)
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e]))" "$1/trainer_state.json"; }
# The tensors of two safetensors files (headers differ by the save id): equal bytes per tensor.
same_tensors() { $PY - "$1" "$2" <<'P'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
P
}
fail=0; pass=0
ok() { pass=$((pass+1)); echo "ok    $*"; }
bad() { fail=$((fail+1)); echo "FAIL  $*"; }
wait_line() { for _ in $(seq 1200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

"$Z" train "${args[@]}" --output_dir "$W/plain" >/dev/null 2>&1 || exit 1
want=$(losses "$W/plain")

# A whole run: same losses, the same tensors in every checkpoint, the snapshot removed at the end.
"$Z" train "${args[@]}" --output_dir "$W/flash" --flash_checkpoint > "$W/flash.log" 2>&1 || { cat "$W/flash.log"; exit 1; }
same=1
for s in 10 20 30 40; do
  for f in model.safetensors state-00000-of-00001.safetensors; do
    same_tensors "$W/flash/checkpoint-$s/$f" "$W/plain/checkpoint-$s/$f" || same=0
  done
done
if [ "$(losses "$W/flash")" = "$want" ] && [ $same -eq 1 ] && [ -z "$(ls "$ZT_FLASH_DIR")" ]; then
  ok "full run: losses and checkpoint tensors equal the direct saves'; $(grep -m1 'Flash checkpoint' "$W/flash.log")"
else bad "full run: same tensors $same, snapshots left: $(ls "$ZT_FLASH_DIR")"; fi

# $1 name, $2 pause (copy:N | persist:N), $3 the resume line wanted
kill_case() {
  local name=$1 out="$W/$1" log="$W/$1.log"
  ZT_TEST_FLASH_PAUSE=$2 "$Z" train "${args[@]}" --output_dir "$out" --flash_checkpoint > "$log" 2>&1 &
  local pid=$!
  wait_line "$log" "test hook: paused" || { bad "$name: no pause"; kill -9 $pid; return; }
  kill -9 $pid; wait $pid 2>/dev/null
  local had; had=$(ls -d "$out"/checkpoint-* 2>/dev/null | xargs -n1 basename | tr '\n' ' ')
  "$Z" train "${args[@]}" --output_dir "$out" --flash_checkpoint --resume_from_checkpoint latest > "$log.resume" 2>&1 ||
    { bad "$name: resume failed: $(tail -1 "$log.resume")"; return; }
  if ! grep -q "$3" "$log.resume"; then bad "$name: no line \"$3\" (had $had): $(grep -i 'resum\|flash' "$log.resume")"; return; fi
  if [ "$(losses "$out")" = "$want" ] && [ -f "$out/checkpoint-20/checksums.json" ]; then
    ok "$name: killed with $had on disk; $(grep -E 'ignored|Resuming' "$log.resume" | tr '\n' ' ')"
  else bad "$name: losses after resume differ"; fi
}
kill_case kill_in_persist persist:20 "Resuming from the flash snapshot .* at step 20"
kill_case kill_in_copy copy:20 "incomplete (torn"

# SIGTERM with flash checkpoints: the stop's snapshot is persisted before the exit line.
out="$W/term"
"$Z" train "${args[@]}" --output_dir "$out" --flash_checkpoint --max_steps 400 > "$W/term.log" 2>&1 &
pid=$!
wait_line "$W/term.log" "step 14/" && kill -TERM $pid
wait $pid; rc=$?
step=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) of.*/\1/p' "$W/term.log")
if [ $rc -eq 0 ] && [ -n "$step" ] && [ -f "$out/checkpoint-$step/checksums.json" ] && [ -z "$(ls "$ZT_FLASH_DIR")" ]; then
  ok "SIGTERM: exit 0, checkpoint-$step persisted, snapshot removed"
else bad "SIGTERM: exit $rc, step '$step', $(ls "$out")"; fi

if [ -n "$MPI" ]; then
  M=("$MPI" -np 2 --oversubscribe)
  "${M[@]}" "$Z" train "${args[@]}" --output_dir "$W/plain2" >/dev/null 2>&1 || exit 1
  out="$W/mpi"
  ZT_TEST_FLASH_PAUSE=persist:30 "${M[@]}" "$Z" train "${args[@]}" --output_dir "$out" --flash_checkpoint > "$W/mpi.log" 2>&1 &
  pid=$!
  wait_line "$W/mpi.log" "test hook: paused"
  kill -9 $(pgrep -P $pid) 2>/dev/null; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  "${M[@]}" "$Z" train "${args[@]}" --output_dir "$out" --flash_checkpoint --resume_from_checkpoint latest > "$W/mpi.resume" 2>&1
  if grep -q "Resuming from the flash snapshot .* at step 30" "$W/mpi.resume" && [ "$(losses "$out")" = "$(losses "$W/plain2")" ]; then
    ok "2 ranks: killed in the persist of step 30, resumed from the snapshots, losses equal"
  else bad "2 ranks: $(grep -i 'resum\|flash\|error' "$W/mpi.resume" | head -3)"; fi
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
