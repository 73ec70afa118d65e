// test_sft.cpp: SFT data from JSONL: record shapes and loss spans, bad lines named with their
// line number (and no cache left behind), the tokenized cache, rows with and without packing,
// and the proof that prompt tokens contribute exactly zero gradient.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/content_hash.h"
#include "core/error.h"
#include "data/sft_data.h"
#include "kernels/cross_entropy.h"
#include "models/transformer.h"
#include "text/chat_format.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

// Byte-level test tokenizer: id = byte, and "<eos>" as id 256 when special tokens are read.
class ByteTokenizer final : public Tokenizer {
 public:
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view t, EncodeOptions opt) const override {
    if (opt.split_special_tokens) return {t.begin(), t.end()};
    std::vector<int32_t> ids;
    for (size_t k = 0; k < t.size();) {
      if (t.compare(k, 5, "<eos>") == 0) {
        ids.push_back(256);
        k += 5;
      } else {
        ids.push_back(static_cast<unsigned char>(t[k++]));
      }
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t i : ids) s += i == 256 ? std::string("<eos>") : std::string(1, char(i));
    return s;
  }
  int vocab_size() const override { return 257; }
  int32_t eos_id() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  std::string name() const override { return "bytes"; }
  bool splits_at_newlines() const override { return true; }
};

const char* kChatML =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

struct Tmp {
  fs::path dir = fs::temp_directory_path() / ("zt_sft_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Tmp() {
    fs::remove_all(dir);
    fs::create_directories(dir / "cache");
  }
  ~Tmp() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

std::string joined(const SftText& t, bool trained) {
  std::string s;
  for (auto& p : t.pieces)
    if (p.trained == trained) s += p.text;
  return s;
}

ChatTemplateConfig chatml() {
  ChatTemplateConfig c;
  c.source = kChatML;
  c.origin = "chatml";
  c.eos_token = "<eos>";
  c.has_eos = true;
  return c;
}

TEST(SftFormat, RecordShapesAndLossSpans) {
  SftOptions opt;
  ChatFormatter plain(ChatTemplateConfig(), opt, "<eos>");
  auto pc = plain.format(nlohmann::ordered_json::parse(R"({"prompt": "2+2=", "completion": "4"})"));
  EXPECT_EQ(joined(pc, false), "2+2=");
  EXPECT_EQ(joined(pc, true), "4<eos>");  // TRL appends EOS to plain completions
  auto alpaca =
      plain.format(nlohmann::ordered_json::parse(R"({"instruction": "Add.", "input": "2+2", "output": "4"})"));
  EXPECT_NE(joined(alpaca, false).find("### Instruction:\nAdd.\n\n### Input:\n2+2\n\n### Response:\n"),
            std::string::npos);
  EXPECT_EQ(joined(alpaca, true), "4<eos>");

  ChatFormatter chat(chatml(), opt, "<eos>");
  auto conv = chat.format(nlohmann::ordered_json::parse(
      R"({"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "yo"}]})"));
  EXPECT_EQ(joined(conv, false), "<|user|>hi<eos><|assistant|>");
  EXPECT_EQ(joined(conv, true), "yo<eos>");
  auto alp = chat.format(nlohmann::ordered_json::parse(R"({"instruction": "Say hi", "output": "hi"})"));
  EXPECT_EQ(joined(alp, false), "<|user|>Say hi<eos><|assistant|>");

  const auto msgs = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                       {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]})");
  EXPECT_EQ(joined(chat.format(msgs), true), "<|user|>a<eos><|assistant|>b<eos><|user|>c<eos><|assistant|>d<eos>");
  opt.assistant_only_loss = true;
  ChatFormatter asst(chatml(), opt, "<eos>");
  EXPECT_EQ(joined(asst.format(msgs), true), "b<eos>d<eos>");  // incremental rendering
  ChatTemplateConfig gen = chatml();
  gen.source =
      "{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<eos>"
      "{% endgeneration %}{% else %}{{ m.content }}<eos>{% endif %}{% endfor %}";
  EXPECT_EQ(joined(ChatFormatter(gen, opt, "<eos>").format(msgs), true), "b<eos>d<eos>");  // {% generation %}

  // A template that rewrites earlier assistant turns cannot be split turn by turn: refused.
  ChatTemplateConfig rewrite = chatml();
  rewrite.source = "{% for m in messages %}{{ m.content if loop.last else '*' }}{% endfor %}";
  try {
    ChatFormatter(rewrite, opt, "<eos>").format(msgs);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1] (assistant)"), std::string::npos) << e.what();
  }
}

TEST(SftData, BadLinesAreNamedAndLeaveNothing) {
  Tmp t;
  ByteTokenizer tok;
  SftOptions opt;
  ChatFormatter fmt(chatml(), opt, "<eos>");
  auto error_of = [&](const std::string& text) {
    const std::string f = t.write("d.jsonl", text);
    try {
      sft_tokenize({f, "--train_file", f, (t.dir / "cache").string()}, tok, fmt, chatml(), opt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string good = R"({"prompt": "a", "completion": "b"})";
  std::string e = error_of(good + "\n\n" + good + "\n{\"prompt\": \"a\", \"completion\": \n");
  EXPECT_NE(e.find("--train_file " + (t.dir / "d.jsonl").string() + " line 4: not valid JSON"), std::string::npos) << e;
  e = error_of(good + "\n" + R"({"text": "x", "label": 1})" + "\n");
  EXPECT_NE(e.find("line 2: the record has none of the fields \"messages\", \"prompt\" + \"completion\", or "
                   "\"instruction\" + \"output\" (its keys: \"text\", \"label\")"),
            std::string::npos)
      << e;
  e = error_of(R"({"messages": [{"content": "no role"}]})");
  EXPECT_NE(e.find("line 1: \"messages\"[0] is not an object with a string \"role\""), std::string::npos) << e;
  e = error_of(R"({"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]})");
  EXPECT_NE(e.find("line 1: \"prompt\" and \"completion\" must both be strings or both be lists"), std::string::npos)
      << e;
  EXPECT_TRUE(fs::is_empty(t.dir / "cache"));  // nothing half-written
}

TEST(SftData, CacheMakesTheSecondRunReadInsteadOfTokenize) {
  Tmp t;
  ByteTokenizer tok;
  SftOptions opt;
  ChatFormatter fmt(chatml(), opt, "<eos>");
  std::string text;
  for (int k = 0; k < 50; ++k)
    text += R"({"messages": [{"role": "user", "content": "q)" + std::to_string(k) +
            R"("}, {"role": "assistant", "content": "a"}]})" + "\n";
  const std::string f = t.write("c.jsonl", text);
  const SftSource src{f, "--train_file", f, (t.dir / "cache").string()};
  const SftTokens a = sft_tokenize(src, tok, fmt, chatml(), opt);
  const SftTokens b = sft_tokenize(src, tok, fmt, chatml(), opt);
  EXPECT_FALSE(a.from_cache);
  EXPECT_TRUE(b.from_cache);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.trained, b.trained);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.examples(), 50);
  opt.assistant_only_loss = true;  // another setting: another cache file
  ChatFormatter fmt2(chatml(), opt, "<eos>");
  EXPECT_FALSE(sft_tokenize(src, tok, fmt2, chatml(), opt).from_cache);
  t.write("c.jsonl", text + text);  // changed data: tokenized again
  EXPECT_FALSE(sft_tokenize(src, tok, fmt, chatml(), opt).from_cache);
}

// Issue 21 item 1: the cache was trusted on read (no checksum, only max id < vocab), so a byte
// flipped or planted in it reached the kernels (id -1 wrote before the embedding table). Now a
// cache whose header, key, checksum, structure or id range fails is rebuilt, with a note.
TEST(SftData, CacheIsCheckedAndRebuiltWhenItDisagrees) {
  Tmp t;
  ByteTokenizer tok;
  SftOptions opt;
  ChatFormatter fmt(chatml(), opt, "<eos>");
  std::string text;
  for (int k = 0; k < 40; ++k)
    text += R"({"messages": [{"role": "user", "content": "q)" + std::to_string(k) +
            R"("}, {"role": "assistant", "content": "answer"}]})" + "\n";
  const std::string f = t.write("c.jsonl", text);
  const SftSource src{f, "--train_file", f, (t.dir / "cache").string()};
  const SftTokens a = sft_tokenize(src, tok, fmt, chatml(), opt);
  ASSERT_FALSE(a.from_cache);
  const std::string cache = a.cache_path;
  std::string good;
  {
    std::ifstream in(cache, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write_cache = [&](const std::string& bytes) { std::ofstream(cache, std::ios::binary) << bytes; };
  auto expect_rebuilt = [&](const std::string& what) {
    const SftTokens b = sft_tokenize(src, tok, fmt, chatml(), opt);
    EXPECT_FALSE(b.from_cache) << what;
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_EQ(a.trained, b.trained) << what;
    EXPECT_EQ(a.offsets, b.offsets) << what;
    EXPECT_TRUE(sft_tokenize(src, tok, fmt, chatml(), opt).from_cache) << what;  // the rebuilt one is good
  };
  // A flipped bit anywhere: magic, counts, key, checksum, id bound, header checksum, tokens,
  // trained flags, offsets, the last byte.
  const size_t n_tok = a.tokens.size();
  for (size_t pos : {size_t(3), size_t(9), size_t(17), size_t(25), size_t(33), size_t(41), size_t(60), size_t(64),
                     size_t(64 + 4 * n_tok / 2), size_t(64 + 4 * n_tok + 5), size_t(64 + 5 * n_tok + 8),
                     good.size() - 1}) {
    std::string bad = good;
    bad[pos] ^= 0x10;
    write_cache(bad);
    expect_rebuilt("flip at byte " + std::to_string(pos));
  }
  write_cache(good.substr(0, good.size() - 8));  // truncated
  expect_rebuilt("truncated");
  // Another input's cache under this one's name: the key in the header differs.
  const std::string g = t.write("g.jsonl", R"({"prompt": "x", "completion": "y"})" "\n");
  const SftTokens other = sft_tokenize({g, "--train_file", g, (t.dir / "cache").string()}, tok, fmt, chatml(), opt);
  fs::copy_file(other.cache_path, cache, fs::copy_options::overwrite_existing);
  expect_rebuilt("another input's cache");
  // A crafted cache whose checksums are right but which holds id -1 and 257 (>= the tokenizer's
  // vocabulary): the checksum is no signature, so the ids themselves are checked.
  for (int32_t id : {-1, 257, INT32_MIN}) {
    std::string bad = good;
    std::memcpy(bad.data() + 64 + 4 * 3, &id, 4);
    const uint64_t sum = content_hash(bad.data() + 64, bad.size() - 64);
    std::memcpy(bad.data() + 32, &sum, 8);
    const uint64_t self = content_hash(bad.data(), 56);
    std::memcpy(bad.data() + 56, &self, 8);
    write_cache(bad);
    expect_rebuilt("id " + std::to_string(id));
  }
}

SftTokens hand_made(const std::vector<std::pair<int, int>>& prompt_completion_lengths) {
  SftTokens d;
  d.offsets.push_back(0);
  int32_t id = 1;
  for (auto [p, c] : prompt_completion_lengths) {
    for (int k = 0; k < p + c; ++k) {
      d.tokens.push_back(id++ % 250 + 1);
      d.trained.push_back(k >= p);
    }
    d.offsets.push_back(int64_t(d.tokens.size()));
  }
  return d;
}

TEST(SftData, RowsPackWholeExamplesAndRestartPositions) {
  const SftTokens d = hand_made({{3, 2}, {2, 2}, {4, 5}, {1, 1}});  // 4, 3, 8, 1 (input, target) pairs
  const int T = 8;
  SftRows one(d, T, /*packing=*/false, /*shuffle=*/false, 0);
  EXPECT_EQ(one.num_sequences(), 4);
  std::vector<int32_t> in(T), tg(T);
  one.fill(in.data(), tg.data(), nullptr, 0, 1);
  EXPECT_EQ(std::vector<int32_t>(tg.begin(), tg.begin() + 5),
            (std::vector<int32_t>{-100, -100, d.tokens[3], d.tokens[4], -100}));  // prompt, completion, padding
  EXPECT_EQ(one.total_targets(), 2 + 2 + 5 + 1);

  SftRows packed(d, T, /*packing=*/true, false, 0);
  EXPECT_EQ(packed.num_sequences(), 2);  // [8] and [4 + 3 + 1]
  std::vector<int32_t> pos(2 * T);
  in.resize(2 * T);
  tg.resize(2 * T);
  packed.fill(in.data(), tg.data(), pos.data(), 0, 2);
  EXPECT_EQ(std::vector<int32_t>(pos.begin() + T, pos.end()), (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(in[T + 4], d.tokens[5]);  // the second example starts at its first token
  EXPECT_EQ(packed.count_targets(0, 2), packed.total_targets());
}

// Prompt tokens contribute exactly zero gradient: (1) every prompt position's target is ignored,
// (2) the gradient of the loader's batch equals, bit for bit, that of a batch the test builds
// from the raw token stream with the prompt positions masked by its own reckoning, and
// (3) ignored targets add exactly nothing: a batch whose targets are all ignored has a zero
// gradient in every parameter.
TEST(SftData, PromptTokensContributeExactlyZeroGradient) {
  Tmp t;
  ByteTokenizer tok;
  SftOptions opt;  // completion_only_loss = true
  ChatFormatter fmt(ChatTemplateConfig(), opt, "<eos>");
  const std::vector<std::pair<std::string, std::string>> recs = {
      {"The capital of France is", " Paris."}, {"2+2=", "4"}, {"Say hi:", " hi there"}};
  std::string text;
  for (auto& [p, c] : recs) text += nlohmann::ordered_json{{"prompt", p}, {"completion", c}}.dump() + "\n";
  const std::string f = t.write("z.jsonl", text);
  const SftTokens d =
      sft_tokenize({f, "--train_file", f, (t.dir / "cache").string()}, tok, fmt, ChatTemplateConfig(), opt);
  const int T = 40, B = 3;
  SftRows rows(d, T, false, false, 0);
  std::vector<int32_t> in(B * T), tg(B * T);
  rows.fill(in.data(), tg.data(), nullptr, 0, B);

  std::vector<int32_t> ref_tg(B * T, kernels::kIgnoreIndex);
  for (int b = 0; b < B; ++b) {
    const std::string all = recs[b].first + recs[b].second;
    const int prompt_len = int(recs[b].first.size());  // bytes = tokens for this tokenizer
    for (int j = 0; j + 1 < int(all.size()) + 1 && j < T; ++j) {
      const int next = j + 1;  // target of input j is token j + 1 (the EOS after the text)
      const int32_t id = next < int(all.size()) ? static_cast<unsigned char>(all[next]) : 256;
      if (next <= int(all.size())) ref_tg[b * T + j] = next >= prompt_len ? id : kernels::kIgnoreIndex;
      if (next < prompt_len) {
        EXPECT_EQ(tg[b * T + j], kernels::kIgnoreIndex) << "row " << b << " position " << j;
      }
    }
  }
  EXPECT_EQ(tg, ref_tg);

  ModelConfig cfg = config_from_json({{"model_type", "llama"},
                                      {"vocab_size", 257},
                                      {"hidden_size", 32},
                                      {"intermediate_size", 40},
                                      {"num_hidden_layers", 2},
                                      {"num_attention_heads", 4},
                                      {"num_key_value_heads", 2},
                                      {"max_position_embeddings", 64}},
                                     "test");
  Transformer m(cfg);
  m.init_random(7);
  m.plan(B, T, true);
  auto grads_of = [&](const std::vector<int32_t>& targets) {
    m.zero_grad();
    int64_t c = 0;
    m.forward_backward(in.data(), targets.data(), 1.0f, &c);
    const TensorView g = m.flat_grads();
    const float* p = static_cast<const float*>(g.data);
    return std::vector<float>(p, p + g.numel());
  };
  const std::vector<float> g_loader = grads_of(tg), g_ref = grads_of(ref_tg);
  ASSERT_EQ(g_loader.size(), g_ref.size());
  EXPECT_EQ(0, std::memcmp(g_loader.data(), g_ref.data(), g_ref.size() * 4));
  const std::vector<float> g_none = grads_of(std::vector<int32_t>(B * T, kernels::kIgnoreIndex));
  size_t nonzero = 0;
  for (float x : g_none) nonzero += x != 0.0f;
  EXPECT_EQ(nonzero, 0u);
  double norm = 0;
  for (float x : g_loader) norm += double(x) * x;
  EXPECT_GT(norm, 0);  // the completion tokens do train
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// Loss spans cut the rendered text into pieces that are tokenized one by one; with the real
// Llama 3 tokenizer and the real templates, that gives the ids of the whole text (the cuts fall
// where the pre-tokenizer splits anyway: at special tokens and turn boundaries).
TEST(SftData, PiecewiseTokenizationEqualsWholeWithRealTemplates) {
  const char* dir = std::getenv("ZT_CHAT_FIXTURES");
  if (!dir) GTEST_SKIP() << "ZT_CHAT_FIXTURES not set (run tests/chat/prepare.sh DIR first)";
  const std::string tok_dir = std::string(dir) + "/tokenizers/llama3_1";
  const std::unique_ptr<Tokenizer> tok = Tokenizer::load(tok_dir);
  const auto convs = nlohmann::ordered_json::parse(R"([
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"},
                  {"role": "assistant", "content": " Hello. How can I help?\n"}, {"role": "user", "content": "2+2"},
                  {"role": "assistant", "content": "4 (четыре, 四)."}]},
    {"prompt": [{"role": "user", "content": "Name a colour."}], "completion": [{"role": "assistant", "content": "Blue"}]},
    {"instruction": "Translate to French.", "input": "cat", "output": "chat"}])");
  int checked = 0, refused = 0;
  for (const char* name : {"llama3", "llama3_1", "qwen3", "gemma3"}) {
    const ChatTemplateConfig tpl = chat_template_load(std::string(dir) + "/tokenizers/" + name, "");
    ASSERT_FALSE(tpl.source.empty()) << name;
    SftOptions opt;
    opt.assistant_only_loss = true;
    ChatFormatter fmt(tpl, opt, "<|eot_id|>");
    for (const auto& rec : convs) {
      SftText t;
      try {
        t = fmt.format(rec);
      } catch (const Error& e) {
        // Llama 3 as lenml ships it appends the generation prompt unconditionally, and Qwen3 drops
        // earlier turns' reasoning: multi-turn assistant_only_loss is refused for them (by design).
        EXPECT_TRUE(rec.contains("messages") && (std::string(name) == "llama3" || std::string(name) == "qwen3"))
            << name << ": " << e.what();
        ++refused;
        continue;
      }
      std::string whole;
      std::vector<int32_t> pieces;
      for (const auto& p : t.pieces) {
        whole += p.text;
        const auto ids = tok->encode_with_special(p.text);
        pieces.insert(pieces.end(), ids.begin(), ids.end());
      }
      EXPECT_EQ(pieces, tok->encode_with_special(whole)) << name << ": " << rec.dump();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 10);
  EXPECT_EQ(refused, 2);
}

}  // namespace
}  // namespace zt
