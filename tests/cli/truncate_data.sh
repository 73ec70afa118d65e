#!/usr/bin/env bash
# truncate_data.sh: a token file changed while training reads it must stop the run with one
# error naming the file, not a SIGBUS (exit 135) with no message, nor go on with other data.
#   truncate:  the file is cut to 4 KiB mid-run (pages past the end would raise SIGBUS);
#   rewrite:   the file is rewritten in place with the same size (cp truncates, then writes);
#   eval:      the same truncation under `ztrain eval`, which reads through the same file class.
# usage: truncate_data.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}
J
# 4M tokens (8 MiB): windows are drawn from all over the file, so reads soon pass a cut.
$PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(bytes(r.randrange(200) if i % 2 == 0 else 0 for i in range(8 << 20)))" > "$W/orig.bin"
fail=0
# run_and_change NAME CHANGE_COMMAND: trains on a copy, applies the change once training has
# started, expects one error line naming the file and an exit code below 128.
run_and_change() {
  local name=$1 change=$2 rc err
  cp "$W/orig.bin" "$W/tok.bin"
  rm -rf "$W/out"
  timeout 120 "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --output_dir "$W/out" \
    --per_device_train_batch_size 4 --model_max_length 64 --max_steps 1000000 --threads 1 --report_to none \
    --save_strategy no --logging_steps 1000 >/dev/null 2>"$W/err" &
  local pid=$!
  for _ in $(seq 600); do [ -s "$W/out/metrics.jsonl" ] && break; sleep 0.05; done
  eval "$change"
  wait $pid; rc=$?
  err=$(cat "$W/err")
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
     printf '%s' "$err" | grep -q "^ztrain: error: .*tok\.bin"; then echo "ok    $name: exit $rc: $err"
  else fail=$((fail + 1)); echo "FAIL  $name: exit $rc: $err"; fi
}
run_and_change truncate 'truncate -s 4096 "$W/tok.bin"'
$PY -c "import sys; sys.stdout.buffer.write(bytes([7, 0]) * (4 << 20))" > "$W/other.bin"
run_and_change rewrite 'cp "$W/other.bin" "$W/tok.bin"'

# eval: a model to evaluate, and a file cut while it is read.
"$Z" train --model_config_path "$W/cfg.json" --train_file "$W/orig.bin" --output_dir "$W/model" --max_steps 1 \
  --per_device_train_batch_size 2 --model_max_length 16 --report_to none >/dev/null 2>&1 || { echo "FAIL: model"; exit 1; }
cp "$W/orig.bin" "$W/tok.bin"
"$Z" eval --model_name_or_path "$W/model" --validation_file "$W/tok.bin" --model_max_length 64 --threads 1 \
  >/dev/null 2>"$W/err" &
pid=$!
sleep 0.5; truncate -s 4096 "$W/tok.bin"
wait $pid; rc=$?
err=$(cat "$W/err")
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && printf '%s' "$err" | grep -q "^ztrain: error: .*tok\.bin"; then
  echo "ok    eval: exit $rc: $err"
else fail=$((fail + 1)); echo "FAIL  eval: exit $rc: $err"; fi
[ $fail -eq 0 ]
