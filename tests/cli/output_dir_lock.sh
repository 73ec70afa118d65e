#!/usr/bin/env bash
# output_dir_lock.sh: one run at a time per --output_dir. Two runs started into one folder at
# the same moment: exactly one trains, the other stops with one error naming the holder's pid
# (once both trained and a checkpoint mixed one run's model with the other's optimizer). A run
# started while another still works there (resume, or --overwrite_output_dir) is refused the
# same way; after kill -9 of the holder the kernel releases the lock and the folder is usable.
# usage: output_dir_lock.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 $p 2>/dev/null; done; rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
echo '{"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}' > "$W/m.json"
/usr/bin/python3 -c "
import random, sys; r = random.Random(3)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(30000)))" > "$W/t.bin"
args=(train --model_config_path "$W/m.json" --train_file "$W/t.bin" --per_device_train_batch_size 2
  --model_max_length 32 --save_steps 5 --report_to none --threads 1 --output_dir "$W/out")
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# 1. Two fresh runs at once. The one that loses the lock tries it for 5 s and exits first; the
# winner, still training, is then stopped gracefully (SIGTERM: it saves and exits 0), so the test
# does not depend on how fast a step is (under the sanitizers a fixed step count took minutes).
"$Z" "${args[@]}" --max_steps 100000 --save_steps 100000 > "$W/a.log" 2>&1 &
pa=$!
"$Z" "${args[@]}" --max_steps 100000 --save_steps 100000 > "$W/b.log" 2>&1 &
pb=$!
pids=($pa $pb)
wait -n $pa $pb; rfirst=$?
loser=; ra=; rb=
if kill -0 $pa 2>/dev/null && ! kill -0 $pb 2>/dev/null; then
  rb=$rfirst; kill -TERM $pa; wait $pa; ra=$?
elif kill -0 $pb 2>/dev/null && ! kill -0 $pa 2>/dev/null; then
  ra=$rfirst; kill -TERM $pb; wait $pb; rb=$?
fi
if [ "$ra" = 0 ] && [ -n "$rb" ] && [ "$rb" != 0 ]; then loser=b; winner=$pa
elif [ "$rb" = 0 ] && [ -n "$ra" ] && [ "$ra" != 0 ]; then loser=a; winner=$pb; fi
if [ -n "$loser" ] && [ "$(grep -c 'error:' "$W/$loser.log")" -eq 1 ] &&
  grep "error:" "$W/$loser.log" | grep -q "is in use by another ztrain run (pid $winner on host "; then
  ok "two runs at once: one trained, the other: $(grep error: "$W/$loser.log")"
else
  bad "two runs at once: exits $ra and $rb (want one 0 and one error naming pid of the other)"; tail -n 3 "$W/a.log" "$W/b.log"
fi

# 2. A run in progress holds the folder against a resume and an overwrite.
rm -rf "$W/out"
"$Z" "${args[@]}" --max_steps 100000 --save_steps 1000 > "$W/long.log" 2>&1 &
pl=$!
pids+=($pl)
for _ in $(seq 400); do grep -q "^$pl " "$W/out/.ztrain.lock" 2>/dev/null && break; sleep 0.05; done
for extra in "--resume_from_checkpoint latest" "--overwrite_output_dir"; do
  err=$("$Z" "${args[@]}" --max_steps 5 $extra 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && printf '%s' "$err" | grep -q "is in use by another ztrain run (pid $pl on host "; then
    ok "while a run works there, $extra is refused: $err"
  else
    bad "while a run works there, $extra: exit $rc: $err"
  fi
done
kill -9 $pl; wait $pl 2>/dev/null
if "$Z" "${args[@]}" --max_steps 5 --overwrite_output_dir > "$W/after.log" 2>&1; then
  ok "after kill -9 of the holder the folder is free again"
else
  bad "after kill -9 of the holder: $(grep error: "$W/after.log")"
fi
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
