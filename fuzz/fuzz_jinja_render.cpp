// fuzz_jinja_render.cpp: libFuzzer target for the Jinja renderer under its budget (jinja.h
// Limits; issue 21). The input is a template, optionally a NUL byte and a JSON object that is
// added to the context. Unlike fuzz_chat_template (which goes through SFT record formatting and
// stops at the first error), every template that parses is rendered directly against a rich
// context (messages with tool calls, tools, nested dicts, large and negative integers) under
// small limits, so the fuzzer reaches the limits themselves: a render must return within them
// (output no longer than max_string_bytes) or fail with one zt::Error line naming the template.
// Nothing may crash, overflow the stack, trap (SIGFPE), hit undefined behaviour or run past the
// -timeout libFuzzer is given.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "text/jinja.h"

namespace {

const zt::jinja::Value& base_context() {
  static const zt::jinja::Value ctx = zt::jinja::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "hi <b>there</b>\n\tüñï 😀"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "get", "arguments": {"city": "Paris", "n": 3, "deep": [[1, [2, [3]]]]}}}]},
      {"role": "tool", "content": "{\"t\": 21.5}", "tool_call_id": "abc"},
      {"role": "assistant", "content": "<think>x</think>done"}],
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "big": 9223372036854775807, "small": -9223372036854775808, "f": 1e308, "nan_text": "nan",
    "empty": [], "nested": {"a": {"b": {"c": [null, true, false, 0.5]}}}
  })"));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  zt::jinja::Value ctx = zt::jinja::Value::object();
  for (auto& kv : base_context().o->items) ctx.o->set(kv.first, kv.second);
  if (nul != std::string::npos) {
    try {
      const auto extra = nlohmann::ordered_json::parse(in.substr(nul + 1));
      if (extra.is_object() && extra.size() < 64)
        zt::fuzz::expect_ok_or_error([&] {
          for (auto it = extra.begin(); it != extra.end(); ++it) ctx.o->set(it.key(), zt::jinja::from_json(it.value()));
        });
    } catch (const nlohmann::json::exception&) {
    }
  }
  // Small limits: the fuzzer should meet them in a few milliseconds, not the defaults' seconds.
  zt::jinja::Limits limits;
  limits.max_steps = 200000;
  limits.max_string_bytes = 1 << 20;
  limits.max_items = 1 << 14;
  zt::fuzz::expect_ok_or_error([&] {
    zt::jinja::Template t(in.substr(0, nul), "fuzz.jinja");
    std::vector<zt::jinja::Template::Span> spans;
    std::string out;
    try {
      out = t.render(ctx, &spans, limits);
    } catch (const zt::Error& e) {
      if (std::string(e.what()).find("fuzz.jinja") == std::string::npos)
        zt::fuzz::finding(std::string("a render error that does not name the template: ") + e.what());
      throw;
    }
    if (out.size() > limits.max_string_bytes) zt::fuzz::finding("the output is longer than max_string_bytes");
    for (const auto& s : spans)
      if (s.begin > s.end || s.end > out.size()) zt::fuzz::finding("a generation span outside the output");
  });
  return 0;
}
