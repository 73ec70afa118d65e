// tokenizer.h: text <-> token ids for the models ztrain trains. Loads the three formats users
// bring: OpenAI's GPT-2 files (encoder.json + vocab.bpe), Hugging Face tokenizer.json (BPE,
// Unigram and WordPiece models with their normalizers, pre-tokenizers, post-processor and
// decoder) and SentencePiece's tokenizer.model (through libsentencepiece). Encoding matches the
// reference tokenizers token for token; see docs/tokenizers.md for the pipeline, the parity check
// and measured speed.
// Deliberately not here: padding, truncation, pairs of sequences, offsets, chat templates.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class Tokenizer {
 public:
  // Loads from a folder or file: a folder with encoder.json + vocab.bpe (OpenAI GPT-2 format),
  // a Hugging Face tokenizer.json (the file, or a folder containing it), or a SentencePiece
  // tokenizer.model (the file, or a folder with it and no tokenizer.json). Throws zt::Error
  // naming the file and the problem when something is missing, malformed or unsupported.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  virtual ~Tokenizer();

  // Text to ids with Hugging Face's added-token semantics (tokenizers' AddedVocabulary, matched
  // before the normalizer, leftmost-longest): non-special added tokens (Gemma 3's <unused0>, Qwen3's
  // <think>) always become their ids, as Hugging Face always matches them; special ones
  // (<|endoftext|>, <s>) only when split_special_tokens is false. split_special_tokens is
  // transformers' flag with its meaning: true = special tokens are ordinary text. Its default here
  // is true, unlike transformers' (false): a document that contains "<|endoftext|>" must not
  // inject a boundary into a corpus (docs/tokenizers.md#added-tokens). add_special_tokens: the
  // post-processor's template adds bos/eos (e.g. Llama's <s>). Thread-safe on one instance.
  struct EncodeOptions {
    bool split_special_tokens = true;
    bool add_special_tokens = false;
  };
  virtual std::vector<int32_t> encode(std::string_view text, EncodeOptions opt) const = 0;
  std::vector<int32_t> encode(std::string_view text) const { return encode(text, EncodeOptions{}); }
  // Hugging Face's tokenizer(text) exactly: every added token matched (split_special_tokens false).
  std::vector<int32_t> encode_with_special(std::string_view text, bool add_special_tokens = false) const {
    return encode(text, EncodeOptions{false, add_special_tokens});
  }
  // Ids to text; special tokens decode to their text. Throws zt::Error on an id outside the vocab.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;

  virtual int vocab_size() const = 0;    // 1 + the largest id (vocab and added tokens)
  virtual int32_t eos_id() const = 0;    // <|endoftext|>, </s>, <|end_of_text|>; -1 if none
  virtual int32_t bos_id() const = 0;    // -1 if none
  virtual std::string name() const = 0;  // "gpt2-bpe", "hf-bpe", "hf-unigram", "hf-wordpiece", "sentencepiece"
  // True when a text cut just after a newline that precedes a non-space character encodes, piece
  // by piece, to the ids of the whole (regex pre-tokenizers with at most a Unicode-form
  // normalizer: GPT-2, Llama-3, Qwen). False for SentencePiece-style tokenizers, whose
  // normalizer prepends "▁" to every text it is given: `ztrain tokenize` then encodes each
  // document in one piece.
  virtual bool splits_at_newlines() const = 0;
};

}  // namespace zt
