// fuzz_tokenizer_pipeline.cpp: libFuzzer target for the tokenizer.json pipeline steps a file
// declares (normalizer, pre_tokenizer, decoder, post_processor; src/text/tokenizer_hf_steps.cpp,
// tokenizer_normalize.cpp, tokenizer_pretok.cpp) under the loader's limits (JSON nesting,
// expansion; issue 21). fuzz_tokenizer_hf mutates whole files, where a mutation mostly breaks
// the model; here the input is a JSON object whose fields are placed over a fixed valid model
// (a byte-fallback BPE, or WordPiece when the object says "wordpiece": true), optionally followed
// by "\n=====\n" and a text that is encoded (also with special tokens) and decoded. A load or an
// encode must succeed or fail with one zt::Error line; an encode must give ids in range.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "text/tokenizer.h"

namespace {

nlohmann::json base_model(bool wordpiece) {
  if (wordpiece)
    return nlohmann::json::parse(R"({"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
      "vocab": {"[UNK]": 0, "a": 1, "##a": 2, "b": 3, "##b": 4, "\u2581": 5, " ": 6, "<s>": 7, "</s>": 8}})");
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"a", 4}, {"b", 5}, {"ab", 6}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 7 + b;
  }
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}, {"unk_token", "<unk>"}, {"byte_fallback", true}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/false);
  auto parts = zt::fuzz::split(zt::fuzz::as_view(data, size), "\n=====\n", 2);
  nlohmann::json steps;
  try {
    steps = nlohmann::json::parse(parts[0]);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: fuzz_tokenizer_hf covers the parser
  }
  if (!steps.is_object()) return 0;
  const bool wordpiece = steps.contains("wordpiece") && steps["wordpiece"] == true;
  nlohmann::json file = {{"model", base_model(wordpiece)},
                         {"added_tokens",
                          {{{"id", wordpiece ? 7 : 1}, {"content", "<s>"}, {"special", true}},
                           {{"id", wordpiece ? 8 : 2}, {"content", "</s>"}, {"special", true}}}}};
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder", "post_processor", "added_tokens"})
    if (steps.contains(key)) file[key] = steps[key];
  if (wordpiece && steps.contains("max_input_chars_per_word"))
    file["model"]["max_input_chars_per_word"] = steps["max_input_chars_per_word"];
  static const auto dir = zt::fuzz::scratch_dir() / "pipeline_in";
  std::filesystem::create_directories(dir);
  std::string text;
  try {
    text = file.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  zt::fuzz::write_file(dir / "tokenizer.json", text);
  const std::string sample = parts.size() > 1 ? std::string(parts[1]) : "ab a  b\n<s>x</s> \xE2\x96\x81 \xC3\xA9";
  zt::fuzz::expect_ok_or_error([&] {
    auto t = zt::Tokenizer::load((dir / "tokenizer.json").string());
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = special ? t->encode_with_special(sample, true) : t->encode(sample);
      for (int32_t id : ids)
        if (id < 0 || id >= t->vocab_size()) zt::fuzz::finding("encode produced an id outside [0, vocab_size)");
      (void)t->decode(ids);
    }
  });
  return 0;
}
