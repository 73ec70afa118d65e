// config_moe.cpp: the mixture-of-experts keys of MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig
// (their names and defaults), after parse_llama_family has read the attention and norm keys they
// share with Mistral, Qwen2 and Qwen3. Settings ztrain cannot honour (dense layers between the
// sparse ones, router jitter) are refused by name.
#include "core/error.h"
#include "models/config.h"

namespace zt {
namespace {

std::string dump60(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

constexpr int kMaxExperts = 65536;

int moe_int(const nlohmann::json& j, const char* key, int def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ZT_CHECK(j[key].is_number_integer() && j[key].get<long long>() > 0 && j[key].get<long long>() <= (1 << 24), where,
           ": config key \"", key, "\" must be a positive integer, got ", dump60(j[key]));
  return j[key].get<int>();
}

// A coefficient: a number >= 0.
float moe_coef(const nlohmann::json& j, const char* key, float def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ZT_CHECK(j[key].is_number() && j[key].get<double>() >= 0 && j[key].get<double>() < 1e30, where, ": config key \"",
           key, "\" must be a number >= 0, got ", dump60(j[key]));
  return j[key].get<float>();
}

bool moe_bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ZT_CHECK(j[key].is_boolean(), where, ": config key \"", key, "\" must be true or false, got ", dump60(j[key]));
  return j[key].get<bool>();
}

// Qwen's dense layers among the sparse ones: refused unless every layer is sparse.
void refuse_dense_layers(const nlohmann::json& j, const std::string& mt, const std::string& where) {
  const int step = moe_int(j, "decoder_sparse_step", 1, where);
  ZT_CHECK(step == 1, where, ": decoder_sparse_step = ", step, " (dense MLP layers between the sparse ones) is not ",
           "supported for ", mt, "; ztrain trains models whose every layer is sparse (decoder_sparse_step 1)");
  const bool dense_listed =
      j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array() && !j["mlp_only_layers"].empty();
  ZT_CHECK(!dense_listed, where, ": mlp_only_layers = ", dump60(j["mlp_only_layers"]),
           " (dense MLP layers) is not supported for ", mt, "; ztrain trains models whose every layer is sparse ([])");
}

}  // namespace

void parse_moe_config(const nlohmann::json& j, const std::string& mt, const std::string& where, ModelConfig* c) {
  MoeConfig& m = c->moe;
  const bool mixtral = mt == "mixtral";
  const char* experts_key = mixtral ? "num_local_experts" : "num_experts";
  m.num_experts = moe_int(j, experts_key, mixtral ? 8 : mt == "qwen2_moe" ? 60 : 128, where);
  // Published models have at most a few hundred; the bound keeps an untrusted config's per-expert tables
  // (tensor names, adapter modules) small.
  ZT_CHECK(m.num_experts <= kMaxExperts, where, ": ", experts_key, " = ", m.num_experts, " is more than ztrain's ",
           kMaxExperts, " experts per layer");
  m.top_k = moe_int(j, "num_experts_per_tok", mixtral ? 2 : mt == "qwen2_moe" ? 4 : 8, where);
  ZT_CHECK(m.top_k <= m.num_experts, where, ": num_experts_per_tok (", m.top_k, ") is larger than the number of ",
           "experts (", experts_key, " = ", m.num_experts, "); each token picks that many distinct experts");
  m.aux_loss = moe_bool(j, "output_router_logits", false, where);
  m.aux_loss_coef = moe_coef(j, "router_aux_loss_coef", 0.001f, where);
  if (mixtral) {
    m.expert_ffn = c->ffn;  // MixtralConfig: intermediate_size is each expert's width
    m.norm_topk = true;
    ZT_CHECK(moe_coef(j, "router_jitter_noise", 0.f, where) == 0.f, where,
             ": router_jitter_noise = ", dump60(j["router_jitter_noise"]),
             " is not supported (ztrain's routing is deterministic); set it to 0");
    return;
  }
  refuse_dense_layers(j, mt, where);
  m.expert_ffn = moe_int(j, "moe_intermediate_size", mt == "qwen2_moe" ? 1408 : 768, where);
  m.norm_topk = moe_bool(j, "norm_topk_prob", false, where);
  if (mt == "qwen2_moe") {
    m.shared_ffn = moe_int(j, "shared_expert_intermediate_size", 5632, where);
    m.shared_gate = true;
  }
}

}  // namespace zt
