#!/usr/bin/env bash
# generate.sh: `ztrain generate` end to end on a tiny model with a byte-level GPT-2 tokenizer of
# 256 byte tokens + <|endoftext|> (no merges): --min_new_tokens holds EOS back so exactly that
# many tokens come out, --compare_full_forward reports the KV-cache speed-up, the same seed gives
# the same text, and a length beyond the context is one clear error.
# usage: generate.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
$PY - "$W" <<'P'
import json, sys, random
w = sys.argv[1]
# GPT-2's byte -> printable-unicode table: printable Latin-1 bytes map to themselves, the rest to 256+n.
keep = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
m, n = {}, 0
for b in range(256):
    if b in keep: m[b] = chr(b)
    else: m[b] = chr(256 + n); n += 1
enc = {m[b]: b for b in range(256)}
enc["<|endoftext|>"] = 256
json.dump(enc, open(w + "/encoder.json", "w"))
open(w + "/vocab.bpe", "w").write("#version: 0.2\n")
json.dump({"model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64,
           "eos_token_id": 256}, open(w + "/cfg.json", "w"))
r = random.Random(1)
open(w + "/tok.bin", "wb").write(b"".join(r.randrange(257).to_bytes(2, "little") for _ in range(4000)))
P
"$Z" train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 2 \
  --model_max_length 32 --max_steps 2 --output_dir "$W/m" --report_to none >/dev/null 2>&1 || { echo "FAIL: train"; exit 1; }
cp "$W/encoder.json" "$W/vocab.bpe" "$W/m/"
fail=0
gen() { "$Z" generate --model_name_or_path "$W/m" --prompt "ab" --seed 3 "$@"; }
out=$(gen --max_new_tokens 40 --min_new_tokens 40 --compare_full_forward 2>"$W/err") || { echo "FAIL: generate"; cat "$W/err"; exit 1; }
grep -q " 40 new tokens" "$W/err" || { echo "FAIL: --min_new_tokens 40 did not give 40 tokens"; cat "$W/err"; fail=1; }
grep -q "KV cache speed-up" "$W/err" || { echo "FAIL: no speed-up line"; fail=1; }
again=$(gen --max_new_tokens 40 --min_new_tokens 40 2>/dev/null)
[ "$out" = "$again" ] || { echo "FAIL: the same seed gave different text"; fail=1; }
[ "${out:0:2}" = "ab" ] || { echo "FAIL: output does not start with the prompt: $out"; fail=1; }
gen --max_new_tokens 100 >/dev/null 2>"$W/err2" && { echo "FAIL: length beyond the context accepted"; fail=1; }
[ "$(wc -l <"$W/err2")" = 1 ] && grep -q "exceeds the model's context" "$W/err2" ||
  { echo "FAIL: context error"; cat "$W/err2"; fail=1; }
[ $fail = 0 ] && echo "generate: all checks passed"
exit $fail
