#!/usr/bin/env bash
# task_eval.sh: --eval_tasks / --eval_probes during training and `ztrain eval --tasks/--probes`
# end to end on a tiny model with a byte-level GPT-2 tokenizer: every evaluation logs the task and
# probe metrics to metrics.jsonl, trainer_state.json and TensorBoard; bad task and probe files,
# and the flags without what they need, are one clear error line each and a non-zero exit.
# (The numbers themselves are checked against PyTorch by tests/parity/task_parity.py.)
# With mpirun: 2 ranks under ZeRO-3 (every rank scores: the forward is a collective) log what one
# process with 2 micro-batches logs.
# usage: task_eval.sh path/to/ztrain [path/to/mpirun]
set -u
Z=$1
MPI=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
FIX=$(cd "$(dirname "$0")/../fixtures/tasks" && pwd)
TB=$(cd "$(dirname "$0")/../../scripts" && pwd)/tb_check.py
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }

$PY - "$W" <<'P'
import json, sys, random
w = sys.argv[1]
keep = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
m, n = {}, 0
for b in range(256):
    if b in keep: m[b] = chr(b)
    else: m[b] = chr(256 + n); n += 1
enc = {m[b]: b for b in range(256)}
enc["<|endoftext|>"] = 256
import os
os.makedirs(w + "/tok")
json.dump(enc, open(w + "/tok/encoder.json", "w"))
open(w + "/tok/vocab.bpe", "w").write("#version: 0.2\n")
json.dump({"model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64,
           "eos_token_id": 256}, open(w + "/cfg.json", "w"))
r = random.Random(1)
text = b"The capital of France is Paris. The opposite of hot is cold. " * 40
open(w + "/tok.bin", "wb").write(b"".join(b.to_bytes(2, "little") for b in text))
P

# Training: tasks and probes at steps 2 and 4 (every --eval_steps, and the end).
"$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$W/tok" --train_file "$W/tok.bin" \
  --validation_file "$W/tok.bin" --max_eval_samples 4 --eval_steps 2 --max_steps 4 --per_device_train_batch_size 2 \
  --model_max_length 32 --learning_rate 1e-2 --save_strategy no --output_dir "$W/run" \
  --eval_tasks "$FIX/mc_tasks.jsonl" --eval_probes "$FIX/probes.jsonl" >"$W/train.out" 2>&1 ||
  { echo "FAIL: training with --eval_tasks"; cat "$W/train.out"; exit 1; }
$PY - "$W/run" <<'P' && ok "metrics.jsonl and trainer_state.json hold the task and probe metrics at steps 2 and 4" || bad "metrics"
import json, sys
d = sys.argv[1]
ev = [json.loads(l) for l in open(d + "/metrics.jsonl") if "eval_loss" in l]
assert [e["step"] for e in ev] == [2, 4], ev
for e in ev:
    assert 0 <= e["tasks/acc"] <= 1 and 0 <= e["tasks/acc_norm"] <= 1 and e["tasks/questions"] == 10, e
    assert e["tasks/acc_stderr"] >= 0, e
    for i in range(3):
        assert 0 < e[f"probe/{i}/prob"] <= 1 and e[f"probe/{i}/logprob"] <= 0 and 1 <= e[f"probe/{i}/rank"] <= 257, e
    assert abs(e["probe/mean_rank"] - sum(e[f"probe/{i}/rank"] for i in range(3)) / 3) < 1e-9
hist = [e for e in json.load(open(d + "/trainer_state.json"))["log_history"] if "eval_loss" in e]
assert all("tasks/acc" in e and "probe/2/rank" in e for e in hist), hist
P
tags=$($PY "$TB" "$W/run" 2>/dev/null | awk '{print $1}' | sort -u | tr '\n' ' ')
case "$tags" in *"probe/0/prob "*"probe/0/rank "*"probe/mean_prob "*"tasks/acc "*"tasks/acc_norm "*) ok "TensorBoard tags: $tags" ;;
  *) bad "TensorBoard tags missing: $tags" ;; esac
grep -q "^{'tasks/acc': " "$W/train.out" && ok "console line" || { bad "no console line"; cat "$W/train.out"; }

if [ -n "$MPI" ]; then
  "$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$W/tok" --train_file "$W/tok.bin" \
    --validation_file "$W/tok.bin" --max_eval_samples 4 --eval_steps 2 --max_steps 4 --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 2 --model_max_length 32 --learning_rate 1e-2 --save_strategy no --report_to none \
    --output_dir "$W/one" --eval_tasks "$FIX/mc_tasks.jsonl" --eval_probes "$FIX/probes.jsonl" >"$W/one.out" 2>&1 &&
    "$MPI" -np 2 "$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$W/tok" --train_file "$W/tok.bin" \
      --validation_file "$W/tok.bin" --max_eval_samples 4 --eval_steps 2 --max_steps 4 --per_device_train_batch_size 2 \
      --zero_stage 3 --model_max_length 32 --learning_rate 1e-2 --save_strategy no --report_to none \
      --output_dir "$W/z3" --eval_tasks "$FIX/mc_tasks.jsonl" --eval_probes "$FIX/probes.jsonl" >"$W/z3.out" 2>&1 &&
    $PY - "$W/one" "$W/z3" <<'P' && ok "2 ranks under ZeRO-3 log what one process logs" || { bad "ZeRO-3"; tail -5 "$W/z3.out"; }
import json, sys
a, b = ([json.loads(l) for l in open(d + "/metrics.jsonl") if "eval_loss" in l] for d in sys.argv[1:])
assert len(a) == len(b) == 2
for x, y in zip(a, b):
    for k in x:
        if k.startswith(("tasks/", "probe/")):
            assert abs(x[k] - y[k]) <= 1e-6 * max(1, abs(x[k])), (k, x[k], y[k])
P
fi

# ztrain eval on the trained folder, results as JSON.
cp "$W/tok/"* "$W/run/" 2>/dev/null
"$Z" eval --model_name_or_path "$W/run" --tasks "$FIX/mc_tasks.jsonl" --probes "$FIX/probes.jsonl" \
  --output_path "$W/res.json" >"$W/eval.out" 2>&1 && $PY -c "
import json; r = json.load(open('$W/res.json'))
assert len(r['questions']) == 10 and len(r['probes']) == 3 and 'tasks/acc_norm' in r" &&
  ok "ztrain eval --tasks --probes --output_path" || { bad "ztrain eval"; cat "$W/eval.out"; }

# expect NAME PATTERN -- command...: one "ztrain: error:" line matching PATTERN, exit in 1..127.
expect() {
  local name=$1 pattern=$2; shift 3
  local err rc lines
  err=$("$@" 2>&1 >/dev/null); rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -q "^ztrain: error: .*$pattern"; then
    ok "$name: $err"
  else
    bad "$name (exit $rc, $lines lines): $err"
  fi
}
T=$W/t.jsonl
ev() { "$Z" eval --model_name_or_path "$W/run" "$@"; }
good='{"context": "a", "choices": [" b", " c"], "gold": 1}'
printf '%s\n{"context": "a", "choices": [" b"]}\n' "$good" >"$T"
expect "task without gold" "t.jsonl:2: no \"gold\" field" -- ev --tasks "$T"
printf '%s\n\n{"context": "a", "choices": [" b", " c"], "gold": 2}\n' "$good" >"$W/t2.jsonl"
expect "gold out of range" "t2.jsonl:3: \"gold\" is 2, outside the 2 choices" -- ev --tasks "$W/t2.jsonl"
printf '{"context": "a", "choices": [], "gold": 0}\n' >"$W/t3.jsonl"
expect "no choices" "t3.jsonl:1: 0 choices" -- ev --tasks "$W/t3.jsonl"
printf '%s\n{"context": "a", "choices": [" b"], "gold": 0\n' "$good" >"$W/t4.jsonl"
expect "not JSON" "t4.jsonl:2: not valid JSON" -- ev --tasks "$W/t4.jsonl"
printf '{"context": "a", "choices": [" b", 3], "gold": 0}\n' >"$W/t5.jsonl"
expect "a choice that is not a string" "t5.jsonl:1: choice 1 is not a string" -- ev --tasks "$W/t5.jsonl"
printf '{"context": "a", "choices": [" b", ""], "gold": 0}\n' >"$W/t6.jsonl"
expect "an empty choice" "t6.jsonl:1 (choice 1): the continuation encodes to no tokens" -- ev --tasks "$W/t6.jsonl"
printf '{"context": "a", "choices": [" b"], "gold": true}\n' >"$W/t7.jsonl"
expect "gold not an integer" "t7.jsonl:1: \"gold\" must be an integer" -- ev --tasks "$W/t7.jsonl"
printf '[1, 2]\n' >"$W/t8.jsonl"
expect "a line that is not an object" "t8.jsonl:1: not a JSON object" -- ev --tasks "$W/t8.jsonl"
printf '\n\n' >"$W/t9.jsonl"
expect "an empty file" "holds no entries" -- ev --tasks "$W/t9.jsonl"
truncate -s 70M "$W/big.jsonl"
expect "a file over the size bound" "more than the 67108864 an evaluation file may have" -- ev --tasks "$W/big.jsonl"
expect "a missing file" "is not a readable file" -- ev --tasks "$W/nothere.jsonl"
printf '{"prompt": "a", "answer": " b"}\n{"prompt": "a"}\n' >"$W/p.jsonl"
expect "probe without answer" "p.jsonl:2: no \"answer\" field" -- ev --probes "$W/p.jsonl"
printf '{"prompt": "a", "answer": 5}\n' >"$W/p2.jsonl"
expect "probe answer not a string" "p2.jsonl:1: \"answer\" must be a string" -- ev --probes "$W/p2.jsonl"
python3 -c "print('{\"prompt\": \"a\", \"answer\": \"' + 'x' * 200 + '\"}')" >"$W/p3.jsonl"
expect "an answer longer than the evaluated length" "p3.jsonl:1: the continuation is 200 tokens, more than the 64" -- \
  ev --probes "$W/p3.jsonl"
expect "ztrain eval with nothing to evaluate" "nothing to evaluate" -- ev

# Training flags without what they need.
tr=(train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --max_steps 1 --per_device_train_batch_size 2
  --model_max_length 32 --output_dir "$W/o" --overwrite_output_dir --report_to none)
expect "--eval_tasks without --validation_file" "--eval_tasks has no effect without an evaluation to be scored at" -- \
  "$Z" "${tr[@]}" --tokenizer_name "$W/tok" --eval_tasks "$FIX/mc_tasks.jsonl"
expect "--eval_probes with --eval_strategy no" "--eval_probes has no effect without an evaluation to be scored at" -- \
  "$Z" "${tr[@]}" --tokenizer_name "$W/tok" --validation_file "$W/tok.bin" --eval_strategy no --eval_probes "$FIX/probes.jsonl"
expect "--eval_tasks without a tokenizer" "--eval_tasks needs a tokenizer" -- \
  "$Z" "${tr[@]}" --validation_file "$W/tok.bin" --eval_tasks "$FIX/mc_tasks.jsonl"
expect "a probe answer longer than --model_max_length at training start" "p3.jsonl:1: the continuation is 200 tokens, more than the 32" -- \
  "$Z" "${tr[@]}" --tokenizer_name "$W/tok" --validation_file "$W/tok.bin" --eval_probes "$W/p3.jsonl"
expect "a bad task file at training start" "t.jsonl:2: no \"gold\" field" -- \
  "$Z" "${tr[@]}" --tokenizer_name "$W/tok" --validation_file "$W/tok.bin" --eval_tasks "$T"

echo "task_eval: $pass passed, $fail failed"
[ $fail = 0 ]
