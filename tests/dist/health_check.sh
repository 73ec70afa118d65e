#!/usr/bin/env bash
# health_check.sh: `ztrain health-check` (the pre-flight check) under mpirun. Healthy ranks pass;
# a rank whose GEMM is slowed 10x (test hook ZT_TEST_SLOW_GEMM_RANK) is named as slow; a rank
# whose all-gathers are slowed with every partner (ZT_TEST_SLOW_LINK_RANK, 4 ranks, two pairings)
# is named as the slow link and its healthy partners are not; `launch --health_check` does not
# start the job when the check fails.
# usage: health_check.sh path/to/ztrain   (needs mpirun)
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
hc=(health-check --seconds 0.2 --allgather_mb 4)

out=$("$Z" launch --nproc_per_node 2 -- "${hc[@]}" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "every rank is healthy" <<<"$out"; then ok "2 healthy ranks pass"
else bad "healthy: exit $rc"; echo "$out" | tail -n 5; fi

out=$(ZT_TEST_SLOW_GEMM_RANK=1 "$Z" launch --nproc_per_node 2 -- "${hc[@]}" 2>/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "health check: rank 1 (.*) is slow: GEMM" <<<"$out" && ! grep -q "rank 0 (" <<<"$out"; then
  ok "slow GEMM named: $(grep 'is slow' <<<"$out")"
else bad "slow GEMM: exit $rc"; echo "$out" | tail -n 5; fi

out=$(ZT_TEST_SLOW_LINK_RANK=2 "$Z" launch --nproc_per_node 4 -- "${hc[@]}" 2>/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "health check: rank 2 (.*) has a slow link" <<<"$out" &&
   [ "$(grep -c 'slow link' <<<"$out")" -eq 1 ]; then ok "slow link named: $(grep 'slow link' <<<"$out")"
else bad "slow link: exit $rc"; echo "$out" | tail -n 8; fi

cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 256, "n_positions": 32, "n_embd": 32, "n_layer": 1, "n_head": 2}
J
head -c 20000 /dev/urandom > "$W/tok.bin"
out=$(ZT_TEST_SLOW_GEMM_RANK=0 "$Z" launch --nproc_per_node 2 --health_check -- train --model_config_path "$W/cfg.json" \
  --train_file "$W/tok.bin" --max_steps 2 --output_dir "$W/run" --report_to none 2>/dev/null); rc=$?
if [ $rc -ne 0 ] && grep -q "launch: the health check failed" <<<"$out" && [ ! -e "$W/run" ]; then
  ok "launch --health_check: the job did not start"
else bad "launch --health_check: exit $rc"; echo "$out" | tail -n 5; fi
exit $fail
