#!/usr/bin/env node
// bench_tokenizer_hf.js NODE_MODULES TOKENIZER_JSON TEXT_LIST REPEATS: Hugging Face tokenizers'
// speed through the npm binding (@anush008/tokenizers, the Rust library), for
// bench/bench_tokenizer.sh. The texts are read first; each repeat loads the tokenizer afresh and
// times one encodeBatch call over all of them (add_special_tokens off). Run it with
// RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false for one thread. Prints the same line as
// zt_bench_tokenizer.
'use strict';
const fs = require('fs');
const path = require('path');
async function main() {
  const [nodeModules, tokJson, list, repeats] = process.argv.slice(2);
  const { Tokenizer } = require(path.join(nodeModules, '@anush008/tokenizers'));
  const texts = fs.readFileSync(list, 'utf8').split('\n').filter((p) => p).map((p) => fs.readFileSync(p, 'utf8'));
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
  let line = `bytes ${bytes}`, tokens = 0;
  for (let r = 0; r < Number(repeats); ++r) {
    const tok = Tokenizer.fromFile(tokJson);
    const t0 = process.hrtime.bigint();
    const encs = await tok.encodeBatch(texts, { addSpecialTokens: false });
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    tokens = 0;
    for (const e of encs) tokens += e.getIds().length;  // after the timer: reading ids back is node's cost
    line += ` seconds ${s.toFixed(4)}`;
  }
  console.log(`${line} tokens ${tokens}`);
}
main().catch((e) => { console.error('bench_tokenizer_hf: ' + e.message); process.exit(1); });
