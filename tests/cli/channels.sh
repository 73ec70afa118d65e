#!/usr/bin/env bash
# channels.sh: named data channels and their losses (docs/data.md#channels,
# docs/observability.md#channel-losses). A tiny Llama trains on two channels, "text" (a short
# repeating pattern it learns) and "noise" (uniform random tokens, whose loss cannot go below
# ln 512 = 6.24). Checks: loss/text and loss/noise at every logging step in the console line,
# metrics.jsonl, trainer_state.json and TensorBoard, one curve each in loss.png's legend, noise
# visibly above text; the blend's shares in the start-up line; a resume from checkpoint-10
# reproduces every logged value bit for bit; a single named channel gives the plain file's losses
# (the same windows, the same order); 2 ranks x 1 micro-batch log what 1 rank x 2 micro-batches
# log, and resume the 1-rank run's checkpoint to the same values (an elastic restart); SFT
# records as channels (when ZT_CHAT_FIXTURES is set); bad input is one error line each.
# usage: channels.sh path/to/ztrain [path/to/mpirun]
set -u
Z=$1
MPIRUN=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
# Heads of 64: the attention kernels' specialised head size (other sizes take the generic path,
# about twice the CPU under the sanitizers; the kernel tests cover it).
cat > "$W/cfg.json" <<'J'
{"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 1, "num_key_value_heads": 1, "max_position_embeddings": 64}
J
$PY -c "
import random, sys
r = random.Random(5)
pat = [r.randrange(512) for _ in range(24)]
open(sys.argv[1], 'wb').write(b''.join(pat[i % 24].to_bytes(2, 'little') for i in range(40000)))
open(sys.argv[2], 'wb').write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(40000)))
" "$W/text.bin" "$W/noise.bin"
args=(--model_config_path "$W/cfg.json" --per_device_train_batch_size 4 --gradient_accumulation_steps 2
      --model_max_length 32 --max_steps 20 --learning_rate 3e-3 --logging_steps 5 --threads 1 --seed 7
      --save_steps 10 --disable_tqdm true)
chan=(--train_file "text=$W/text.bin,noise=$W/noise.bin" --train_file_weights text=0.5,noise=0.5)
fail=0
pass=0
ok() { pass=$((pass+1)); echo "ok    $*"; }
bad() { fail=$((fail+1)); echo "FAIL  $*"; }
# logged values of key $2 in trainer_state.json's log_history (entries that have it)
col() { $PY -c "import json,sys; print(json.dumps([e[sys.argv[2]] for e in json.load(open(sys.argv[1]))['log_history'] if sys.argv[2] in e]))" "$1/trainer_state.json" "$2"; }

"$Z" train "${args[@]}" "${chan[@]}" --output_dir "$W/a" --report_to tensorboard --plot > "$W/a.log" 2>&1 ||
  { bad "two channels: $(tail -3 "$W/a.log")"; echo "$pass passed, $fail failed"; exit 1; }
grep -q "Data channels: text 50.0% (.*text.bin, 1249 sequences), noise 50.0% (.*noise.bin, 1249 sequences)" "$W/a.log" &&
  ok "start-up line: $(grep 'Data channels' "$W/a.log")" || bad "no start-up line for the channels"
[ "$(grep -c "'loss/text': .*'loss/noise': " "$W/a.log")" = 4 ] && ok "console: loss/text and loss/noise on 4 log lines" ||
  bad "console lines: $(grep "'loss'" "$W/a.log")"
text=$(col "$W/a" loss/text) noise=$(col "$W/a" loss/noise)
$PY - "$text" "$noise" <<'P' && ok "trainer_state.json: text $text, noise $noise" || bad "trainer_state.json: text $text noise $noise"
import json, sys
t, n = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert len(t) == 4 and len(n) == 4
assert n[-1] > 5.5 and t[-1] < n[-1] - 2, (t, n)  # noise stays near ln 512; the pattern is learnt
P
[ "$($PY -c "import json,sys; print(sum(1 for l in open(sys.argv[1]) if 'loss/noise' in json.loads(l)))" "$W/a/metrics.jsonl")" = 4 ] &&
  ok "metrics.jsonl: 4 lines with loss/noise" || bad "metrics.jsonl"
ev=$(ls "$W"/a/runs/*/events.out.tfevents.* 2>/dev/null | head -1)
[ -n "$ev" ] && grep -aq "train/loss/text" "$ev" && grep -aq "train/loss/noise" "$ev" &&
  ok "TensorBoard: train/loss/text and train/loss/noise" || bad "TensorBoard tags missing in ${ev:-no file}"
[ -s "$W/a/loss.png" ] && ok "loss.png written" || bad "no loss.png"

# Resume from checkpoint-10: every logged value equal (log windows end at the checkpoint).
cp -r "$W/a" "$W/r" && rm -rf "$W/r/checkpoint-20"
"$Z" train "${args[@]}" "${chan[@]}" --output_dir "$W/r" --report_to none --resume_from_checkpoint latest \
  > "$W/r.log" 2>&1 || bad "resume: $(tail -2 "$W/r.log")"
for k in loss loss/text loss/noise; do
  [ "$(col "$W/r" $k)" = "$(col "$W/a" $k)" ] && ok "resume: $k equal" || bad "resume: $k $(col "$W/r" $k) vs $(col "$W/a" $k)"
done
grep -q "Resuming from .*checkpoint-10 at step 10" "$W/r.log" || bad "resume did not start at checkpoint-10"

# One named channel reads the plain file's windows in the same order: the same losses.
"$Z" train "${args[@]}" --train_file "$W/text.bin" --output_dir "$W/p" --report_to none > "$W/p.log" 2>&1 ||
  bad "plain file: $(tail -2 "$W/p.log")"
"$Z" train "${args[@]}" --train_file "text=$W/text.bin" --output_dir "$W/o" --report_to none > "$W/o.log" 2>&1 ||
  bad "one channel: $(tail -2 "$W/o.log")"
[ "$(col "$W/p" loss)" = "$(col "$W/o" loss)" ] && ! grep -q "loss/" "$W/p/trainer_state.json" &&
  ok "one channel = the plain file: $(col "$W/p" loss)" || bad "one channel $(col "$W/o" loss) vs plain $(col "$W/p" loss)"

if [ -n "$MPIRUN" ]; then
  vals() { grep -o "'loss[a-z/]*': [0-9.e+-]*" | tr '\n' ' '; }
  one=$(OMP_NUM_THREADS=1 "$Z" train "${args[@]}" "${chan[@]}" --max_steps 10 --output_dir "$W/g2" --report_to none 2>&1 | vals)
  two=$(OMP_NUM_THREADS=1 "$MPIRUN" -np 2 --oversubscribe "$Z" train "${args[@]}" "${chan[@]}" --max_steps 10 \
        --gradient_accumulation_steps 1 --output_dir "$W/n2" --report_to none 2>&1 | vals)
  [ -n "$one" ] && [ "$one" = "$two" ] && ok "2 ranks = 2 micro-batches: $two" ||
    bad "2 ranks ($two) differ from 2 micro-batches ($one)"
  # Context parallel 2: each rank holds half of every row; the per-channel sums cover both halves.
  cp2=$(OMP_NUM_THREADS=1 "$MPIRUN" -np 2 --oversubscribe "$Z" train "${args[@]}" "${chan[@]}" --max_steps 10 \
        --context-parallel-size 2 --output_dir "$W/c2" --report_to none 2>&1 | vals)
  $PY - "$one" "$cp2" <<'P' && ok "context parallel 2 = one process (1e-5): $cp2" || bad "context parallel 2 ($cp2) vs one process ($one)"
import re, sys
a, b = (re.findall(r"'(loss[a-z/]*)': ([0-9.e+-]+)", s) for s in sys.argv[1:3])
assert a and [k for k, _ in a] == [k for k, _ in b], (a, b)
assert all(abs(float(x) - float(y)) <= 1e-5 * abs(float(x)) for (_, x), (_, y) in zip(a, b)), (a, b)
P
  # An elastic restart with another world size (the global batch kept): 2 ranks x 1 micro-batch
  # resume the 1-rank run's checkpoint-10 and log what it logged at steps 15 and 20.
  cp -r "$W/a" "$W/e" && rm -rf "$W/e/checkpoint-20"
  want=$(grep -E "step (15|20)/" "$W/a.log" | vals)
  got=$(OMP_NUM_THREADS=1 "$MPIRUN" -np 2 --oversubscribe "$Z" train "${args[@]}" "${chan[@]}" \
        --gradient_accumulation_steps 1 --output_dir "$W/e" --report_to none --resume_from_checkpoint latest 2>&1 | vals)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "resumed on 2 ranks: $got" || bad "resumed on 2 ranks: $got, want $want"
fi

# Bad input: one error line each, exit 1.
err() {  # err NAME EXPECTED-SUBSTRING flags...
  local name=$1 want=$2
  shift 2
  out=$("$Z" train "${args[@]}" --output_dir "$W/bad" --report_to none "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^ztrain: error: .*$want"; then
    ok "$name: $out"
  else bad "$name (exit $rc): $out"; fi
}
# SFT records as channels (with the chat fixtures' Llama 3.1 tokenizer, as tests/cli/sft.sh):
# each row's counted targets come from its channel; 2 ranks log what 1 rank x 2 micro-batches log.
TOK="${ZT_CHAT_FIXTURES:-}/tokenizers/llama3_1"
if [ -n "${ZT_CHAT_FIXTURES:-}" ] && [ -d "$TOK" ]; then
  $PY - "$W" <<'P'
import json, sys
w = sys.argv[1]
json.dump({"model_type": "llama", "vocab_size": 128256, "hidden_size": 32, "intermediate_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 128, "eos_token_id": 128009}, open(w + "/sft.json", "w"))
with open(w + "/chat.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                         {"role": "assistant", "content": f"{2 * i}."}]}) + "\n")
with open(w + "/alpaca.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"instruction": "Repeat the input.", "input": f"x{i}", "output": f"x{i}"}) + "\n")
P
  sft=(--model_config_path "$W/sft.json" --tokenizer_name "$TOK" --cache_dir "$W/cache" --model_max_length 64
       --max_steps 4 --logging_steps 2 --report_to none --learning_rate 1e-3 --threads 1 --per_device_train_batch_size 2
       --train_file "chat=$W/chat.jsonl,alpaca=$W/alpaca.jsonl" --assistant_only_loss --packing)
  vals() { grep -o "'loss[a-z/]*': [0-9.e+-]*" | tr '\n' ' '; }
  out=$("$Z" train "${sft[@]}" --gradient_accumulation_steps 2 --output_dir "$W/s1" 2>&1)
  one=$(echo "$out" | vals)
  if echo "$out" | grep -q "SFT data (channel alpaca): 40 examples" && echo "$out" | grep -q "Data channels: chat 50.0%" &&
     [ "$(echo "$one" | grep -o "loss/alpaca" | wc -l)" = 2 ]; then ok "SFT channels: $one"
  else bad "SFT channels: $(echo "$out" | tail -3)"; fi
  if [ -n "$MPIRUN" ]; then
    two=$(OMP_NUM_THREADS=1 "$MPIRUN" -np 2 --oversubscribe "$Z" train "${sft[@]}" --output_dir "$W/s2" 2>&1 | vals)
    [ -n "$one" ] && [ "$one" = "$two" ] && ok "SFT channels: 2 ranks = 2 micro-batches" || bad "SFT 2 ranks: $two vs $one"
  fi
fi

err "no name" "has no channel name" --train_file "text=$W/text.bin,$W/noise.bin"
err "duplicate" "names channel text twice" --train_file "text=$W/text.bin,text=$W/noise.bin"
err "weights count" "has 3 weights for 2 channels" "${chan[@]:0:2}" --train_file_weights 1,2,3
err "negative weight" "must be > 0" "${chan[@]:0:2}" --train_file_weights 1,-2
err "zero weights" "must be > 0" "${chan[@]:0:2}" --train_file_weights 0,0
err "missing file" "cannot read --train_file channel noise: $W/none.bin" --train_file "text=$W/text.bin,noise=$W/none.bin"
err "weights alone" "needs named channels" --train_file "$W/text.bin" --train_file_weights 1
err "mixed kinds" "is SFT records (.jsonl) but channel text is a token file" --train_file "text=$W/text.bin,chat=$W/c.jsonl"
err "pipeline" "does not compose with pipeline stages" "${chan[@]}" --pipeline-model-parallel-size 2
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
