#!/usr/bin/env bash
# sentencepiece.sh: a model folder whose tokenizer is only a SentencePiece tokenizer.model (no
# tokenizer.json) works wherever ztrain loads a tokenizer: `tokenize` (ids equal to spm_encode's,
# each document followed by </s>), SFT training with a chat template (turn markers matched as
# special tokens), `eval --text_file`, and `generate` (the prompt's <s> matched, ids decoded).
# The model is trained here by Debian's spm_train on a small generated corpus (about a second).
# usage: sentencepiece.sh path/to/ztrain   (skips, exit 0, without spm_train / spm_encode)
set -u
Z=$1
if ! command -v spm_train >/dev/null || ! command -v spm_encode >/dev/null; then
  echo "SKIP: spm_train / spm_encode not installed (apt-get install sentencepiece)"
  exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then echo "ok    $1"; else echo "FAIL  $1"; fail=1; fi
}
/usr/bin/python3 - "$W" <<'P'
import json, random, sys
w = sys.argv[1]
random.seed(3)
words = "the cat sat on a mat while dogs ran over green hills and the river flowed past old towns".split()
with open(w + "/corpus.txt", "w") as f:
    for i in range(2000):
        f.write(" ".join(random.choice(words) for _ in range(12)) + "\n")
import os
os.makedirs(w + "/m")
json.dump({"model_type": "gpt2", "vocab_size": 300, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 128,
           "bos_token_id": 1, "eos_token_id": 2}, open(w + "/m/config.json", "w"))
json.dump({"bos_token": "<s>", "eos_token": "</s>",
           "chat_template": "{{ bos_token }}{% for m in messages %}<u>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"},
          open(w + "/m/tokenizer_config.json", "w"))
with open(w + "/sft.jsonl", "w") as f:
    for i in range(16):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"the cat {i}"},
                                         {"role": "assistant", "content": "a dog ran over the hills"}]}) + "\n")
os.makedirs(w + "/docs")
open(w + "/docs/a.txt", "w").write("the cat sat on a mat  the river flowed")
open(w + "/docs/b.txt", "w").write("old towns and green hills <s> x")
P
spm_train --input="$W/corpus.txt" --model_prefix="$W/m/tokenizer" --vocab_size=300 --model_type=bpe \
  --byte_fallback=true --user_defined_symbols='<u>' --minloglevel=2 >/dev/null 2>&1
rm -f "$W/m/tokenizer.vocab"

# tokenize: each document's spm_encode ids (the documents are one line each), then </s> (id 2).
"$Z" tokenize --tokenizer_name_or_path "$W/m" --input "$W/docs" --output_dir "$W/tok" --validation_split_percentage 0 \
  >/dev/null 2>&1
check "tokenize ran" $?
want=$(for f in a b; do cat "$W/docs/$f.txt"; echo; done | spm_encode --model="$W/m/tokenizer.model" --output_format=id)
/usr/bin/python3 - "$W/tok/train.bin" "$W/tok/tokenize_stats.json" <<P
import json, struct, sys
data = open(sys.argv[1], "rb").read()
st = json.load(open(sys.argv[2]))
width, n = struct.unpack("<IQ", data[12:24])  # shard header (src/data/shard_format.h)
ids = list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "i"), data[64:64 + width * n]))
want = []
for line in """$want""".strip().split("\n"):
    want += [int(x) for x in line.split()] + [2]
sys.exit(0 if ids == want and st["tokenizer"] == "sentencepiece" else 1)
P
rc=$?
check "tokenize ids = spm_encode's + </s>" $rc

# SFT: the template's <s>, <u> and </s> become their ids; a model is saved with the tokenizer.model.
"$Z" train --model_config_path "$W/m/config.json" --tokenizer_name "$W/m" --train_file "$W/sft.jsonl" \
  --output_dir "$W/out" --max_steps 2 --per_device_train_batch_size 2 --model_max_length 64 >"$W/sft.log" 2>&1
check "SFT train" $?
grep -q "SFT data: 16 examples" "$W/sft.log"; check "SFT examples" $?
[ -f "$W/out/tokenizer.model" ]; check "saved folder has tokenizer.model" $?

"$Z" eval --model_name_or_path "$W/out" --text_file "$W/docs" --model_max_length 16 >"$W/eval.log" 2>&1
check "eval --text_file" $?
grep -q "eval_loss" "$W/eval.log"; check "eval_loss printed" $?
"$Z" generate --model_name_or_path "$W/out" --prompt "<s>the cat" --max_new_tokens 5 --seed 1 >"$W/gen.log" 2>&1
check "generate" $?
grep -q "4 prompt tokens\|[0-9] prompt tokens" "$W/gen.log"; check "generate prompt encoded" $?
exit $fail
