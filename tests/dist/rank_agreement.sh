#!/usr/bin/env bash
# rank_agreement.sh: ranks launched with different settings must stop at start-up with one
# error naming the first difference and the ranks, never train (or corrupt memory). Each case
# is an MPMD line (mpirun -np 1 ztrain train A : -np 1 ztrain train B), the way a stale file
# or a different flag on one host looks to the job: a different n_layer in the model config
# (once: "free(): invalid next size" and SIGABRT), --learning_rate, --seed, and a train file
# with other contents. A control: the same data under another path and another --threads
# (both legitimately per host) trains.
# usage: rank_agreement.sh path/to/ztrain path/to/mpirun
set -u
Z=$1
MPI=$2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
export ZT_COMM_TIMEOUT_S=30
for L in 2 3; do
  echo "{\"model_type\": \"gpt2\", \"vocab_size\": 512, \"n_positions\": 64, \"n_embd\": 64, \"n_layer\": $L, \"n_head\": 4}" \
    > "$W/m$L.json"
done
for s in 3 4; do
  /usr/bin/python3 -c "
import random, sys; r = random.Random($s)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(30000)))" > "$W/t$s.bin"
done
mkdir "$W/host2" && cp "$W/t3.bin" "$W/host2/t3.bin"
base=(train --per_device_train_batch_size 2 --model_max_length 32 --max_steps 3 --save_strategy no
  --report_to none --output_dir "$W/out" --overwrite_output_dir)
a=("$Z" "${base[@]}" --model_config_path "$W/m2.json" --train_file "$W/t3.bin" --threads 1)
fail=0
# expect NAME PATTERN ARGS_OF_RANK_1...: rank 0 runs ${a[@]}; PATTERN empty means "trains".
expect() {
  local name=$1 pattern=$2
  shift 2
  local out rc n
  out=$(timeout 120 "$MPI" -np 1 --bind-to none "${a[@]}" : -np 1 --bind-to none "$@" 2>&1); rc=$?
  n=$(printf '%s\n' "$out" | grep -c "error:")
  if [ -z "$pattern" ]; then
    if [ $rc -eq 0 ] && [ "$n" -eq 0 ]; then echo "ok   $name: trains"
    else echo "FAIL $name: exit $rc, want 0"; printf '%s\n' "$out" | tail -5; fail=1; fi
  elif [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && printf '%s' "$out" | grep "error:" | grep -q -- "$pattern"; then
    echo "ok   $name: exit $rc, $(printf '%s\n' "$out" | grep "error:")"
  else
    echo "FAIL $name: exit $rc, $n error lines (want non-zero and one error line matching '$pattern'); output:"
    printf '%s\n' "$out" | head -20; fail=1
  fi
}
r1=("$Z" "${base[@]}" --train_file "$W/t3.bin" --threads 1)
expect n_layer "rank 1 disagrees with rank 0 on the model config \"n_layer\": rank 0 has 2, rank 1 has 3" \
  "${r1[@]}" --model_config_path "$W/m3.json"
expect learning_rate "rank 1 disagrees with rank 0 on --learning_rate: rank 0 has 5e-05, rank 1 has 0.0005" \
  "${r1[@]}" --model_config_path "$W/m2.json" --learning_rate 5e-4
expect seed "rank 1 disagrees with rank 0 on --seed: rank 0 has 42, rank 1 has 7" \
  "${r1[@]}" --model_config_path "$W/m2.json" --seed 7
expect train_file "rank 1 disagrees with rank 0 on the contents of --train_file" \
  "$Z" "${base[@]}" --model_config_path "$W/m2.json" --train_file "$W/t4.bin" --threads 1
expect same_data_other_path "" "$Z" "${base[@]}" --model_config_path "$W/m2.json" --train_file "$W/host2/t3.bin" --threads 2
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
