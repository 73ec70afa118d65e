// fuzz_sft_cache.cpp: libFuzzer target for the tokenized SFT cache reader (src/data/sft_data.cpp,
// issue 21 item 1: a cache in a shared --cache_dir is written by someone else). It goes through
// the public sft_tokenize only, so it follows the cache format wherever that goes: a tiny JSONL
// file is tokenized once (the cache is made), then each input replaces the cache file and
// sft_tokenize runs again. Input byte 0 even: the rest are patches of the valid cache, 3 bytes
// each (offset low, offset high, xor mask), and byte 1 bit 0 set truncates it at byte 2's
// offset; odd: the rest is the whole file. Whatever the file holds, the result must be what the
// reader would give any tokens (every id in [0, vocab_size), offsets from 0 rising to the token
// count, one trained flag per token) or one zt::Error line; a damaged cache read back unchanged
// is a finding too (the cache is checksummed).
#include <nlohmann/json.hpp>

#include "data/sft_data.h"
#include "fuzz_util.h"
#include "tiny_tokenizers.h"

namespace {

struct Fixture {
  std::unique_ptr<zt::Tokenizer> tok;
  zt::ChatTemplateConfig tpl;
  zt::SftOptions opt;
  std::unique_ptr<zt::ChatFormatter> fmt;
  zt::SftSource src;
  std::string cache_path, valid;
  zt::SftTokens reference;

  Fixture() {
    namespace fs = std::filesystem;
    const fs::path dir = zt::fuzz::scratch_dir() / "sft_cache";
    fs::create_directories(dir);
    src.tokenizer_path = zt::fuzz::write_tiny_gpt2();
    tok = zt::Tokenizer::load(src.tokenizer_path);
    fmt = std::make_unique<zt::ChatFormatter>(tpl, opt, "<|endoftext|>");
    src.jsonl = (dir / "train.jsonl").string();
    src.flag = "--train_file";
    src.cache_dir = (dir / "cache").string();
    zt::fuzz::write_file(src.jsonl,
                         "{\"prompt\": \"hello\", \"completion\": \" world\"}\n"
                         "{\"prompt\": \"the\", \"completion\": \" thing in here\"}\n"
                         "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
    reference = zt::sft_tokenize(src, *tok, *fmt, tpl, opt);
    cache_path = reference.cache_path;
    std::ifstream f(cache_path, std::ios::binary);
    valid.assign(std::istreambuf_iterator<char>(f), {});
    if (valid.empty()) zt::fuzz::finding("no cache file was written (harness problem)");
  }
};

void check(const zt::SftTokens& t, int vocab) {
  if (t.offsets.empty() || t.offsets.front() != 0 || uint64_t(t.offsets.back()) != t.tokens.size())
    zt::fuzz::finding("cache read back with offsets that do not span the tokens");
  for (size_t e = 0; e + 1 < t.offsets.size(); ++e)
    if (t.offsets[e] > t.offsets[e + 1]) zt::fuzz::finding("cache read back with decreasing offsets");
  if (t.trained.size() != t.tokens.size()) zt::fuzz::finding("cache read back with a trained flag count != tokens");
  for (int32_t id : t.tokens)
    if (id < 0 || id >= vocab) zt::fuzz::finding("cache read back with an id outside [0, vocab_size)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  if (size == 0) return 0;
  std::string file;
  if (data[0] & 1) {
    file.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    file = fx.valid;
    for (size_t k = 1; k + 2 < size; k += 3) {
      const size_t at = (size_t(data[k]) | size_t(data[k + 1]) << 8) % file.size();
      file[at] = char(file[at] ^ (data[k + 2] ? data[k + 2] : 1));
    }
    if (size > 2 && (data[1] & 1)) file.resize(size_t(data[2]) * file.size() / 256);
  }
  zt::fuzz::write_file(fx.cache_path, file);
  zt::fuzz::expect_ok_or_error([&] {
    const zt::SftTokens t = zt::sft_tokenize(fx.src, *fx.tok, *fx.fmt, fx.tpl, fx.opt);
    check(t, fx.tok->vocab_size());
    if (t.from_cache && file != fx.valid &&
        (t.tokens != fx.reference.tokens || t.trained != fx.reference.trained || t.offsets != fx.reference.offsets))
      zt::fuzz::finding("a damaged cache was read back as different data (no checksum caught it)");
  });
  return 0;
}
