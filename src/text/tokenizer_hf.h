// tokenizer_hf.h: reading a Hugging Face tokenizer.json, shared by tokenizer_hf.cpp (the model,
// added tokens, bos/eos) and tokenizer_hf_steps.cpp (normalizer, pre-tokenizer, post-processor
// and decoder). Every component ztrain does not implement is one error naming it and its place
// in the file. Internal to src/text.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "text/tokenizer_pipeline.h"

namespace zt::tok {

// Reads fields with errors that name the file and the JSON path.
struct Reader {
  std::string file;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(str_cat(file, ": ", where, " ", what));
  }
  const nlohmann::json& field(const nlohmann::json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(where, str_cat("has no \"", key, "\" field"));
    return obj.at(key);
  }
  std::string string_field(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const nlohmann::json& v = field(obj, where, key);
    if (!v.is_string()) fail(str_cat(where, ".", key), str_cat("must be a string, found ", v.type_name()));
    return v.get<std::string>();
  }
  std::string string_or(const nlohmann::json& obj, const std::string& where, const char* key,
                        const char* fallback) const {
    if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
    return string_field(obj, where, key);
  }
  bool bool_field(const nlohmann::json& obj, const std::string& where, const char* key, bool fallback) const {
    if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
    if (!obj.at(key).is_boolean()) fail(str_cat(where, ".", key), "must be true or false");
    return obj.at(key).get<bool>();
  }
  const nlohmann::json& array_field(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const nlohmann::json& v = field(obj, where, key);
    if (!v.is_array()) fail(str_cat(where, ".", key), str_cat("must be an array, found ", v.type_name()));
    return v;
  }
  // A JSON value in a message: its first 80 characters (a value can be megabytes, or invalid UTF-8).
  static std::string brief(const nlohmann::json& v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() > 80 ? s.substr(0, 80) + "..." : s;
  }
  // The type is quoted as JSON: a file's type string may hold newlines or control bytes, and the
  // error must stay one line.
  [[noreturn]] void unsupported(const std::string& where, const std::string& type, const char* supported) const {
    fail(where, str_cat("type ", brief(nlohmann::json(type)), " is not supported (ztrain reads ", supported, ")"));
  }
};

// Each appends the steps of one component (null: none) to the parts; `byte_level` is set when
// the pre-tokenizer maps bytes to GPT-2's alphabet (the BPE vocab is then written in it).
void parse_normalizer(const Reader& rd, const nlohmann::json& n, const std::string& where, PipelineParts& p);
void parse_pre_tokenizer(const Reader& rd, const nlohmann::json& n, const std::string& where, PipelineParts& p,
                         bool& byte_level);
void parse_decoder(const Reader& rd, const nlohmann::json& n, const std::string& where, PipelineParts& p);
// Needs the model and added tokens (special tokens are named by text).
void parse_post_processor(const Reader& rd, const nlohmann::json& n, const std::string& where, PipelineParts& p);
int32_t checked_id(const Reader& rd, const nlohmann::json& v, const std::string& where);

}  // namespace zt::tok
