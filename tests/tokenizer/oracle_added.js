#!/usr/bin/env node
// oracle_added.js NODE_MODULES OUTDIR: the added-token fixtures (run by prepare.sh after
// oracle.js, whose tokenizers/ and texts/ it reads). For each Hugging Face tokenizer of the parity
// set, 200 short documents (Brown sentences) seeded with that tokenizer's added tokens, special and
// not, glued to words or spaced, plus near misses (a token less its last character), and the
// reference ids in both of transformers' modes:
//   added/ids/TOKENIZER/NNN.bin    split_special_tokens=False (tokenizer(text), every added token matched)
//   added/split/TOKENIZER/NNN.bin  split_special_tokens=True (special tokens are text)
//   added/texts/TOKENIZER/NNN.txt  the documents; added/manifest.json: counts and what was skipped
// The npm binding has no encode_special_tokens switch, so the True mode is Hugging Face run on the
// same tokenizer.json with the special tokens made unmatchable (below). That equals tokenizers'
// encode_special_tokens (which matches a special token and then skips it, consuming its text)
// exactly when no non-special token's occurrence overlaps a special token's occurrence in the
// text: a document where one does is written without a split reference (counted in the manifest).
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, outDir] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error('usage: node oracle_added.js NODE_MODULES OUTDIR');
  process.exit(2);
}
const out = (...p) => path.join(path.resolve(outDir), ...p);
const TOKENIZERS = ['gpt2_hf', 'llama2', 'llama3', 'qwen3', 'gemma3', 'deepseek_v3', 'gpt4o', 'albert', 'albert_spm', 'bert'];
const DOCS = 200;

function writeIds(file, ids) {
  const buf = Buffer.alloc(4 * ids.length);
  ids.forEach((id, i) => buf.writeInt32LE(id, 4 * i));
  fs.writeFileSync(file, buf);
}

// Brown sentences: the lines of the first Brown documents oracle.js wrote.
function sentences() {
  const names = fs.readdirSync(out('texts')).filter((f) => f.startsWith('brown_')).sort().slice(0, 30);
  const lines = [];
  for (const f of names)
    for (const l of fs.readFileSync(out('texts', f), 'utf8').split('\n')) if (l.trim().length > 20) lines.push(l.trim());
  return lines;
}

function makeDocs(tokens, lines, seed) {
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const special = tokens.filter((t) => t.special), plain = tokens.filter((t) => !t.special);
  const glue = ['', ' ', ' ', '\n', '  ', '\t'];
  const docs = [];
  for (let d = 0; d < DOCS; d++) {
    const words = [];
    const n = 1 + Math.floor(rnd() * 3);
    for (let k = 0; k < n; k++) words.push(...pick(lines).split(' '));
    const inserts = 1 + Math.floor(rnd() * 6);
    for (let k = 0; k < inserts; k++) {
      const from = plain.length && (rnd() < 0.5 || !special.length) ? plain : special;
      let t = pick(from).content;
      if (rnd() < 0.15 && t.length > 2) t = t.slice(0, -1);  // a near miss: never matched
      const at = Math.floor(rnd() * (words.length + 1));
      if (rnd() < 0.3 && words.length) {
        words[Math.min(at, words.length - 1)] += t + pick(glue);  // glued to a word
      } else {
        words.splice(at, 0, pick(glue) + t + pick(glue));
      }
    }
    docs.push(words.join(' '));
  }
  return docs;
}

// Every [start, end) where one of `contents` occurs in text.
function occurrences(text, contents) {
  const spans = [];
  for (const c of contents)
    for (let i = text.indexOf(c); i >= 0; i = text.indexOf(c, i + 1)) spans.push([i, i + c.length]);
  return spans;
}

function overlaps(text, special, plain) {
  const s = occurrences(text, special);
  if (!s.length) return false;
  const p = occurrences(text, plain);
  return p.some(([a, b]) => s.some(([c, d]) => a < d && c < b));
}

async function main() {
  const t0 = Date.now();
  const { Tokenizer } = require(path.join(path.resolve(nodeModules), '@anush008/tokenizers'));
  const lines = sentences();
  const manifest = { tokenizers: TOKENIZERS, docs: DOCS, tokens: {}, split_tokens: {}, no_split_reference: {},
    added: {} };
  for (const [ti, name] of TOKENIZERS.entries()) {
    const file = out('tokenizers', name, 'tokenizer.json');
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    const tokens = json.added_tokens || [];
    const specialTexts = tokens.filter((t) => t.special).map((t) => t.content);
    const plainTexts = tokens.filter((t) => !t.special).map((t) => t.content);
    // Hugging Face ignores the ids in added_tokens: a token whose text is in the model's vocab gets
    // that id, any other the next free one, in list order. So a special token outside the vocab is
    // renamed to a text no document holds (it keeps its place in the numbering), and one inside
    // the vocab is removed (renamed, it would take a new id and shift the others).
    const vocab = json.model.vocab;
    const inVocab = (c) => (Array.isArray(vocab) ? vocab.some((v) => v[0] === c) : Object.hasOwn(vocab, c));
    const noSpecial = { ...json, added_tokens: tokens.filter((t) => !t.special || !inVocab(t.content))
      .map((t) => (t.special ? { ...t, content: `\uE000${t.id}\uE001` } : t)) };
    const both = Tokenizer.fromFile(file);
    const split = Tokenizer.fromString(JSON.stringify(noSpecial));
    for (const d of ['texts', 'ids', 'split']) fs.mkdirSync(out('added', d, name), { recursive: true });
    manifest.tokens[name] = manifest.split_tokens[name] = 0;
    manifest.no_split_reference[name] = [];
    manifest.added[name] = { special: specialTexts.length, plain: plainTexts.length };
    const docs = makeDocs(tokens, lines, 777 + ti);
    const opts = { addSpecialTokens: false };
    for (const [i, text] of docs.entries()) {
      const id = String(i).padStart(3, '0');
      fs.writeFileSync(out('added', 'texts', name, id + '.txt'), text, 'utf8');
      const ids = (await both.encode(text, null, opts)).getIds();
      writeIds(out('added', 'ids', name, id + '.bin'), ids);
      manifest.tokens[name] += ids.length;
      if (overlaps(text, specialTexts, plainTexts)) {
        manifest.no_split_reference[name].push(id);
        continue;
      }
      const sids = (await split.encode(text, null, opts)).getIds();
      writeIds(out('added', 'split', name, id + '.bin'), sids);
      manifest.split_tokens[name] += sids.length;
    }
  }
  manifest.seconds = (Date.now() - t0) / 1000;
  fs.writeFileSync(out('added', 'manifest.json'), JSON.stringify(manifest, null, 1));
  console.log(`oracle_added: ${TOKENIZERS.length} tokenizers x ${DOCS} documents, ${manifest.seconds.toFixed(1)} s`);
}

main().catch((e) => { console.error(e); process.exit(1); });
