#!/usr/bin/env bash
# resume_finished.sh: resuming a run that already reached --max_steps (its last checkpoint is
# at the final step) is a clean no-op that exports the model again: exit 0, no error, and a
# model.safetensors identical to the one the run wrote. One process, and under mpirun with
# DDP and ZeRO-3 (a finished resume under mpirun once failed with a JSON exception after
# rewriting the model).
# usage: resume_finished.sh path/to/ztrain path/to/mpirun
set -u
Z=$1
MPI=$2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
echo '{"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}' > "$W/m.json"
/usr/bin/python3 -c "
import random, sys; r = random.Random(3)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(30000)))" > "$W/t.bin"
fail=0
for mode in "1 0" "2 0" "2 3"; do
  set -- $mode
  np=$1 stage=$2
  out="$W/out-$np-$stage"
  cmd=("$Z" train --model_config_path "$W/m.json" --train_file "$W/t.bin" --per_device_train_batch_size 2
    --model_max_length 32 --max_steps 5 --save_steps 5 --output_dir "$out" --report_to none --zero_stage "$stage")
  [ "$np" -gt 1 ] && cmd=("$MPI" -np "$np" --oversubscribe "${cmd[@]}")
  if ! "${cmd[@]}" > "$W/first.log" 2>&1; then
    echo "FAIL np=$np stage=$stage: the first run failed"; cat "$W/first.log"; fail=1; continue
  fi
  want=$(md5sum < "$out/model.safetensors")
  rm "$out/model.safetensors"
  if ! "${cmd[@]}" --resume_from_checkpoint latest > "$W/resume.log" 2>&1; then
    echo "FAIL np=$np stage=$stage: resuming the finished run exited non-zero"; tail -5 "$W/resume.log"; fail=1; continue
  fi
  if grep -qi "error" "$W/resume.log"; then
    echo "FAIL np=$np stage=$stage: resume printed an error"; grep -i error "$W/resume.log"; fail=1; continue
  fi
  got=$(md5sum < "$out/model.safetensors" 2>/dev/null)
  [ "$got" = "$want" ] || { echo "FAIL np=$np stage=$stage: the re-exported model differs"; fail=1; continue; }
  echo "ok   np=$np stage=$stage: finished run resumed as a no-op, model re-exported identically"
done
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
