#!/usr/bin/env bash
# bench_tokenizer.sh [TOKENIZER...]: encoding speed on one thread, ztrain vs Hugging Face's Rust
# tokenizers (npm @anush008/tokenizers), on the parity texts (tests/tokenizer/prepare.sh: 1384
# texts, 16.5 MB of English, Chinese, Japanese, Korean, code, emoji) held in memory. Each side
# loads the tokenizer afresh per repeat (cold caches) and times only the encode calls: ztrain's
# encode_with_special per text (bench/bench_tokenizer.cpp), HF's encodeBatch over all texts with
# RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false (bench/bench_tokenizer_hf.js). Prints the
# median of 3 repeats as MB/s and the ratio, plus whether the token counts agree.
# Default tokenizers: gpt2_hf llama3 qwen3 gemma3 albert bert. Timings on a shared machine are noisy.
# Needs: build/zt_bench_tokenizer, .cache/tokenizer-fixtures (or ZT_TOKENIZER_FIXTURES).
set -euo pipefail
cd "$(dirname "$0")/.."
fx=${ZT_TOKENIZER_FIXTURES:-$PWD/.cache/tokenizer-fixtures}
bin=${ZT_BENCH_BIN:-build/zt_bench_tokenizer}
[ -x "$bin" ] || { echo "bench_tokenizer: build $bin first (cmake --build build --target zt_bench_tokenizer)" >&2; exit 1; }
[ -d "$fx/texts" ] || { echo "bench_tokenizer: no fixtures in $fx (run tests/tokenizer/prepare.sh $fx)" >&2; exit 1; }
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(gpt2_hf llama3 qwen3 gemma3 albert bert)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
ls "$fx"/texts/*.txt >"$list"
median() { tr ' ' '\n' | sort -g | sed -n 2p; }  # of 3
printf '%-12s %10s %12s %12s %8s  %s\n' tokenizer MB "ztrain MB/s" "HF MB/s" ratio tokens
for n in "${names[@]}"; do
  tj="$fx/tokenizers/$n/tokenizer.json"
  z=$(OMP_NUM_THREADS=1 "$bin" "$tj" "$list" 3)
  h=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node bench/bench_tokenizer_hf.js "$fx/npm/node_modules" "$tj" "$list" 3)
  bytes=$(echo "$z" | awk '{print $2}')
  zs=$(echo "$z" | grep -o 'seconds [0-9.]*' | awk '{printf "%s ", $2}' | median)
  hs=$(echo "$h" | grep -o 'seconds [0-9.]*' | awk '{printf "%s ", $2}' | median)
  zt=$(echo "$z" | awk '{print $NF}')
  ht=$(echo "$h" | awk '{print $NF}')
  awk -v n="$n" -v b="$bytes" -v zs="$zs" -v hs="$hs" -v zt="$zt" -v ht="$ht" 'BEGIN {
    printf "%-12s %10.2f %12.2f %12.2f %8.2f  %s\n", n, b / 1e6, b / 1e6 / zs, b / 1e6 / hs, hs / zs,
      (zt == ht ? "same count" : "ztrain " zt " vs HF " ht) }'
done
