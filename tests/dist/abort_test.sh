#!/usr/bin/env bash
# abort_test.sh: a failing rank must end the whole MPI job quickly and say which rank failed,
# never leave the others hanging in a collective.
#   throw: rank 1 throws with an operation in flight; its handler calls abort_job().
#   hang:  rank 1 skips an all-reduce; rank 0's wait times out (1 s) naming rank 1, and its
#          error handler aborts the job.
#   exit:  rank 1 returns an error code without abort_job(): its MPI_Finalize would wait for
#          rank 0 forever; the finalize guard (ZT_COMM_TIMEOUT_S=2 here) ends it, then mpirun the job.
# usage: abort_test.sh path/to/zt_dist_tests path/to/mpirun
set -u
T=$1
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail=0
# check MODE PATTERN MAX_SECONDS
check() {
  local mode=$1 pattern=$2 max=$3 out rc t0 ms
  [ "$mode" = exit ] && export ZT_COMM_TIMEOUT_S=2
  t0=$(date +%s%N)
  out=$(timeout 60 "$MPIRUN" -np 2 --oversubscribe "$T" --mode="$mode" 2>&1); rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q -- "$pattern" && [ $ms -lt $((max * 1000)) ]; then
    echo "ok   $mode: mpirun exit $rc after $ms ms, output names the rank"
  else
    echo "FAIL $mode: exit $rc after $ms ms (want non-zero within $max s and output matching '$pattern'); output:"
    printf '%s\n' "$out" | head -30
    fail=1
  fi
}
check throw "\[rank 1\] error: deliberate failure on rank 1" 10
check hang "\[rank 0\] error: communication timeout: all_reduce #[0-9]* (4 bytes) on communicator \"world\".*rank 1 has not arrived" 10
check exit "\[rank 1\] error: MPI_Finalize has not completed after 2 s" 10
exit $fail
