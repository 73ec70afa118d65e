// config_resolved.cpp: the resolved model config that ranks and checkpoints compare (config.h).
// Kept apart from config.cpp (parsing) because it is a view of a parsed config, not parsing.
#include <charconv>
#include <cstdlib>

#include "models/config.h"

namespace zt {
namespace {

// A float as the double its shortest decimal form reads as: 1e-5f is 1e-05, not
// 9.99999974737875e-06, so messages show what the user wrote.
double float_value(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

nlohmann::json config_resolved_json(const ModelConfig& c) {
  nlohmann::json j = config_to_json(c, "");
  j.erase("torch_dtype");
  if (c.arch == Arch::gpt2) {
    j.erase("n_ctx");  // folded into n_positions
    j["vocab_size"] = c.vocab_size;
    j["n_embd"] = c.n_embd;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_positions"] = c.max_position;
    j["n_inner"] = c.ffn;
    j["layer_norm_epsilon"] = float_value(c.norm_eps);
  } else {
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.n_embd;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_size;
    j["intermediate_size"] = c.ffn;
    j["max_position_embeddings"] = c.max_position;
    j["rms_norm_eps"] = float_value(c.norm_eps);
    j["rope_theta"] = float_value(c.rope_theta);
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  return j;
}

std::string config_first_difference(const nlohmann::json& a, const nlohmann::json& b) {
  // Both are objects whose keys iterate in sorted order: walk the union.
  auto ia = a.begin(), ib = b.begin();
  while (ia != a.end() || ib != b.end()) {
    if (ib == b.end() || (ia != a.end() && ia.key() < ib.key())) return ia.key();
    if (ia == a.end() || ib.key() < ia.key()) return ib.key();
    if (*ia != *ib) return ia.key();
    ++ia, ++ib;
  }
  return "";
}

}  // namespace zt
