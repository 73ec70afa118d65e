#!/usr/bin/env bash
# ztrain plan and train --auto_parallel (docs/planner.md) on a tiny GPT-2 (4 layers, 4 heads):
# `ztrain plan --json` lists only layouts the trainer runs, keeping the global batch; bad requests
# are one error line; 2 ranks with --auto_parallel print the chosen layout and train with it
# (train_results.json shows the same dp / tp / pp / ZeRO stage / micro-batch); an explicit
# --tensor-model-parallel-size pins tp, an explicit --context-parallel-size cp; a Mixtral's plan offers
# expert parallelism and an explicit --expert-model-parallel-size pins it; --deepspeed with it is refused.
# usage: auto_parallel.sh ZTRAIN MPIRUN CONFIG_DIR
set -u
Z=$1
MPI=$2
CFG=$3/tiny-gpt2-tppp.json
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1
/usr/bin/python3 -c "
import random, sys; r = random.Random(5)
sys.stdout.buffer.write(b''.join(r.randrange(509).to_bytes(2, 'little') for _ in range(20000)))" > "$W/tok.bin"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# plan: JSON, every layout the trainer's shape, the batch kept, best first.
"$Z" plan --model_config_path "$CFG" --model_max_length 32 --global_batch 8 --nproc 4 --gemm_gflops 100 \
  --mem_gbps 10 --json > "$W/plan.json" 2> "$W/plan.err" || { bad "plan --json failed: $(cat "$W/plan.err")"; }
/usr/bin/python3 - "$W/plan.json" <<'PY' && ok "plan --json: layouts of 4 ranks, batch 8 kept, sorted" || fail=1
import json, sys
j = json.load(open(sys.argv[1])); L = j["layouts"]
assert len(L) > 10, len(L)
for r in L:
    assert r["dp"] * r["cp"] * r["tp"] * r["pp"] == 4 and r["dp"] * r["micro_batch"] * r["accumulation"] == 8, r
    assert (r["cp"] > 1) == (r["time_s"]["cp_comm"] > 0 and r["memory_bytes"]["cp_ring"] > 0), r
assert all(a["time_s"]["step"] <= b["time_s"]["step"] for a, b in zip(L, L[1:]))
assert any(r["pp"] > 1 and r["zero_stage"] == 3 for r in L)  # ZeRO-2/3 compose with pipeline stages
assert {r["tp"] for r in L} == {1, 2, 4} and {r["pp"] for r in L} == {1, 2, 4} and {r["cp"] for r in L} == {1, 2, 4}
assert "ztrain train" in j["command"]
PY
"$Z" plan --model_config_path "$CFG" --model_max_length 32 --global_batch 8 --nproc 2 --gemm_gflops 100 \
  --mem_gbps 10 > "$W/plan.txt" 2>&1 && grep -q "^best: mpirun -np 2 ztrain train" "$W/plan.txt" &&
  ok "plan table: $(grep -m1 '^1 ' "$W/plan.txt" | cut -c1-60)" || { bad "plan table"; cat "$W/plan.txt"; }

# Bad requests: one error line each.
expect() {
  local name=$1 pattern=$2; shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
     printf '%s' "$err" | grep -q "^ztrain: error: .*$pattern"; then ok "$name: $err"
  else bad "$name (exit $rc): $err"; fi
}
p=("$Z" plan --model_config_path "$CFG" --model_max_length 32 --gemm_gflops 100 --mem_gbps 10)
expect "no --nproc" "nproc is required" "${p[@]}" --global_batch 8
expect "nnodes not dividing nproc" "does not divide --nproc" "${p[@]}" --global_batch 8 --nproc 4 --nnodes 3
expect "T beyond the context" "context" "${p[@]}" --global_batch 8 --nproc 2 --model_max_length 65
expect "memory too small" "fits --max_memory" "${p[@]}" --global_batch 8 --nproc 2 --max_memory 1MB
expect "no model" "exactly one of" "$Z" plan --global_batch 8 --nproc 2
expect "pinned tp not dividing" "does not divide the 2 ranks" "${p[@]}" --global_batch 8 --nproc 2 --tensor-model-parallel-size 3

# train --auto_parallel on 2 ranks: the printed layout is the one that ran.
args=(train --model_config_path "$CFG" --train_file "$W/tok.bin" --per_device_train_batch_size 2
      --gradient_accumulation_steps 2 --model_max_length 32 --max_steps 2 --logging_steps 1 --learning_rate 1e-3
      --report_to none --save_strategy no --auto_parallel)
check_run() {  # name dir log
  local line
  line=$(grep -m1 "^auto_parallel: 2 ranks -> " "$3") || { bad "$1: no auto_parallel line"; tail -5 "$3"; return; }
  /usr/bin/python3 - "$2" "$line" <<'PY' && ok "$1: ${line:0:110}" || { bad "$1: layout differs: $line"; }
import json, re, sys
line = sys.argv[2]
m = re.search(r"-> dp(\d+) tp(\d+)(\+sp)? pp(\d+)(?: cp(\d+))? zero(\d) B(\d+) m(\d+)", line)
dp, tp, pp, zero, B, acc = (int(m.group(i)) for i in (1, 2, 4, 6, 7, 8))
cp = int(m.group(5) or 1)
assert dp * B * acc == 8, line  # the global batch: 2 x 2 x 2 ranks as given
r = json.load(open(sys.argv[1] + "/train_results.json"))
d = r["data_parallel"]
assert d["ranks"] == dp * cp and d["stage"] == zero, d  # gradients reduce over dp x cp
assert ("context_parallel" in d) == (cp > 1), d.keys()
assert ("tensor_parallel" in d) == (tp > 1), d.keys()
assert ("pipeline" in r) == (pp > 1), r.keys()
if pp > 1: assert r["pipeline"]["micro_batches"] == acc and r["pipeline"]["stages"] == pp
PY
}
"$MPI" -np 2 --oversubscribe "$Z" "${args[@]}" --output_dir "$W/auto" > "$W/auto.log" 2>&1 ||
  { bad "auto run failed"; tail -5 "$W/auto.log"; }
check_run "auto" "$W/auto" "$W/auto.log"
"$MPI" -np 2 --oversubscribe "$Z" "${args[@]}" --tensor-model-parallel-size 2 --output_dir "$W/tp" > "$W/tp.log" 2>&1 ||
  { bad "pinned tp run failed"; tail -5 "$W/tp.log"; }
grep -q "^auto_parallel: 2 ranks -> dp1 tp2" "$W/tp.log" && check_run "pinned tp 2" "$W/tp" "$W/tp.log" ||
  bad "explicit --tensor-model-parallel-size 2 not kept: $(grep -m1 auto_parallel "$W/tp.log")"
"$MPI" -np 2 --oversubscribe "$Z" "${args[@]}" --context-parallel-size 2 --output_dir "$W/cp" > "$W/cp.log" 2>&1 ||
  { bad "pinned cp run failed"; tail -5 "$W/cp.log"; }
grep -q "^auto_parallel: 2 ranks -> dp1 tp1 pp1 cp2 .*--context-parallel-size 2 " "$W/cp.log" &&
  check_run "pinned cp 2" "$W/cp" "$W/cp.log" ||
  bad "explicit --context-parallel-size 2 not kept: $(grep -m1 auto_parallel "$W/cp.log")"
expect "pinned cp not dividing" "context-parallel-size 3 does not divide" "${p[@]}" --global_batch 8 --nproc 2 \
  --context-parallel-size 3
# A mixture-of-experts model (a tiny Mixtral, 4 experts): the plan offers expert parallelism; pinned to
# EP 2 on 2 ranks, the run holds half the experts per rank; EP on a dense model is one error line.
cat > "$W/moe.json" <<'J'
{"model_type": "mixtral", "vocab_size": 509, "max_position_embeddings": 64, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_local_experts": 4, "num_experts_per_tok": 2}
J
"$Z" plan --model_config_path "$W/moe.json" --model_max_length 32 --global_batch 8 --nproc 4 --gemm_gflops 100 \
  --mem_gbps 10 --json > "$W/moe_plan.json" 2>&1 &&
  /usr/bin/python3 -c "
import json, sys; L = json.load(open(sys.argv[1]))['layouts']
eps = sorted({r['ep'] for r in L}); assert eps == [1, 2, 4], eps
assert all('--expert-model-parallel-size %d' % r['ep'] in r['flags'] for r in L if r['ep'] > 1)
assert all(r['time_s']['ep_comm'] > 0 for r in L if r['ep'] > 1)" "$W/moe_plan.json" &&
  ok "plan, a Mixtral on 4 ranks: expert parallel 1, 2 and 4 offered, the all-to-all priced" ||
  bad "plan of a mixture-of-experts model: $(tail -c 300 "$W/moe_plan.json")"
"$MPI" -np 2 --oversubscribe "$Z" train --model_config_path "$W/moe.json" --train_file "$W/tok.bin" \
  --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --model_max_length 32 --max_steps 2 \
  --report_to none --save_strategy no --auto_parallel --expert-model-parallel-size 2 --output_dir "$W/moe" \
  > "$W/moe.log" 2>&1 || { bad "auto_parallel MoE run failed"; tail -5 "$W/moe.log"; }
grep -qE "^auto_parallel: 2 ranks -> dp[12] tp1 pp1( cp2)? ep2 .*--expert-model-parallel-size 2 " "$W/moe.log" &&
  /usr/bin/python3 -c "
import json, sys; e = json.load(open(sys.argv[1] + '/train_results.json'))['data_parallel']['expert_parallel']
assert e['size'] == 2 and e['expert_params_per_rank'] == 2 * 4 * 3 * 96 * 64 // 2, e" "$W/moe" &&
  ok "auto_parallel, a Mixtral pinned to EP 2: $(grep -m1 '^auto_parallel' "$W/moe.log" | cut -c1-90)" ||
  bad "auto_parallel with --expert-model-parallel-size 2: $(grep -m1 auto_parallel "$W/moe.log")"
expect "EP on a dense model" "has no experts" "${p[@]}" --global_batch 8 --nproc 2 --expert-model-parallel-size 2
echo '{"train_micro_batch_size_per_gpu": "auto"}' > "$W/ds.json"
expect "--deepspeed with --auto_parallel" "drop --deepspeed" "$Z" "${args[@]}" --deepspeed "$W/ds.json" --output_dir "$W/ds"
exit $fail
