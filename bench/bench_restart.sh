#!/usr/bin/env bash
# bench_restart.sh: how long the elastic agent takes to get a job going again after a rank dies
# (issue 12's "Restart" figure): GPT-2 124M with AdamW on 2 ranks x 1 thread under
# `ztrain launch --max_restarts 1`, flash checkpoints every 3 steps; rank 1 fails at step 7
# (ZT_TEST_FAIL_AT). Prints the time from the failing rank's error line to the first step logged
# by the restarted job, and its parts (to the agent's restart line, to the resume line, to the
# "Running training" line after which the first step runs).
# usage: bench/bench_restart.sh [build/ztrain] [reps=1]
set -eu
Z=$(realpath "${1:-build/ztrain}")
REPS=${2:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(50257).to_bytes(2, 'little') for _ in range(300000)))" > "$W/tok.bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for rep in $(seq "$REPS"); do
  rm -rf "$W/out"
  ZT_TEST_FAIL_AT=1:7:0 "$Z" launch --nproc_per_node 2 --max_restarts 1 -- train \
    --model_config_path "$HERE/configs/gpt2-124m.json" --train_file "$W/tok.bin" --per_device_train_batch_size 1 \
    --model_max_length 128 --max_steps 8 --save_steps 3 --flash_checkpoint --logging_steps 1 --learning_rate 1e-4 \
    --report_to none --threads 1 --output_dir "$W/out" 2>&1 | /usr/bin/python3 -c "
import sys, time
t0 = time.monotonic(); marks = {}
for line in sys.stdin:
    t = time.monotonic() - t0
    if 'deliberate failure' in line: marks.setdefault('error', t)
    elif 'error' in marks and 'launch: restart' in line: marks.setdefault('agent', t)
    elif 'error' in marks and 'Resuming from' in line: marks.setdefault('resume', t)
    elif 'error' in marks and 'Running training' in line: marks.setdefault('train', t)
    elif 'error' in marks and \"'loss'\" in line: marks.setdefault('step', t)
e = marks.get('error')
if e is None or 'step' not in marks: sys.exit('no restart seen: ' + str(marks))
print('rep $rep: rank died -> first new step logged %.2f s (the agent restarts mpirun %.2f s, resume line %.2f s, '
      'training starts %.2f s)' % (marks['step'] - e, marks.get('agent', e) - e, marks.get('resume', e) - e,
                                   marks.get('train', e) - e))
"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
