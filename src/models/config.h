// config.h: the model hyper-parameters ztrain understands, read from and written to a
// Hugging Face config.json (GPT2Config / LlamaConfig key names). Keys ztrain does not
// use are kept and written back untouched; missing required keys and settings ztrain
// cannot honour (e.g. rope_scaling, attention biases on Llama) are errors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace zt {

enum class Arch { gpt2, llama };

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int vocab_size = 0;    // V
  int n_embd = 0;        // C
  int n_layer = 0;       // L
  int n_head = 0;        // NH
  int n_kv_head = 0;     // KVH (== NH for GPT-2)
  int head_size = 0;     // HS
  int ffn = 0;           // F
  int max_position = 0;  // longest sequence the model accepts
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  bool tie_word_embeddings = true;
  nlohmann::json raw;  // the config.json as read, for writing back

  int qkv_dim() const { return (n_head + 2 * n_kv_head) * head_size; }
  const char* arch_name() const { return arch == Arch::gpt2 ? "gpt2" : "llama"; }
};

// Parses a config.json object; `where` names its source in error messages.
ModelConfig config_from_json(const nlohmann::json& j, const std::string& where);
ModelConfig config_from_file(const std::string& path);
// The config.json to write next to saved weights (raw keys kept, dtype updated).
nlohmann::json config_to_json(const ModelConfig& c, const std::string& torch_dtype);
// The config as ztrain builds the model from it (config_resolved.cpp): model_type and every
// setting ztrain reads, by its resolved value under its HF name (defaults made explicit,
// floats as parsed), so two configs that build the same model compare equal key
// by key, and one that does not names the key. The ranks of a job and a resumed checkpoint are
// checked against it. Keys the file carries for bookkeeping (torch_dtype, transformers_version,
// _name_or_path, ...) are left out; eos_token_id is in (packing reads it).
nlohmann::json config_resolved_json(const ModelConfig& c);
// The first key (in key order) whose value differs between two such objects, "" if none.
std::string config_first_difference(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace zt
