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
  // Every setting the model is built from, under the architecture's HF key (nullptr: it has
  // none), as parsed, defaults filled in: configs that build the same model compare equal,
  // whatever else (transformers_version, _name_or_path, ...) their files carry.
  struct Key {
    const char *gpt2, *llama;
    nlohmann::json value;
  };
  const Key keys[] = {{"vocab_size", "vocab_size", c.vocab_size},
                      {"n_embd", "hidden_size", c.n_embd},
                      {"n_layer", "num_hidden_layers", c.n_layer},
                      {"n_head", "num_attention_heads", c.n_head},
                      {nullptr, "num_key_value_heads", c.n_kv_head},
                      {nullptr, "head_dim", c.head_size},
                      {"n_inner", "intermediate_size", c.ffn},
                      {"n_positions", "max_position_embeddings", c.max_position},
                      {"layer_norm_epsilon", "rms_norm_eps", float_value(c.norm_eps)},
                      {nullptr, "rope_theta", float_value(c.rope_theta)},
                      {"tie_word_embeddings", "tie_word_embeddings", c.tie_word_embeddings}};
  nlohmann::json j = {{"model_type", c.model_type}};
  for (const Key& k : keys)
    if (const char* name = c.arch == Arch::gpt2 ? k.gpt2 : k.llama) j[name] = k.value;
  // The families' options, only where they are on (a plain Llama resolves as it always did;
  // qkv biases and q/k norms follow from model_type).
  if (c.rope.type != "default" && c.raw.contains("rope_scaling")) j["rope_scaling"] = c.raw["rope_scaling"];
  if (c.o_bias) j["attention_bias"] = true;
  if (c.mlp_bias) j["mlp_bias"] = true;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.model_type == "gemma3_text" || c.model_type == "gemma2") {  // Gemma's other settings, resolved
    if (c.rope_local_theta > 0.f) j["rope_local_base_freq"] = float_value(c.rope_local_theta);
    if (c.model_type == "gemma2") {
      j["attn_logit_softcapping"] = c.attn_softcap > 0.f ? nlohmann::json(float_value(c.attn_softcap)) : nullptr;
      j["final_logit_softcapping"] = c.final_softcap > 0.f ? nlohmann::json(float_value(c.final_softcap)) : nullptr;
    }
    const auto& q = c.raw.contains("query_pre_attn_scalar") ? c.raw["query_pre_attn_scalar"] : nlohmann::json();
    j["query_pre_attn_scalar"] = q.is_number() ? q : nlohmann::json(256);  // as given (parsing checked it)
    nlohmann::json types = nlohmann::json::array();
    for (uint8_t s : c.sliding_layers) types.push_back(s ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (c.moe.on()) {  // the MoE families' keys, resolved (the run's capacity and z-loss are flags, not here)
    const MoeConfig& m = c.moe;
    j[c.model_type == "mixtral" ? "num_local_experts" : "num_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.top_k;
    if (c.model_type != "mixtral") {
      j["moe_intermediate_size"] = m.expert_ffn;
      j["norm_topk_prob"] = m.norm_topk;
    }
    if (m.shared_ffn > 0) j["shared_expert_intermediate_size"] = m.shared_ffn;
    j["output_router_logits"] = m.aux_loss;
    j["router_aux_loss_coef"] = float_value(m.aux_loss_coef);
  }
  // The one other key a run reads from config.json: the EOS id packing splits documents at.
  if (c.raw.contains("eos_token_id")) j["eos_token_id"] = c.raw["eos_token_id"];
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
