#!/usr/bin/env bash
# wait_cpu.sh: a rank waiting for a stopped peer must not burn a core, and the timeout must name
# the peer. Two ranks train a tiny model with a short --ddp_timeout; rank 1 is stopped with
# SIGSTOP mid-run; rank 0's CPU time (utime + stime of all its threads, /proc/<pid>/stat) is read
# over 2 s while it waits, and must stay under half a core (a correctness check of "not
# spinning": a spinning wait uses a whole core); then the job must end with an error naming
# rank 1 as the one that has not arrived.
# usage: wait_cpu.sh path/to/ztrain path/to/mpirun
set -u
Z=$1
MPIRUN=${2:-mpirun}
TIMEOUT_ARGS=${WAIT_TIMEOUT_ARGS---ddp_timeout 5}  # overridable to measure an older build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}
J
/usr/bin/python3 -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(bytes(r.randrange(200) if i % 2 == 0 else 0 for i in range(400000)))" > "$W/tok.bin"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 ${ZT_COMM_TIMEOUT_S:+-x ZT_COMM_TIMEOUT_S} \
  "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --output_dir "$W/out" \
  --per_device_train_batch_size 2 --model_max_length 32 --max_steps 100000000 --threads 1 --report_to none \
  --save_strategy no --logging_steps 100000 $TIMEOUT_ARGS >"$W/log" 2>&1 &
mpi=$!
for _ in $(seq 600); do [ -s "$W/out/metrics.jsonl" ] && break; sleep 0.05; done
# The ranks are mpirun's children; OMPI_COMM_WORLD_RANK in their environment says which is which.
rank_pid() {
  for p in $(pgrep -f "$W/cfg.json"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
r0=$(rank_pid 0); r1=$(rank_pid 1)
[ -n "$r0" ] && [ -n "$r1" ] || { echo "FAIL: ranks not found"; cat "$W/log"; exit 1; }
pids="$r0 $r1"
kill -STOP "$r1"
t_stop=$(date +%s.%N)
sleep 1  # rank 0 finishes its step and starts waiting in the next collective
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
t0=$(ticks "$r0"); sleep 2; t1=$(ticks "$r0")
cpu=$(( (t1 - t0) * 100 / (2 * hz) ))
fail=0
if [ "$cpu" -lt 50 ]; then echo "ok    rank 0 used ${cpu}% of a core while waiting for the stopped rank 1"
else echo "FAIL  rank 0 used ${cpu}% of a core while waiting (spinning)"; fail=1; fi
wait $mpi; rc=$?
took=$(/usr/bin/python3 -c "import time; print(round(time.time() - $t_stop, 1))")
msg=$(grep -m1 "error" "$W/log")
# Named within the timeout: rank 0 waits at most one step (tiny) before the collective that times out.
if /usr/bin/python3 -c "import sys; sys.exit(0 if $took <= 5 + 3 else 1)"; then echo "ok    the job ended ${took} s after the SIGSTOP (--ddp_timeout 5)"
else echo "FAIL  the job ended ${took} s after the SIGSTOP (--ddp_timeout 5)"; fail=1; fi
if [ $rc -ne 0 ] && printf '%s' "$msg" | grep -qE "in training step [0-9]+ .*rank 1 (has not arrived|entered it but has not polled)"; then echo "ok    timeout names rank 1: $msg"
else echo "FAIL  timeout message (mpirun exit $rc): $msg"; fail=1; fi
exit $fail
