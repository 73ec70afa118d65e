// test_untrusted_text.cpp: issue 21 items 7 and 8, files someone else wrote. A chat template (from a
// downloaded tokenizer_config.json) and a tokenizer.json must, whatever they hold, give a result or
// exactly one zt::Error naming the file and the limit: never a signal (SIGFPE, stack overflow), never
// unbounded time or memory. Each case runs in process under a stated bound (Bounded below: seconds
// of wall time and growth of the peak resident set); the hostile inputs are generated here
// (chains tens of thousands long). Before the fixes each case crashed, hung or ran out of memory.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenize.h"
#include "text/chat_format.h"
#include "text/jinja.h"
#include "text/tokenizer.h"

namespace zt {
namespace untrusted_test {
namespace fs = std::filesystem;
using nlohmann::json;

// The bound every case here is held to: 20 s of wall time (generous for ASan on a shared machine;
// the cases take milliseconds in a release build) and 1 GiB more peak memory.
constexpr double kMaxSeconds = 20;
constexpr long kMaxGrowthKiB = 1L << 20;

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs f; returns the zt::Error's message ("" when it succeeded) after checking the bound and that
// the message is one line.
std::string bounded(const std::function<void()>& f) {
  const long rss0 = peak_rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    f();
  } catch (const Error& e) {
    what = e.what();
    EXPECT_FALSE(what.empty());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, kMaxSeconds) << what;
  EXPECT_LT(peak_rss_kib() - rss0, kMaxGrowthKiB) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_LT(what.size(), 2000u) << what.substr(0, 300);
  return what;
}

std::string render(const std::string& src, const jinja::Limits& limits = {}) {
  jinja::Template t(src, "hostile.jinja");
  return t.render(jinja::from_json(json::object()), nullptr, limits);
}

// The error a template gives (parse or render), which must name the template file.
std::string template_error(const std::string& src, const jinja::Limits& limits = {}) {
  std::string what = bounded([&] { render(src, limits); });
  EXPECT_NE(what.find("hostile.jinja"), std::string::npos) << "no error, or not naming the file: " << what;
  return what;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t k = 0; k < n; ++k) out += s;
  return out;
}

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// ---- Item 7: chat templates ----

TEST(UntrustedTemplate, Int64MinDividedByMinusOneIsAnErrorNotSigfpe) {
  const std::string min = "(-9223372036854775807 - 1)";
  EXPECT_TRUE(has(template_error("{{ " + min + " // -1 }}"), "integer overflow"));
  std::string out;
  bounded([&] { out = render("{{ " + min + " % -1 }} {{ " + min + " is divisibleby(-1) }} {{ 7 // -1 }} {{ -7 % 3 }}"); });
  EXPECT_EQ(out, "0 True -7 2");
}

TEST(UntrustedTemplate, IntegerOverflowIsOneErrorNeverAWrap) {
  const std::string max = "9223372036854775807", min = "(-9223372036854775807 - 1)";
  const std::vector<std::string> overflows = {max + " + 1", min + " - 1", max + " * 2", "2 ** 63", "-" + min,
                                             min + "|abs", "3 ** 100", "99999999999999999999", "1e300|int",
                                             "'1e300'|int"};
  for (const std::string& e : overflows)
    EXPECT_TRUE(has(template_error("{{ " + e + " }}"), "64 bits")) << e;
  std::string out;  // exact where the answer fits, as Python
  bounded([&] { out = render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 9223372036854775807 }} {{ " + max + " - 1 }}"); });
  EXPECT_EQ(out, "4611686018427387904 -9223372036854775808 1 9223372036854775806");
}

TEST(UntrustedTemplate, LongChainsAreRefusedNotAStackOverflow) {
  const size_t n = 50000;
  const std::string chains[] = {
      "{{ x" + repeat(".a", n) + " }}",      "{{ x" + repeat("[0]", n) + " }}",      "{{ x" + repeat("()", n) + " }}",
      "{{ " + repeat("not ", n) + "x }}",    "{{ " + repeat("- ", n) + "1 }}",       "{{ " + repeat("+", n) + "1 }}",
      "{{ 'a'" + repeat(" ~ 'a'", n) + " }}", "{{ 1" + repeat(" + 1", n) + " }}",     "{{ x" + repeat("|string", n) + " }}",
      "{{ x" + repeat(" is defined", n) + " }}", "{{ 1" + repeat(" if 1", n) + " }}", "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}",
      "{{ " + repeat("[", n) + repeat("]", n) + " }}", repeat("{% if 1 %}", n) + repeat("{% endif %}", n),
  };
  for (const std::string& t : chains) EXPECT_TRUE(has(template_error(t), "deeper than 256")) << t.substr(0, 40);
}

TEST(UntrustedTemplate, LongElifChainIsFlatAndRenders) {
  std::string t = "{% if x == -1 %}no";
  for (int k = 0; k < 50000; ++k) t += "{% elif x == " + std::to_string(k) + " %}" + std::to_string(k);
  t += "{% endif %}";
  std::string out;
  bounded([&] {
    jinja::Template tpl(t, "elif.jinja");
    out = tpl.render(jinja::from_json(json{{"x", 49999}}));
  });
  EXPECT_EQ(out, "49999");
}

TEST(UntrustedTemplate, SelfContainingValuesEndAtTheDepthLimit) {
  const std::string self = "{% set ns = namespace(a=1) %}{% set ns.self = ns %}";
  for (const char* e : {"ns|tojson", "[ns]|tojson"})
    EXPECT_TRUE(has(template_error(self + "{{ " + std::string(e) + " }}"), "nested deeper than")) << e;
  const std::string two = "{% set a = namespace(x=1) %}{% set a.me = a %}{% set b = namespace(x=1) %}{% set b.me = b %}";
  EXPECT_TRUE(has(template_error(two + "{{ a == b }}"), "nested deeper than"));
  // A list nested 100,000 deep, built in a loop: printing it is refused, and dropping it (at the end
  // of the render, or by assigning over it) must not recurse once per level.
  const std::string deep = "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  EXPECT_TRUE(has(template_error(deep + "{{ ns.x }}"), "nested deeper than"));
  EXPECT_TRUE(has(template_error(deep + "{{ ns.x|tojson }}"), "nested deeper than"));
  std::string out;
  EXPECT_EQ(bounded([&] { out = render(deep + "{% set ns.x = 0 %}done"); }), "");
  EXPECT_EQ(out, "done");
  EXPECT_EQ(bounded([&] { out = render(deep + "kept"); }), "");
  EXPECT_EQ(out, "kept");
}

TEST(UntrustedTemplate, RunawayWorkMeetsTheStepBudget) {
  const std::string cases[] = {
      // A doubly recursive macro: 2^40 calls, never deeper than 40.
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
      // Nested loops over ranges each within the list limit.
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
      // Sorting and comparing a long list again and again.
      "{% set l = range(100000)|list %}{% for i in range(100000) %}{{ (l|sort|unique|list)[0] }}{% endfor %}",
  };
  for (const std::string& t : cases) EXPECT_TRUE(has(template_error(t), "steps")) << t.substr(0, 60);
}

TEST(UntrustedTemplate, CollectionsAndStringsMeetTheirLimits) {
  const std::string cases[] = {
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
      "{{ 'x' * 1000000000000000 }}", "{{ ([1] * 1000000000000)|length }}", "{{ range(1000000000000)|length }}",
      "{{ 'ab'|replace('', 'x' * 20000000) }}", "{{ 'a\nb'|indent(1000000000000000) }}",
      "{% set l = [1] * 1000 %}{% for i in range(12) %}{% set l = l + l %}{% endfor %}{{ l|length }}",
      "{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}",  // 1 GB of output
      "{% set s = 'x' * 10000000 %}{{ [s, s, s, s]|tojson }}",
  };
  for (const std::string& t : cases) {
    const std::string e = template_error(t);
    EXPECT_TRUE(has(e, "limit") || has(e, "steps")) << t.substr(0, 60) << ": " << e;
  }
}

TEST(UntrustedTemplate, FailedAttributeChainMessageIsShortAndQuick) {
  // Naming the failed expression was exponential in the chain's length (2^250 string copies).
  const std::string e = template_error("{% set ns = namespace() %}{% set ns.attribute = ns %}{{ ns" +
                                       repeat(".attribute", 250) + ".missing() }}");
  EXPECT_TRUE(has(e, "'ns.attribute.attribute") && has(e, "is undefined")) << e;
  EXPECT_LT(e.size(), 400u) << e;
}

TEST(UntrustedTemplate, HugeStepsAndIndexesDoNotOverflow) {
  std::string out;
  bounded([&] {
    out = render("{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807 - 1] }} "
                 "{{ range(0, 9223372036854775807, 4611686018427387904)|list }} {{ range(5, -9223372036854775807, "
                 "-9223372036854775807)|list }}");
  });
  EXPECT_EQ(out, "b [3] [0, 4611686018427387904] [5, -9223372036854775802]");
}

TEST(UntrustedTemplate, StepBudgetIsAFlagThatIsHonoured) {
  // --chat_template_max_steps reaches the renderer through SftOptions::template_limits.
  ChatTemplateConfig cfg;
  cfg.source = "{% for m in messages %}{% for i in range(1000) %}{{ i }}{% endfor %}{% endfor %}";
  cfg.origin = "budget.jinja";
  const auto rec = nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  SftOptions small;
  small.template_limits.max_steps = 2000;
  const std::string e = bounded([&] { (void)ChatFormatter(cfg, small, "").format(rec); });
  EXPECT_TRUE(has(e, "budget.jinja") && has(e, "2000 steps") && has(e, "--chat_template_max_steps")) << e;
  EXPECT_EQ(bounded([&] { (void)ChatFormatter(cfg, SftOptions(), "").format(rec); }), "");
}

// ---- Item 8: tokenizer.json ----

fs::path scratch_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("zt_untrusted_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A tokenizer.json with a small WordPiece model and `extra` merged in; returns its path.
std::string tokenizer_file(const std::string& name, const json& extra) {
  json j = {{"model",
             {{"type", "WordPiece"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", "##"},
              {"max_input_chars_per_word", 100},
              {"vocab", {{"[UNK]", 0}, {"a", 1}, {"##a", 2}, {"b", 3}}}}},
            {"pre_tokenizer", {{"type", "WhitespaceSplit"}}}};
  j.update(extra);
  const fs::path p = scratch_dir(name) / "tokenizer.json";
  std::ofstream(p, std::ios::binary) << j.dump();
  return p.string();
}

// {"type": "Sequence", key: [{"type": "Sequence", key: [... leaf ...]}]} nested `depth` times, as text
// (nlohmann would recurse to build or print it).
std::string nested_sequence(const char* key, size_t depth, const std::string& leaf) {
  const std::string open = std::string("{\"type\": \"Sequence\", \"") + key + "\": [";
  return repeat(open, depth) + leaf + repeat("]}", depth);
}

TEST(UntrustedTokenizer, SequencesNested100kDeepAreRefused) {
  struct Part {
    const char *field, *key, *leaf;
  };
  const Part parts[] = {{"normalizer", "normalizers", R"({"type": "Lowercase"})"},
                        {"pre_tokenizer", "pretokenizers", R"({"type": "WhitespaceSplit"})"},
                        {"decoder", "decoders", R"({"type": "Fuse"})"},
                        {"post_processor", "processors", R"({"type": "ByteLevel"})"}};
  for (const Part& p : parts) {
    std::string path = tokenizer_file(p.field, json::object());
    std::string text;
    {
      std::ifstream f(path);
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    text.insert(text.size() - 1, std::string(", \"") + p.field + "\": " + nested_sequence(p.key, 100000, p.leaf));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    const std::string e = bounded([&] { Tokenizer::load(path); });
    EXPECT_TRUE(has(e, "tokenizer.json") && has(e, "nested deeper than 128")) << p.field << ": " << e;
    // 30 Sequences deep (90 JSON levels) is within the limit, and within Hugging Face's.
    json ok = json::parse(nested_sequence(p.key, 30, p.leaf));
    EXPECT_EQ(bounded([&] { Tokenizer::load(tokenizer_file(p.field, {{p.field, ok}})); }), "") << p.field;
  }
  // Deep JSON anywhere else is the same class.
  const std::string path = tokenizer_file("deep_elsewhere", json::object());
  std::string text;
  {
    std::ifstream f(path);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  text.insert(text.size() - 1, ", \"added_tokens\": " + repeat("[", 1000000) + repeat("]", 1000000));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  EXPECT_TRUE(has(bounded([&] { Tokenizer::load(path); }), "nested deeper than 128"));
}

json replace_step(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

TEST(UntrustedTokenizer, DoublingReplaceChainsAreBounded) {
  json doubling = json::array();
  for (int k = 0; k < 64; ++k) doubling.push_back(replace_step("a", "aa"));
  const std::string path = tokenizer_file("doubling", {{"normalizer", {{"type", "Sequence"}, {"normalizers", doubling}}}});
  std::unique_ptr<Tokenizer> t;
  EXPECT_EQ(bounded([&] { t = Tokenizer::load(path); }), "");
  ASSERT_TRUE(t);
  const std::string e = bounded([&] { t->encode(repeat("a", 1000)); });
  EXPECT_TRUE(has(e, path.c_str()) && has(e, "normalizer") && has(e, "limit")) << e;
  // A regex Replace matching the empty string inserts at every position: the same bound.
  json regex = json::array();
  for (int k = 0; k < 64; ++k)
    regex.push_back({{"type", "Replace"}, {"pattern", {{"Regex", "x*"}}}, {"content", "yy"}});
  const std::string rpath = tokenizer_file("regex", {{"normalizer", {{"type", "Sequence"}, {"normalizers", regex}}}});
  EXPECT_TRUE(has(bounded([&] { Tokenizer::load(rpath)->encode("bbbb"); }), "normalizer"));
  // A real normalizer (Llama 2's) is far inside the limit, on text of every size.
  json llama = {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace_step(" ", "\u2581")}}};
  auto real = Tokenizer::load(tokenizer_file("llama", {{"normalizer", llama}}));
  EXPECT_EQ(bounded([&] { real->encode(""); real->encode(" "); real->encode(repeat(" ", 100000)); }), "");
}

TEST(UntrustedTokenizer, DoublingPreTokenizerAndDecoderChainsAreBounded) {
  json metaspace = json::array();
  for (int k = 0; k < 64; ++k) metaspace.push_back({{"type", "Metaspace"}, {"replacement", "  "}, {"split", false}});
  auto t = Tokenizer::load(tokenizer_file("metaspace", {{"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", metaspace}}}}));
  EXPECT_TRUE(has(bounded([&] { t->encode("a b c"); }), "pre-tokenizer"));

  json replaces = json::array();
  for (int k = 0; k < 64; ++k) replaces.push_back(replace_step("a", "aa"));
  auto d = Tokenizer::load(tokenizer_file("decoder", {{"decoder", {{"type", "Sequence"}, {"decoders", replaces}}}}));
  EXPECT_TRUE(has(bounded([&] { d->decode({1, 1, 1}); }), "decoder"));
  // A Strip decoder with empty content and a huge count strips nothing (it looped start times).
  json strip = {{"type", "Strip"}, {"content", ""}, {"start", 1000000000000000000ull}, {"stop", 0}};
  auto s = Tokenizer::load(tokenizer_file("strip", {{"decoder", strip}}));
  std::string out;
  EXPECT_EQ(bounded([&] { out = s->decode({1, 3}); }), "");
  EXPECT_EQ(out, "ab");
}

TEST(UntrustedTokenizer, ExpansionErrorIsOneErrorFromTokenize) {
  // `ztrain tokenize` encodes in an OpenMP loop, which an exception must not leave (std::terminate).
  json doubling = json::array();
  for (int k = 0; k < 64; ++k) doubling.push_back(replace_step("a", "aa"));
  auto t = Tokenizer::load(tokenizer_file("tokenize", {{"normalizer", {{"type", "Sequence"}, {"normalizers", doubling}}}}));
  const fs::path dir = scratch_dir("tokenize_out");
  std::ofstream(dir / "in.txt") << "a a a\nb\n";
  TokenizeConfig cfg;
  cfg.inputs = {(dir / "in.txt").string()};
  cfg.output_dir = (dir / "out").string();
  EXPECT_TRUE(has(bounded([&] { tokenize_corpus(*t, cfg); }), "normalizer"));
}

TEST(UntrustedTokenizer, WordPieceWithoutMaxInputCharsUsesTheDefault100) {
  json j = json::parse(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
      "vocab": {"[UNK]": 0, "a": 1, "##a": 2}}, "pre_tokenizer": {"type": "WhitespaceSplit"}})");
  const fs::path p = scratch_dir("wordpiece") / "tokenizer.json";
  std::ofstream(p) << j.dump();
  std::unique_ptr<Tokenizer> t;
  EXPECT_EQ(bounded([&] { t = Tokenizer::load(p.string()); }), "");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode(repeat("a", 100)).size(), 100u);               // 100 characters: a word
  EXPECT_EQ(t->encode(repeat("a", 101)), std::vector<int32_t>{0});  // 101: [UNK], as Hugging Face
  j["model"]["max_input_chars_per_word"] = -1;
  std::ofstream(p, std::ios::trunc) << j.dump();
  EXPECT_TRUE(has(bounded([&] { Tokenizer::load(p.string()); }), "max_input_chars_per_word"));
}

// Found by fuzz_tokenizer_pipeline: a post-processor's special-token ids are emitted as written, so
// an id past the vocabulary reached the caller (and from there an embedding table). Refused at load.
TEST(UntrustedTokenizer, PostProcessorIdsOutsideTheVocabAreRefused) {
  json j = json::parse(R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
      "vocab": {"[UNK]": 0, "a": 1, "##a": 2, "<s>": 3, "</s>": 4}}, "pre_tokenizer": {"type": "WhitespaceSplit"},
      "post_processor": {"type": "BertProcessing", "cls": ["<s>", 3], "sep": ["</s>", 9]}})");
  const fs::path p = scratch_dir("post_ids") / "tokenizer.json";
  std::ofstream(p) << j.dump();
  const std::string err = bounded([&] { Tokenizer::load(p.string()); });
  EXPECT_TRUE(has(err, "post_processor") && has(err, "token id 9") && has(err, p.string().c_str())) << err;
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
      {"Sequence": {"id": "A"}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [-2], "tokens": ["<s>"]}}})");
  std::ofstream(p, std::ios::trunc) << j.dump();
  EXPECT_FALSE(bounded([&] { Tokenizer::load(p.string()); }).empty());
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = json::array({3});
  std::ofstream(p, std::ios::trunc) << j.dump();
  std::unique_ptr<Tokenizer> t;
  EXPECT_EQ(bounded([&] { t = Tokenizer::load(p.string()); }), "");  // in range: loads and encodes
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode_with_special("a", true), (std::vector<int32_t>{3, 1}));
}

}  // namespace untrusted_test
}  // namespace zt
