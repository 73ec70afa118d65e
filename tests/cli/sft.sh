#!/usr/bin/env bash
# sft.sh: `ztrain train` on SFT records end to end with a real tokenizer and chat template
# (Llama 3.1's tokenizer.json + tokenizer_config.json from the chat fixtures, ZT_CHAT_FIXTURES):
# messages / prompt-completion / Alpaca records train with --assistant_only_loss and --packing,
# the second run reads the tokenized cache instead of tokenizing, evaluation runs on a JSONL
# validation file, and a bad line (not JSON, missing fields) or an unsupported template construct
# is one error line naming it, exit 1, with no model and no cache file written.
# With an mpirun path, 2 ranks x 1 sequence give the losses of 1 rank x 2 micro-batches (the loss
# is the mean over the global step's counted targets, however they fall on ranks).
# usage: sft.sh path/to/ztrain [path/to/mpirun]   (skips, exit 0, when ZT_CHAT_FIXTURES is not set)
set -u
Z=$1
MPIRUN=${2:-}
if [ -z "${ZT_CHAT_FIXTURES:-}" ] || [ ! -d "$ZT_CHAT_FIXTURES/tokenizers/llama3_1" ]; then
  echo "SKIP: ZT_CHAT_FIXTURES not set (run tests/chat/prepare.sh DIR)"
  exit 0
fi
TOK="$ZT_CHAT_FIXTURES/tokenizers/llama3_1"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 - "$W" <<'P'
import json, sys
w = sys.argv[1]
json.dump({"model_type": "llama", "vocab_size": 128256, "hidden_size": 32, "intermediate_size": 64,
           "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 256, "eos_token_id": 128009}, open(w + "/cfg.json", "w"))
with open(w + "/train.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"messages": [{"role": "system", "content": "Answer briefly."},
                                         {"role": "user", "content": f"What is {i} plus {i}?"},
                                         {"role": "assistant", "content": f"{2 * i}."}]}) + "\n")
        f.write(json.dumps({"prompt": [{"role": "user", "content": f"Spell {i}."}],
                            "completion": [{"role": "assistant", "content": " ".join(str(i))}]}) + "\n")
        f.write(json.dumps({"instruction": "Repeat the input.", "input": f"x{i}", "output": f"x{i}"}) + "\n")
with open(w + "/val.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"prompt": [{"role": "user", "content": f"Double {i}."}],
                            "completion": [{"role": "assistant", "content": str(2 * i)}]}) + "\n")
P
fail=0
run() {
  "$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$TOK" --cache_dir "$W/cache" \
    --per_device_train_batch_size 2 --model_max_length 128 --max_steps 3 --report_to none \
    --overwrite_output_dir --learning_rate 1e-3 "$@"
}
out=$(run --train_file "$W/train.jsonl" --validation_file "$W/val.jsonl" --assistant_only_loss --packing \
  --output_dir "$W/m1" 2>&1) || { echo "FAIL: SFT training"; echo "$out"; exit 1; }
echo "$out" | grep -q "SFT data: 120 examples" || { echo "FAIL: no SFT data line"; echo "$out"; fail=1; }
echo "$out" | grep -q "tokenized into" || { echo "FAIL: the first run did not tokenize"; echo "$out"; fail=1; }
echo "$out" | grep -q "eval_loss" || { echo "FAIL: no eval_loss"; echo "$out"; fail=1; }
[ -f "$W/m1/model.safetensors" ] || { echo "FAIL: no model written"; fail=1; }
out=$(run --train_file "$W/train.jsonl" --assistant_only_loss --packing --output_dir "$W/m2" 2>&1) ||
  { echo "FAIL: second run"; echo "$out"; exit 1; }
echo "$out" | grep -q "read cache" || { echo "FAIL: the second run did not read the cache"; echo "$out"; fail=1; }
out=$(run --train_file "$W/train.jsonl" --output_dir "$W/m3" 2>&1) ||  # unpacked, default losses
  { echo "FAIL: unpacked run"; echo "$out"; exit 1; }

if [ -n "$MPIRUN" ]; then
  dp() { grep -o "'loss': [0-9.]*" | tr '\n' ' '; }
  flags=(--train_file "$W/train.jsonl" --assistant_only_loss --packing --no_shuffle --logging_steps 1
         --max_steps 4 --per_device_train_batch_size 1)
  one=$(OMP_NUM_THREADS=1 run "${flags[@]}" --gradient_accumulation_steps 2 --output_dir "$W/g2" 2>&1 | dp)
  two=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
        "$MPIRUN" -np 2 --oversubscribe "$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$TOK" \
        --cache_dir "$W/cache" --model_max_length 128 --report_to none --overwrite_output_dir --learning_rate 1e-3 \
        "${flags[@]}" --output_dir "$W/n2" 2>&1 | dp)
  [ -n "$one" ] && [ "$one" = "$two" ] || { echo "FAIL: 2 ranks ($two) differ from 2 micro-batches ($one)"; fail=1; }
fi

# Bad input: one line each, exit 1, no model, no cache file.
bad() {  # bad NAME EXPECTED-SUBSTRING [flags...]
  local name=$1 want=$2
  shift 2
  rm -rf "$W/bad" "$W/badcache"
  err=$("$Z" train --model_config_path "$W/cfg.json" --tokenizer_name "$TOK" --cache_dir "$W/badcache" \
    --per_device_train_batch_size 2 --model_max_length 64 --max_steps 1 --report_to none --output_dir "$W/bad" "$@" \
    2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 1 ] || { echo "FAIL: $name: exit $rc, expected 1"; fail=1; }
  [ "$(echo "$err" | wc -l)" -eq 1 ] || { echo "FAIL: $name: not one line: $err"; fail=1; }
  echo "$err" | grep -qF -- "$want" || { echo "FAIL: $name: expected \"$want\", got: $err"; fail=1; }
  [ ! -e "$W/bad/model.safetensors" ] || { echo "FAIL: $name: a model was written"; fail=1; }
  [ -z "$(ls -A "$W/badcache" 2>/dev/null)" ] || { echo "FAIL: $name: cache files left: $(ls "$W/badcache")"; fail=1; }
}
head -5 "$W/train.jsonl" > "$W/b1.jsonl"; echo '{"messages": [' >> "$W/b1.jsonl"
bad "not JSON" "ztrain: error: --train_file $W/b1.jsonl line 6: not valid JSON" --train_file "$W/b1.jsonl"
head -2 "$W/train.jsonl" > "$W/b2.jsonl"; echo '{"question": "q", "answer": "a"}' >> "$W/b2.jsonl"
bad "missing fields" "line 3: the record has none of the fields" --train_file "$W/b2.jsonl"
printf '{%% for m in messages %%}{{ m.content }}\n{%% include "x" %%}{%% endfor %%}' > "$W/t.jinja"
bad "unsupported construct" "chat template $W/t.jinja line 2: unsupported Jinja construct {% include %}" \
  --train_file "$W/train.jsonl" --chat_template_path "$W/t.jinja"
printf '\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00' > "$W/tokens.bin"
err=$("$Z" train --model_config_path "$W/cfg.json" --train_file "$W/tokens.bin" --assistant_only_loss --max_steps 1 \
  --output_dir "$W/bad" --report_to none 2>&1 >/dev/null)
echo "$err" | grep -qF -- "--assistant_only_loss applies to SFT records (a .jsonl --train_file)" ||
  { echo "FAIL: SFT flag with a token file: $err"; fail=1; }
bad "--eos_token_id with SFT records" "--eos_token_id separates documents in token files" \
  --train_file "$W/train.jsonl" --eos_token_id 3
[ $fail -eq 0 ] && echo "sft.sh: all checks passed"
exit $fail
