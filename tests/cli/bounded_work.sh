#!/usr/bin/env bash
# bounded_work.sh (issue 21, item 11): commands whose work once grew without bound with a flag's
# value. `ztrain plan` with a global batch of 2^26 sequences (it ran out of memory; its time and
# memory grew with the batch) finishes within 60 s and 1 GiB; `bench-comm --step_factor 1.0000001`
# (identical rows for hours) is refused with one error line at once.
# usage: bounded_work.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
cat > "$W/cfg.json" <<'J'
{"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
J
# The bound is checked on the peak resident size /usr/bin/time reports (not with ulimit -v, which
# an AddressSanitizer build's address-space reservations exceed at once).
for gb in 65536 67108864; do
  timeout 60 /usr/bin/time -f "%e s %M KB" "$Z" plan --model_config_path "$W/cfg.json" --global_batch $gb --nproc 8 \
    --gemm_gflops 50 --gemm_half_rows 0 --mem_gbps 10 --model_max_length 64 > "$W/plan.out" 2> "$W/plan.err"; rc=$?
  kb=$(tail -1 "$W/plan.err" | awk '{print $3}')
  if [ $rc -eq 0 ] && grep -q "ztrain train" "$W/plan.out" && [ "${kb:-0}" -lt $((1 << 20)) ]; then
    echo "ok    plan --global_batch $gb: $(tail -1 "$W/plan.err")"
  else echo "FAIL  plan --global_batch $gb: exit $rc: $(tail -2 "$W/plan.err")"; fail=1; fi
done
timeout 20 "$Z" bench-comm --step_factor 1.0000001 --max_bytes 1048576 > "$W/bc.out" 2> "$W/bc.err"; rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 124 ] && [ "$(grep -c . "$W/bc.err")" -eq 1 ] &&
   grep -q "^ztrain: error: .*--step_factor 1 .*more than 4096 message sizes" "$W/bc.err"; then
  echo "ok    bench-comm --step_factor 1.0000001: $(cat "$W/bc.err")"
else echo "FAIL  bench-comm --step_factor 1.0000001: exit $rc: $(head -2 "$W/bc.err")"; fail=1; fi
timeout 60 "$Z" bench-comm --step_factor 1.5 --max_bytes 4096 --iters 2 --warmup 0 --collectives all_reduce > "$W/bc.out" 2>&1
rows=$(grep -cE '^ +[0-9]' "$W/bc.out"); uniq=$(grep -E '^ +[0-9]' "$W/bc.out" | awk '{print $1}' | sort -u | wc -l)
if [ "$rows" -gt 3 ] && [ "$rows" -eq "$uniq" ]; then echo "ok    bench-comm rows have distinct sizes ($rows rows)"
else echo "FAIL  bench-comm rows: $rows rows, $uniq distinct sizes"; fail=1; fi
[ $fail -eq 0 ] && echo "passed" || echo "failed"
exit $fail
