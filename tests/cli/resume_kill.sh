#!/usr/bin/env bash
# resume_kill.sh: a run killed with SIGKILL at random moments (checkpoints are saved every
# few steps, so some kills land inside a save) and resumed with --resume_from_checkpoint
# latest must log exactly (bit for bit) the losses of an uninterrupted run. Also: a
# damaged newest checkpoint is skipped by `latest` and named when asked for directly, and
# half-written (.tmp) or incomplete folders are ignored.
# usage: resume_kill.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
# Heads of 64: the attention kernels' specialised head size (other sizes take the generic path,
# about twice the CPU under the sanitizers; the kernel tests cover it).
cat > "$W/cfg.json" <<'J'
{"model_type": "llama", "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128}
J
$PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(2048).to_bytes(2, 'little') for _ in range(200000)))" > "$W/tok.bin"
# ZT_TEST_SUBSET=sanitizers (scripts/test_sanitizers.sh): runs of 40 steps, not 80, and one kill
# (below); the kill still lands mid-run, about 3 steps after checkpoint-4.
steps=80
[ "${ZT_TEST_SUBSET:-}" = sanitizers ] && steps=40
args=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 8
      --gradient_accumulation_steps 2 --model_max_length 64 --max_steps $steps --learning_rate 2e-3
      --lr_scheduler_type cosine --warmup_steps 10 --weight_decay 0.1 --logging_steps 1 --threads 2 --seed 7)
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e]))" "$1/trainer_state.json"; }

"$Z" train "${args[@]}" --output_dir "$W/full" --save_strategy no >/dev/null || exit 1
want=$(losses "$W/full")
fail=0; pass=0
# Each kill lands a chosen time after the first checkpoint appears (so the test does not depend
# on how busy the machine is); saves come every 4 steps, so some kills hit a save in progress.
# Sanitizer pass: one kill, not three. The resume code paths are the same for each; where a kill
# lands is what varies, and the plain pass covers that.
delays="0.1 0.6 1.4"
[ $steps = 40 ] && delays="0.6"
for delay in $delays; do
  out="$W/run_$delay"
  "$Z" train "${args[@]}" --output_dir "$out" --save_steps 4 --save_total_limit 3 >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ -d "$out/checkpoint-4" ] && break; sleep 0.05; done
  sleep "$delay"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  killed_at=$(ls -d "$out"/checkpoint-* 2>/dev/null | tr '\n' ' ')
  "$Z" train "${args[@]}" --output_dir "$out" --save_steps 4 --save_total_limit 3 --resume_from_checkpoint latest \
    > "$W/resume.log" 2>&1 || { echo "FAIL resume after kill at ${delay}s: $(tail -1 "$W/resume.log")"; fail=$((fail+1)); continue; }
  got=$(losses "$out")
  if [ "$got" = "$want" ]; then pass=$((pass+1)); echo "ok    killed at ${delay}s (had: $killed_at), $(grep Resuming "$W/resume.log")"
  else fail=$((fail+1)); echo "FAIL  killed at ${delay}s: losses differ"; fi
done

# Damage the newest checkpoint of the last run: latest falls back, a direct path is an error.
out="$W/run_$delay"
newest=$(ls -d "$out"/checkpoint-* | sort -t- -k2 -n | tail -1)
printf 'X' | dd of="$newest/model.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
mkdir -p "$out/checkpoint-99999.tmp" "$out/checkpoint-99998"
err=$("$Z" train "${args[@]}" --output_dir "$out" --resume_from_checkpoint "$newest" 2>&1 >/dev/null)
if printf '%s' "$err" | grep -qE 'model\.safetensors"? fails its checksum'; then pass=$((pass+1)); echo "ok    damaged checkpoint named: $err"
else fail=$((fail+1)); echo "FAIL  damaged checkpoint not detected: $err"; fi
log=$("$Z" train "${args[@]}" --output_dir "$out" --save_strategy no --resume_from_checkpoint latest 2>&1)
if printf '%s' "$log" | grep -q "Resuming from" && [ "$(losses "$out")" = "$want" ]; then
  pass=$((pass+1)); echo "ok    latest skipped the damaged one: $(printf '%s' "$log" | grep -E 'skipping|Resuming' | tr '\n' ' ')"
else fail=$((fail+1)); echo "FAIL  fallback to an intact checkpoint"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
