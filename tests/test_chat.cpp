// test_chat.cpp: the Jinja engine against npm @huggingface/jinja on real chat templates
// (fixtures from tests/chat/prepare.sh, under ZT_CHAT_FIXTURES), plus the engine's own
// semantics and its errors for unsupported constructs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "text/jinja.h"

using namespace zt;
using jinja::Template;
using jinja::Value;

namespace {

std::string render(const std::string& src, const nlohmann::json& ctx = nlohmann::json::object()) {
  Template t(src, "test");
  return t.render(jinja::from_json(ctx));
}

std::string error_of(const std::string& src, const nlohmann::json& ctx = nlohmann::json::object()) {
  try {
    render(src, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// strftime_now fixed to 2025-03-15 as in tests/chat/oracle.js.
Value fixed_strftime() {
  return Value::function([](jinja::CallArgs& a) {
    std::string out, f = a.pos.at(0).s;
    for (size_t k = 0; k < f.size(); ++k) {
      if (f[k] != '%' || k + 1 == f.size()) {
        out += f[k];
        continue;
      }
      const char c = f[++k];
      out += c == 'Y' ? "2025" : c == 'm' ? "03" : c == 'd' ? "15" : c == 'b' ? "Mar" : c == 'B' ? "March" : "%";
    }
    return Value::string(out);
  });
}

}  // namespace

TEST(ChatTemplateParity, RealTemplatesMatchHuggingFaceJinja) {
  const char* dir = std::getenv("ZT_CHAT_FIXTURES");
  if (!dir) GTEST_SKIP() << "ZT_CHAT_FIXTURES not set (run tests/chat/prepare.sh DIR first)";
  std::ifstream in(std::string(dir) + "/cases.json");
  ASSERT_TRUE(in) << "no cases.json in " << dir;
  const nlohmann::ordered_json fx = nlohmann::ordered_json::parse(in);
  std::map<std::string, std::unique_ptr<Template>> templates;
  for (auto& t : fx["templates"])
    templates[t["name"]] = std::make_unique<Template>(t["source"].get<std::string>(), t["name"].get<std::string>());
  int renders = 0, raises = 0;
  std::map<std::string, int> per_template;
  for (auto& c : fx["cases"]) {
    const std::string name = c["template"];
    Value ctx = jinja::from_json(c["context"]);
    ctx.o->set("strftime_now", fixed_strftime());
    std::string got, err;
    try {
      got = templates.at(name)->render(ctx);
    } catch (const Error& e) {
      err = e.what();
    }
    if (!c["error"].is_null()) {
      EXPECT_NE(err, "") << name << ": the reference raised " << c["error"] << " but ztrain rendered " << quote(got)
                         << "\ncontext: " << c["context"].dump();
      ++raises;
      continue;
    }
    const std::string want = c["output"];
    size_t at = 0;
    while (at < want.size() && at < got.size() && want[at] == got[at]) ++at;
    EXPECT_EQ(got, want) << name << ": first difference at byte " << at << ": reference " << quote(want.substr(at, 60))
                         << " vs ztrain " << quote(got.substr(at, 60)) << " error " << err
                         << "\ncontext: " << c["context"].dump();
    ++renders;
    ++per_template[name];
  }
  std::printf("chat templates: %zu, renders compared byte for byte: %d, raising cases: %d\n", templates.size(), renders,
              raises);
  EXPECT_GE(templates.size(), 12u);
}

TEST(ChatTemplate, Semantics) {
  EXPECT_EQ(render("{% for x in [3, 1, 2] | sort %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"), "1,2,3");
  EXPECT_EQ(render("{{ 'a b  c'.split() | length }} {{ 'x,y'.split(',') }}"), "3 ['x', 'y']");
  EXPECT_EQ(render("{{ '\\n\\nhi\\n '.strip('\\n') }}|{{ '  hi '.lstrip() }}|"), "hi\n |hi |");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1.0 }} {{ 2 ** 10 }} {{ 1 / 4 }}"),
            "3 -4 1 1.0 1024 0.25");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 1.5} }}"),
            "None True [1, 'a', None] {'k': 1.5}");
  EXPECT_EQ(render("{{ {'b': [1, 2], 'a': 'é\"'} | tojson }}"), "{\"b\": [1, 2], \"a\": \"é\\\"\"}");
  EXPECT_EQ(render("{{ {'b': [1], 'a': {}} | tojson(indent=2) }}"), "{\n  \"b\": [\n    1\n  ],\n  \"a\": {}\n}");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
      "6");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loop scope
  EXPECT_EQ(render("{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}"), "<1B><23>");
  EXPECT_EQ(
      render("{% for k, v in d | items if k != 'x' %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"x", 1}, {"y", 2}}}}),
      "y=2;");
  EXPECT_EQ(
      render("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='c') | join('+') }}",
             {{"m", {{{"role", "user"}, {"c", "a"}}, {{"role", "x"}, {"c", "b"}}, {{"role", "user"}, {"c", "d"}}}}}),
      "a+d");
  EXPECT_EQ(render("{{ x[::-1] }} {{ x[1:] }} {{ 'héllo'[1:3] }}", {{"x", {1, 2, 3}}}), "[3, 2, 1] [2, 3] él");
  EXPECT_EQ(render("{{ 'a' if x is defined else 'b' }}{{ y.z is defined }}", {{"y", nlohmann::json::object()}}),
            "bFalse");
  // trim_blocks / lstrip_blocks as transformers configures Jinja2, and "-" / "+" markers.
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc\n"), "a\nb\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%+ endif %}"), "ab  ");
  EXPECT_EQ(render("{# c #}\nx{{- ' y' }}"), "x y");
}

TEST(ChatTemplate, GenerationSpans) {
  Template t(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}!"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "gen");
  EXPECT_TRUE(t.has_generation());
  std::vector<Template::Span> spans;
  const std::string out =
      t.render(jinja::from_json(nlohmann::json{
                   {"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}}),
               &spans);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(out.substr(spans[0].begin, spans[0].end - spans[0].begin), "a!");
}

TEST(ChatTemplate, UnsupportedConstructsAreNamedWithTheirLine) {
  EXPECT_EQ(error_of("a\n{% include 'x.jinja' %}"),
            "chat template test line 2: unsupported Jinja construct {% include %}; ztrain's chat templates support "
            "set, if, for, macro, break, continue and generation");
  EXPECT_EQ(error_of("{{ x | wordwrap }}"), "chat template test line 1: unsupported Jinja filter \"wordwrap\"");
  EXPECT_EQ(error_of("\n\n{% if x is prime %}{% endif %}"),
            "chat template test line 3: unsupported Jinja test \"prime\"");
  EXPECT_NE(error_of("{% call foo() %}x{% endcall %}").find("unsupported Jinja construct {% call %}"),
            std::string::npos);
  EXPECT_NE(error_of("{% for x in y %}").find("missing {% endfor %}"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + }}").find("line 1: unexpected"), std::string::npos);
  EXPECT_EQ(error_of("x\n{{ raise_exception('no system') }}"),
            "chat template test line 2: the template raised an exception: \"no system\"");
  EXPECT_EQ(error_of("{{ 'a' + none }}"),
            "chat template test line 1: unsupported operand type(s) for +: 'str' and 'NoneType'");
  EXPECT_EQ(error_of("{{ foo() }}"), "chat template test line 1: 'foo' is undefined");
}

TEST(ChatTemplate, HostileTemplatesFailCleanly) {
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper than 200"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("deeper than 256"),
            std::string::npos);
  std::string nested;
  for (int k = 0; k < 300; ++k) nested += "{% if 1 %}";
  EXPECT_NE(error_of(nested).find("deeper than 256"), std::string::npos);
  // (tests/test_untrusted_text.cpp has the rest of the budget: steps, sizes, chains, integers)
  EXPECT_NE(error_of("{{ 'ab' * 100000000000 }}").find("more than the limit of 33554432 bytes"), std::string::npos);
  std::string deep = "1";
  for (int k = 0; k < 1000; ++k) deep = "[" + deep + "]";
  EXPECT_THROW(jinja::from_json(nlohmann::json::parse(deep)), Error);
}

TEST(ChatTemplate, CyclesDoNotLeak) {  // LeakSanitizer checks this under scripts/test_sanitizers.sh
  EXPECT_EQ(render("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}{% set a.z = a %}ok"), "ok");
  EXPECT_EQ(render("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "3210");
}
