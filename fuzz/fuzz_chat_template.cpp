// fuzz_chat_template.cpp: libFuzzer target for the chat-template engine (src/text/jinja*.cpp)
// and SFT record formatting (src/text/chat_format.cpp). The input is a template, a NUL byte,
// then one JSONL record: the template is parsed, and when it parses the record is formatted
// with it under every loss option (the way sft_tokenize does). Errors must be zt::Error with one
// line; nothing may crash, hang or exhaust the stack.
#include "fuzz_util.h"
#include "text/chat_format.h"
#include "text/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  zt::ChatTemplateConfig cfg;
  cfg.source = in.substr(0, nul);
  cfg.origin = "fuzz";
  cfg.bos_token = "<s>";
  cfg.has_bos = true;
  cfg.eos_token = "</s>";
  cfg.has_eos = true;
  const std::string record =
      nul == std::string::npos ? "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}" : in.substr(nul + 1);
  for (int mode = 0; mode < 2; ++mode)
    zt::fuzz::expect_ok_or_error([&] {
      zt::SftOptions opt;
      opt.assistant_only_loss = mode == 1;
      opt.completion_only_loss = mode == 0;
      zt::ChatFormatter fmt(cfg, opt, "</s>");
      nlohmann::ordered_json rec;
      try {
        rec = nlohmann::ordered_json::parse(record);
      } catch (const nlohmann::json::exception&) {
        return;  // sft_tokenize reports these itself
      }
      try {
        (void)fmt.format(rec);
      } catch (const nlohmann::json::exception&) {
        // sft_tokenize turns a JSON type error inside a record into its line's error.
      }
    });
  return 0;
}
