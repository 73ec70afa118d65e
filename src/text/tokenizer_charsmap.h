// tokenizer_charsmap.h: the Precompiled normalizer of tokenizer.json (T5, ALBERT, XLM-R-style
// files converted from SentencePiece): `precompiled_charsmap` is base64 of SentencePiece's
// compiled character map, a little-endian uint32 byte length, a Darts double-array trie of that
// many bytes (uint32 units) over the UTF-8 of the source strings, then a blob of NUL-terminated
// replacement strings the trie's values index into. Applied as Hugging Face's Precompiled does
// (tokenizers' normalizers/precompiled.rs): each grapheme cluster under 6 bytes is looked up
// whole, else each of its characters; a lookup takes the SHORTEST entry that prefixes the
// chunk. The file is untrusted: every trie step and blob offset is bounds-checked, and the output
// is bounded like every normalizer's. Internal to src/text.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt::tok {

class CharsMap {
 public:
  // From the decoded bytes; throws zt::Error (the message says what is wrong, without a file name:
  // the caller adds it) when the header, trie or blob is malformed.
  static std::shared_ptr<const CharsMap> parse(std::string_view bytes);
  // Replaces s by its normalized form. Returns false (s unchanged) when the output would pass
  // `limit` bytes.
  bool apply(std::string& s, size_t limit) const;
  // The replacement for the shortest entry prefixing `chunk`, or nullptr (then *len is unset).
  const char* lookup(std::string_view chunk, size_t* len) const;

 private:
  std::vector<uint32_t> units_;
  std::string blob_;
};

// Standard base64 (RFC 4648, padding optional, no whitespace); false on any other character.
bool base64_decode(std::string_view in, std::string& out);

}  // namespace zt::tok
