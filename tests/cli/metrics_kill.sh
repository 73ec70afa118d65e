#!/usr/bin/env bash
# metrics_kill.sh: metrics.jsonl must survive a resume killed with SIGKILL at any moment of its
# start-up. A run saves checkpoint-4; then N times a resume (--resume_from_checkpoint latest) is
# started and killed after a random delay spread over its start-up and first steps. After every
# kill metrics.jsonl must hold steps 1..K, each once and in order, with K >= the newest
# checkpoint's step: never fewer lines than the checkpoint it will resume from.
# Then a write error (a file-size limit standing in for a full disk) must stop the run with one
# error naming metrics.jsonl, and a damaged line must be named with its line number.
# usage: metrics_kill.sh path/to/ztrain [N (default 10)] [seed]
set -u
Z=$1
N=${2:-10}
SEED=${3:-$RANDOM}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}
J
$PY -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(200).to_bytes(2, 'little') for _ in range(50000)))" > "$W/tok.bin"
args=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 2
      --model_max_length 32 --logging_steps 1 --threads 1 --report_to none)
saves=(--save_steps 4 --save_total_limit 2
      --output_dir "$W/out")
"$Z" train "${args[@]}" "${saves[@]}" --max_steps 4 >/dev/null 2>&1 || { echo "FAIL: first run"; exit 1; }

# Prints "ok K C" (lines for steps 1..K, newest checkpoint C) or "bad <why>".
check() {
  $PY - "$W/out" <<'P'
import json, os, re, sys
out = sys.argv[1]
ckpts = [int(m.group(1)) for d in os.listdir(out) if (m := re.fullmatch(r"checkpoint-(\d+)", d))]
newest = max(ckpts) if ckpts else 0
try:
    steps = [json.loads(l)["step"] for l in open(out + "/metrics.jsonl") if l.strip()]
except Exception as e:
    print("bad unreadable:", e); sys.exit()
if steps != list(range(1, len(steps) + 1)):
    print("bad steps are not 1..K:", steps[:5], "...", steps[-5:])
elif len(steps) < newest:
    print(f"bad {len(steps)} lines but checkpoint-{newest}")
else:
    print(f"ok {len(steps)} {newest}")
P
}

# Start-up length of a resume on this machine now, so the kills spread over it whatever the load.
t0=$(date +%s%N)
"$Z" train "${args[@]}" "${saves[@]}" --max_steps 6 --resume_from_checkpoint latest >/dev/null 2>&1 || { echo "FAIL: resume"; exit 1; }
span_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "a resume of 2 steps takes $span_ms ms here; killing $N resumes at random moments in [0, $span_ms] ms (seed $SEED)"
RANDOM=$SEED
fail=0; min_lines=999999; max_lines=0
for i in $(seq "$N"); do
  delay_ms=$(( RANDOM % (span_ms + 1) ))
  "$Z" train "${args[@]}" "${saves[@]}" --max_steps 100000 --resume_from_checkpoint latest >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  verdict=$(check)
  case $verdict in
    ok*) set -- $verdict; (( $2 < min_lines )) && min_lines=$2; (( $2 > max_lines )) && max_lines=$2 ;;
    *) fail=$((fail + 1)); echo "FAIL  kill $i after $delay_ms ms: $verdict" ;;
  esac
done
echo "$((N - fail))/$N kills left a complete metrics.jsonl (lines after the kills: $min_lines..$max_lines)"

# A write error stops the run naming the file. RLIMIT_FSIZE with SIGXFSZ ignored makes a write
# past 16 KiB fail with EFBIG, as a full disk fails with ENOSPC; metrics.jsonl passes 16 KiB first.
err=$( (trap '' XFSZ; ulimit -f 16; exec "$Z" train "${args[@]}" --output_dir "$W/full" --save_strategy no \
        --max_steps 200) 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
   printf '%s' "$err" | grep -q "^ztrain: error: .*metrics.jsonl"; then echo "ok    write error named: $err"
else fail=$((fail + 1)); echo "FAIL  write error (exit $rc): $err"; fi

# A damaged line: named with its number, one line, non-zero exit.
sed -i '2s/.*/{"step": "two"/' "$W/out/metrics.jsonl"
err=$("$Z" train "${args[@]}" "${saves[@]}" --max_steps 8 --resume_from_checkpoint latest 2>&1 >/dev/null); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
   printf '%s' "$err" | grep -q "^ztrain: error: .*metrics.jsonl line 2"; then echo "ok    damaged line named: $err"
else fail=$((fail + 1)); echo "FAIL  damaged line (exit $rc): $err"; fi
[ $fail -eq 0 ]
