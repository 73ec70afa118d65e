#!/usr/bin/env bash
# families.sh: the published config.json of Llama-3.2-1B, Qwen2.5-0.5B, Mistral-7B-v0.1,
# Qwen3-0.6B, OLMo-2-0425-1B, Phi-3-mini-128k, Gemma-3-1B and Gemma-2-2B (tests/fixtures/configs; Phi-3's longrope factors
# are placeholders of the published length) pass estimate-memory as downloaded, and train when shrunk
# (every family key kept; Mistral's window shorter than the rows); the output folder keeps the
# config's keys and carries the tokenizer and generation config, so `generate` runs on it (and on
# a checkpoint). A model saved with --max_shard_size 50MB is an index + shards that loads again;
# an index naming a missing shard is one error line and nothing is written.
# usage: families.sh path/to/ztrain
set -u
Z=$1
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/../fixtures/configs
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
fail=0
FAMS="llama-3.2-1b qwen2.5-0.5b mistral-7b-v0.1 qwen3-0.6b olmo2-1b phi3-mini-128k gemma3-1b gemma2-2b"
for f in $FAMS; do
  "$Z" estimate-memory --model_config_path "$CFG/$f.json" --per_device_train_batch_size 1 --model_max_length 2048 \
    >"$W/est" 2>&1 || { echo "FAIL: estimate-memory $f"; cat "$W/est"; fail=1; }
done
grep -q "1235.81M total params" <(for f in llama-3.2-1b; do "$Z" estimate-memory --model_config_path "$CFG/$f.json"; done) ||
  { echo "FAIL: Llama-3.2-1B is not 1235.81M parameters"; fail=1; }
# the published counts (Gemma-3-1B: 999,885,952 with its tied embedding; Gemma-2-2B 2,614,341,888)
for want in "olmo2-1b 1484.92M" "phi3-mini-128k 3821.08M" "gemma3-1b 999.89M" "gemma2-2b 2614.34M"; do
  set -- $want
  "$Z" estimate-memory --model_config_path "$CFG/$1.json" | grep -q "$2 total params" ||
    { echo "FAIL: $1 is not $2 parameters"; fail=1; }
done
# A byte-level GPT-2 tokenizer (256 bytes + EOS) and a generation config beside each shrunk config.
$PY - "$W" "$CFG" <<'P'
import json, os, random, sys
w, cfg = sys.argv[1], sys.argv[2]
keep = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
m, n = {}, 0
for b in range(256):
    if b in keep: m[b] = chr(b)
    else: m[b] = chr(256 + n); n += 1
enc = {m[b]: b for b in range(256)}
enc["<|endoftext|>"] = 256
for f in ["llama-3.2-1b", "qwen2.5-0.5b", "mistral-7b-v0.1", "qwen3-0.6b", "olmo2-1b", "phi3-mini-128k", "gemma3-1b",
          "gemma2-2b"]:
    c = json.load(open(f"{cfg}/{f}.json"))
    c.update({"vocab_size": 257, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 64, "eos_token_id": 256})
    if "head_dim" in c: c["head_dim"] = 16
    if c.get("sliding_window") is not None and c["model_type"] in ("mistral", "phi3", "gemma3_text", "gemma2"):
        c["sliding_window"] = 8
    if (c.get("rope_scaling") or {}).get("type") == "longrope":  # 8 frequencies at head_dim 16; rows pass 8
        c["rope_scaling"].update(short_factor=[1.0 + 0.1 * i for i in range(8)], long_factor=[1.0 + i for i in range(8)])
        c["original_max_position_embeddings"] = 8
    d = f"{w}/{f}"
    os.makedirs(d)
    json.dump(c, open(f"{d}/config.json", "w"), indent=2)
    json.dump(enc, open(f"{d}/encoder.json", "w"))
    open(f"{d}/vocab.bpe", "w").write("#version: 0.2\n")
    json.dump({"eos_token_id": 256, "max_new_tokens": 8}, open(f"{d}/generation_config.json", "w"))
r = random.Random(1)
open(f"{w}/tok.bin", "wb").write(b"".join(r.randrange(257).to_bytes(2, "little") for _ in range(6000)))
# A Qwen2.5 whose tied embedding alone is over 50 MB (151936 x 96 fp32 = 58 MB).
c = json.load(open(f"{cfg}/qwen2.5-0.5b.json"))
c.update({"hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "max_position_embeddings": 64})
os.makedirs(f"{w}/big")
json.dump(c, open(f"{w}/big/config.json", "w"), indent=2)
P
train() { "$Z" train --train_file "$W/tok.bin" --per_device_train_batch_size 2 --model_max_length 16 \
  --report_to none --learning_rate 1e-3 "$@"; }
for f in $FAMS; do
  out=$W/out-$f
  train --model_config_path "$W/$f/config.json" --max_steps 3 --save_steps 2 --output_dir "$out" >"$W/log" 2>&1 ||
    { echo "FAIL: train $f"; tail -5 "$W/log"; fail=1; continue; }
  $PY - "$W/$f/config.json" "$out/config.json" <<'P' || { echo "FAIL: $f config.json lost keys"; fail=1; }
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
lost = [k for k in a if k not in b or (k != "torch_dtype" and a[k] != b[k])]
sys.exit(f"lost or changed: {lost}" if lost else 0)
P
  for d in "$out" "$out/checkpoint-2"; do
    for side in encoder.json vocab.bpe generation_config.json; do
      [ -f "$d/$side" ] || { echo "FAIL: $f: $d has no $side"; fail=1; }
    done
    "$Z" generate --model_name_or_path "$d" --prompt "ab" --max_new_tokens 5 --seed 1 >/dev/null 2>"$W/gen" ||
      { echo "FAIL: generate on $d"; cat "$W/gen"; fail=1; }
  done
done
# --max_shard_size 50MB: the 58 MB embedding alone in one shard, the rest in another; it loads again.
big=$W/out-big
train --model_config_path "$W/big/config.json" --max_steps 1 --save_strategy no --max_shard_size 50MB \
  --output_dir "$big" >"$W/log" 2>&1 || { echo "FAIL: train big"; tail -5 "$W/log"; fail=1; }
[ -f "$big/model.safetensors.index.json" ] && [ -f "$big/model-00001-of-00002.safetensors" ] &&
  [ -f "$big/model-00002-of-00002.safetensors" ] && [ ! -f "$big/model.safetensors" ] ||
  { echo "FAIL: --max_shard_size 50MB did not write 2 shards + index"; ls "$big"; fail=1; }
train --model_name_or_path "$big" --max_steps 1 --save_strategy no --output_dir "$W/again" >"$W/log" 2>&1 ||
  { echo "FAIL: training from the sharded folder"; tail -3 "$W/log"; fail=1; }
# A missing shard: one error line naming it, nothing written.
mv "$big/model-00002-of-00002.safetensors" "$W/moved"
train --model_name_or_path "$big" --max_steps 1 --output_dir "$W/never" >"$W/out" 2>"$W/err"
rc=$?
[ $rc -ne 0 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q "^ztrain: error: .*model-00002-of-00002.safetensors.*missing" "$W/err" ||
  { echo "FAIL: missing shard: rc $rc, stderr:"; cat "$W/err"; fail=1; }
[ ! -e "$W/never" ] || [ -z "$(ls -A "$W/never" | grep -v .ztrain.lock)" ] || { echo "FAIL: output written"; fail=1; }
# Families ztrain does not implement, and a longrope factor list of the wrong length: one error line
# each, naming the model_type / the key.
bad() {  # name, python that edits c (a shrunk Phi-3 config), the error's pattern
  $PY - "$W/phi3-mini-128k/config.json" "$W/bad-$1.json" "$2" <<'P'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))
P
  train --model_config_path "$W/bad-$1.json" --max_steps 1 --output_dir "$W/bad-out" >"$W/out" 2>"$W/err"
  rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q "^ztrain: error: .*$3" "$W/err" ||
    { echo "FAIL: $1: rc $rc, stderr:"; cat "$W/err"; fail=1; }
}
bad gemma 'c["model_type"] = "gemma"' 'model_type "gemma" is not supported'
bad gemma3_multimodal 'c["model_type"] = "gemma3"' 'model_type "gemma3" is not supported'
bad final_softcap 'c["model_type"] = "gemma3_text"; c["final_logit_softcapping"] = 30.0' \
  'final_logit_softcapping = 30.0 is not supported for gemma3_text'
bad attn_softcap 'c["model_type"] = "gemma3_text"; c["attn_logit_softcapping"] = 50.0' 'attn_logit_softcapping = 50.0'
bad layer_types 'c["model_type"] = "gemma3_text"; c["layer_types"] = ["full_attention"]' \
  'layer_types must list one entry per layer (2)'
bad short_factor 'c["rope_scaling"]["short_factor"] = [1.0] * 7' 'short_factor has 7 entries; .*head_dim / 2 = 8'
bad long_factor 'c["rope_scaling"]["long_factor"] = [1.0] * 9' 'long_factor has 9 entries'
bad partial_rotary 'c["partial_rotary_factor"] = 0.75' 'partial_rotary_factor 0.75 is not supported'
[ $fail -eq 0 ] && echo "families: all passed"
exit $fail
