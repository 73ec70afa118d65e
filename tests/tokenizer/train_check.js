#!/usr/bin/env node
// train_check.js NODE_MODULES TOKENIZER_JSON SHARD TEXT...: Hugging Face's Rust tokenizers (npm
// @anush008/tokenizers) loads a tokenizer.json written by `ztrain tokenizer-train`, encodes each
// text (add_special_tokens off) and the result is compared with the shard `ztrain tokenize` wrote
// for the same texts in the same order (each document followed by the EOS id, <|endoftext|>).
// Also checks that HF decodes its ids back to the text (byte-level BPE is lossless).
// Exit 0 when every text matches; else prints the first differences and exits 1.
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [nodeModules, tokJson, shard, ...texts] = process.argv.slice(2);
  const { Tokenizer } = require(path.join(nodeModules, '@anush008/tokenizers'));
  const tok = Tokenizer.fromFile(tokJson);
  const eos = tok.tokenToId('<|endoftext|>');
  if (eos == null) throw new Error('no <|endoftext|> in ' + tokJson);
  const buf = fs.readFileSync(shard);
  if (buf.toString('latin1', 0, 8) !== 'ZTTOKENS') throw new Error(shard + ': not a ztrain shard');
  const width = buf.readUInt32LE(12);
  const count = Number(buf.readBigUInt64LE(16));
  const got = [];
  for (let i = 0; i < count; ++i) got.push(width === 2 ? buf.readUInt16LE(64 + 2 * i) : buf.readInt32LE(64 + 4 * i));
  let pos = 0, differ = 0, roundtrip = 0, tokens = 0;
  for (const file of texts) {
    const text = fs.readFileSync(file, 'utf8');
    if (text === '') continue;  // ztrain tokenize writes nothing for an empty document, not even EOS
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    tokens += ids.length;
    const mine = got.slice(pos, pos + ids.length);
    pos += ids.length;
    const same = mine.length === ids.length && mine.every((v, i) => v === ids[i]) && got[pos] === eos;
    pos += 1;
    if (!same) {
      if (++differ <= 3) {
        let k = 0;
        while (k < ids.length && mine[k] === ids[k]) ++k;
        console.log(`differs: ${path.basename(file)} at token ${k}: ztrain ${JSON.stringify(mine.slice(k, k + 5))}` +
                    ` hf ${JSON.stringify(ids.slice(k, k + 5))}`);
      }
      // Resynchronise on this document's EOS so one difference does not hide the rest.
      pos = got.indexOf(eos, pos - 1 - ids.length) + 1;
    }
    if ((await tok.decode(ids, false)) !== text) ++roundtrip;
  }
  if (pos !== got.length) console.log(`shard has ${got.length - pos} extra tokens`);
  console.log(`train_check: ${texts.length} texts, ${tokens} HF tokens, ${differ} differ, ` +
              `${roundtrip} do not decode back to the text (vocab ${tok.getVocabSize(true)})`);
  process.exit(differ === 0 && roundtrip === 0 && pos === got.length ? 0 : 1);
}
main().catch((e) => { console.error('train_check: ' + e.message); process.exit(1); });
