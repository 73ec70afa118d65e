// config.cpp: HF config.json <-> ModelConfig.
#include "models/config.h"

#include <cmath>
#include <fstream>

#include "core/error.h"

namespace zt {
namespace {

// A JSON value for an error message: one line (dump escapes control characters), at most 60 chars.
std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Sizes past these are no real model; keeping below them also keeps the int products the model
// code forms (heads * head size, 3 * width, ...) from overflowing.
constexpr long long kMaxWidth = 1 << 20, kMaxCount = 1 << 24;

// Layers past this are no real model either, and each costs the parameter table a dozen named
// entries before anything is checked against memory (16M layers held 11.5 GB, then bad_alloc).
constexpr long long kMaxLayers = 1 << 16;

int positive_int(const nlohmann::json& j, const char* key, const std::string& where) {
  const std::string k = key;
  const long long max = k == "n_layer" || k == "num_hidden_layers" ? kMaxLayers : kMaxCount;
  // An integer (not 2.5, not a string) that fits: 4294967297 must not wrap around to 1.
  ZT_CHECK(j[key].is_number_integer() && j[key].get<long long>() > 0 && j[key].get<long long>() <= max, where,
           ": config key \"", key, "\" must be a positive integer up to ", max, ", got ", short_dump(j[key]));
  return j[key].get<int>();
}

int req_int(const nlohmann::json& j, const char* key, const std::string& where) {
  ZT_CHECK(j.contains(key), where, ": config.json is missing the required key \"", key, "\"");
  return positive_int(j, key, where);
}

int opt_int(const nlohmann::json& j, const char* key, int def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return positive_int(j, key, where);
}

// Epsilons and RoPE bases: positive and finite as a float.
float opt_float(const nlohmann::json& j, const char* key, float def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ZT_CHECK(j[key].is_number() && j[key].get<double>() > 0 && j[key].get<double>() <= 3.0e38, where, ": config key \"",
           key, "\" must be a positive number, got ", short_dump(j[key]));
  return j[key].get<float>();
}

bool opt_bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return def;
  ZT_CHECK(j[key].is_boolean(), where, ": config key \"", key, "\" must be true or false, got ", short_dump(j[key]));
  return j[key].get<bool>();
}

std::string opt_str(const nlohmann::json& j, const char* key, const std::string& def) {
  if (!j.contains(key) || !j[key].is_string()) return def;
  return j[key].get<std::string>();
}

// A number (int or float) > 0 inside rope_scaling.
double rope_number(const nlohmann::json& r, const char* key, double def, bool required, const std::string& where) {
  if (!r.contains(key) || r[key].is_null()) {
    ZT_CHECK(!required, where, ": rope_scaling of this rope_type needs the key \"", key, "\"");
    return def;
  }
  ZT_CHECK(r[key].is_number() && r[key].get<double>() > 0 && r[key].get<double>() < 1e30, where,
           ": rope_scaling key \"", key, "\" must be a positive number, got ", short_dump(r[key]));
  return r[key].get<double>();
}

// longrope: the factor lists (their length is checked against the head size later); the context
// the factors switch at is config.json's original_max_position_embeddings (Phi-3), else
// max_position_embeddings with rope_scaling's factor.
RopeScaling parse_longrope(const nlohmann::json& j, const nlohmann::json& r, RopeScaling rs, const std::string& where) {
  for (auto [key, out] : {std::pair{"short_factor", &rs.short_factor}, {"long_factor", &rs.long_factor}}) {
    ZT_CHECK(r.contains(key) && r[key].is_array() && !r[key].empty(), where,
             ": rope_scaling of rope_type longrope needs \"", key, "\", a list of numbers");
    for (const auto& v : r[key]) {
      ZT_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() < 1e30, where, ": rope_scaling ", key,
               " must hold positive numbers, got ", short_dump(v));
      out->push_back(v.get<double>());
    }
  }
  if (j.contains("original_max_position_embeddings") && !j["original_max_position_embeddings"].is_null())
    rs.original_max_position = positive_int(j, "original_max_position_embeddings", where);
  rs.factor = rope_number(r, "factor", 1.0, rs.original_max_position == 0, where);
  rs.attention_factor = rope_number(r, "attention_factor", 0.0, false, where);
  return rs;
}

// rope_scaling as transformers reads it ("rope_type", or the older "type").
RopeScaling parse_rope_scaling(const nlohmann::json& j, const std::string& where) {
  RopeScaling rs;
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return rs;
  const nlohmann::json& r = j["rope_scaling"];
  ZT_CHECK(r.is_object(), where, ": rope_scaling must be an object or null, got ", short_dump(r));
  const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
  ZT_CHECK(r.contains(type_key) && r[type_key].is_string(), where,
           ": rope_scaling needs a \"rope_type\" (default, linear, dynamic, yarn, llama3 or longrope)");
  rs.type = r[type_key].get<std::string>();
  if (rs.type == "default") return rs;
  if (rs.type == "su") rs.type = "longrope";  // Phi-3's first name for it
  ZT_CHECK(
      rs.type == "linear" || rs.type == "dynamic" || rs.type == "yarn" || rs.type == "llama3" || rs.type == "longrope",
      where, ": rope_scaling rope_type ", quote(rs.type),
      " is not supported; ztrain computes default, linear, dynamic, yarn, llama3 and longrope");
  if (rs.type == "longrope") return parse_longrope(j, r, rs, where);
  rs.factor =
      rope_number(r, "factor", 1.0, rs.type != "yarn" || !r.contains("original_max_position_embeddings"), where);
  if (rs.type == "llama3") {
    rs.low_freq_factor = rope_number(r, "low_freq_factor", 1.0, true, where);
    rs.high_freq_factor = rope_number(r, "high_freq_factor", 4.0, true, where);
    ZT_CHECK(rs.high_freq_factor > rs.low_freq_factor, where,
             ": rope_scaling high_freq_factor must be larger than low_freq_factor");
  }
  if (rs.type == "llama3" || (rs.type == "yarn" && r.contains("original_max_position_embeddings"))) {
    ZT_CHECK(r.contains("original_max_position_embeddings"), where,
             ": rope_scaling of rope_type llama3 needs the key \"original_max_position_embeddings\"");
    rs.original_max_position = positive_int(r, "original_max_position_embeddings", where + " rope_scaling");
  }
  if (rs.type == "yarn") {
    rs.attention_factor = rope_number(r, "attention_factor", 0.0, false, where);
    rs.beta_fast = rope_number(r, "beta_fast", 32.0, false, where);
    rs.beta_slow = rope_number(r, "beta_slow", 1.0, false, where);
    rs.mscale = rope_number(r, "mscale", 0.0, false, where);
    rs.mscale_all_dim = rope_number(r, "mscale_all_dim", 0.0, false, where);
    rs.truncate = opt_bool(r, "truncate", true, where);
  }
  return rs;
}

// The Llama-shaped families: LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Olmo2Config keys and
// defaults; each family's differences are options of one model (config.h).
void parse_llama_family(const nlohmann::json& j, const std::string& mt, const std::string& where, ModelConfig* out) {
  ModelConfig& c = *out;
  c.arch = Arch::llama;
  c.model_type = mt;
  c.vocab_size = req_int(j, "vocab_size", where);
  c.n_embd = req_int(j, "hidden_size", where);
  c.n_layer = req_int(j, "num_hidden_layers", where);
  c.n_head = req_int(j, "num_attention_heads", where);
  c.ffn = req_int(j, "intermediate_size", where);
  c.n_kv_head = opt_int(j, "num_key_value_heads", c.n_head, where);
  const int default_context = mt == "llama" || mt == "olmo2"       ? 2048
                              : mt == "mistral" || mt == "mixtral" ? 4096 * 32
                              : mt == "phi3"                       ? 4096
                                                                   : 32768;
  c.max_position = opt_int(j, "max_position_embeddings", default_context, where);
  c.norm_eps = opt_float(j, "rms_norm_eps", mt == "olmo2" || mt == "phi3" || mt == "mixtral" ? 1e-5f : 1e-6f, where);
  c.rope_theta = opt_float(j, "rope_theta", mt == "mixtral" ? 1e6f : 10000.f, where);
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false, where);
  c.rope = parse_rope_scaling(j, where);
  std::string act = opt_str(j, "hidden_act", "silu");
  ZT_CHECK(act == "silu", where, ": hidden_act ", quote(act), " is not supported; these models use \"silu\"");
  ZT_CHECK(!j.contains("pretraining_tp") || j["pretraining_tp"].is_null() || j["pretraining_tp"] == 1, where,
           ": pretraining_tp other than 1 is not supported; set it to 1 (it only changes how HF splits GEMMs)");
  if (mt == "llama") {
    c.qkv_bias = c.o_bias = opt_bool(j, "attention_bias", false, where);
    c.mlp_bias = opt_bool(j, "mlp_bias", false, where);
  } else if (mt == "olmo2") {
    // Olmo2DecoderLayer: no norm before attention or the MLP; RMSNorm on their outputs
    // (post_attention_layernorm, post_feedforward_layernorm) before the residual add, and
    // q_norm / k_norm over the whole q and k projections (not per head) before RoPE.
    c.qkv_bias = c.o_bias = opt_bool(j, "attention_bias", false, where);
    c.qk_norm = c.qk_norm_full = true;
    c.pre_norm = false;
    c.post_norm = true;
  } else if (mt == "phi3") {
    // Phi3Config: Mistral's block (no biases, an optional window); q/k/v and gate/up are stored
    // fused (qkv_proj, gate_up_proj), which the HF reader splits and the writer fuses again.
    if (j.contains("sliding_window") && !j["sliding_window"].is_null())
      c.sliding_window = positive_int(j, "sliding_window", where);
    if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null())
      ZT_CHECK(j["partial_rotary_factor"].is_number() && j["partial_rotary_factor"].get<double>() == 1.0, where,
               ": partial_rotary_factor ", short_dump(j["partial_rotary_factor"]),
               " is not supported; ztrain rotates whole heads (1.0)");
  } else if (mt == "mistral" || mt == "mixtral") {
    // MistralConfig's default window is 4096 (MixtralConfig's none); null (Mistral v0.2+) means full attention.
    if (!j.contains("sliding_window"))
      c.sliding_window = mt == "mistral" ? 4096 : 0;
    else if (!j["sliding_window"].is_null())
      c.sliding_window = positive_int(j, "sliding_window", where);
  } else {
    c.qkv_bias = mt == "qwen2" || mt == "qwen2_moe";  // Qwen2: q/k/v always carry biases, o_proj none
    if (mt == "qwen3" || mt == "qwen3_moe") {
      c.qk_norm = true;
      c.qkv_bias = c.o_bias = opt_bool(j, "attention_bias", false, where);
    }
    // Qwen's sliding window applies per layer (from max_window_layers on) and only with
    // use_sliding_window; its published models leave it off.
    ZT_CHECK(!opt_bool(j, "use_sliding_window", false, where), where,
             ": use_sliding_window=true (a window on some layers) is not supported for ", mt,
             "; set it to false, as the published models do");
  }
}

// A key the family does not implement (Gemma 3's published configs hold null): refused by name when set.
void refuse_set(const nlohmann::json& j, const char* key, const std::string& mt, const std::string& where,
                const char* why) {
  ZT_CHECK(!j.contains(key) || j[key].is_null() || j[key] == false, where, ": ", key, " = ", short_dump(j[key]),
           " is not supported for ", mt, " (", why, "); set it to null");
}

// A soft-capping key of Gemma2Config: its default when absent, none (0) when null.
float softcap(const nlohmann::json& j, const char* key, float def, const std::string& where) {
  if (!j.contains(key)) return def;
  return j[key].is_null() ? 0.f : opt_float(j, key, def, where);
}

// The layer types: layer_types, else every pattern-th layer (1-based) global, the others sliding.
void parse_layer_types(const nlohmann::json& j, int pattern, const std::string& where, ModelConfig* c) {
  c->sliding_layers.assign(size_t(c->n_layer), 0);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& lt = j["layer_types"];
    ZT_CHECK(lt.is_array() && lt.size() == size_t(c->n_layer), where, ": layer_types must list one entry per layer (",
             c->n_layer, "), got ", short_dump(lt));
    for (int l = 0; l < c->n_layer; ++l) {
      const auto& t = lt[size_t(l)];
      ZT_CHECK(t == "sliding_attention" || t == "full_attention", where, ": layer_types[", l, "] is ", short_dump(t),
               "; use \"sliding_attention\" or \"full_attention\"");
      c->sliding_layers[size_t(l)] = t == "sliding_attention";
    }
    return;
  }
  for (int l = 0; l < c->n_layer; ++l) c->sliding_layers[size_t(l)] = (l + 1) % pattern != 0;
}

// Gemma 2 and Gemma 3's text model (Gemma2Config / Gemma3TextConfig keys and defaults): Gemma's
// RMSNorm (1 + w), four norms per layer (pre and post around attention and the MLP), GeGLU,
// embeddings scaled by sqrt(hidden_size), the score scale query_pre_attn_scalar^-1/2, and
// sliding-window layers. Gemma 2: every other layer slides (the even ones), soft-capped scores and
// logits. Gemma 3: per-head q/k norms, every sliding_window_pattern-th layer global, the sliding
// layers with their own RoPE base; its soft-capping keys are null.
void parse_gemma(const nlohmann::json& j, const std::string& mt, const std::string& where, ModelConfig* out) {
  ModelConfig& c = *out;
  const bool g3 = mt == "gemma3_text";
  c.arch = Arch::llama;
  c.model_type = mt;
  c.vocab_size = req_int(j, "vocab_size", where);
  c.n_embd = req_int(j, "hidden_size", where);
  c.n_layer = req_int(j, "num_hidden_layers", where);
  c.n_head = req_int(j, "num_attention_heads", where);
  c.ffn = req_int(j, "intermediate_size", where);
  c.n_kv_head = opt_int(j, "num_key_value_heads", 4, where);
  c.max_position = opt_int(j, "max_position_embeddings", g3 ? 131072 : 8192, where);
  c.norm_eps = opt_float(j, "rms_norm_eps", 1e-6f, where);
  c.rope_theta = opt_float(j, "rope_theta", g3 ? 1e6f : 1e4f, where);
  if (g3) c.rope_local_theta = opt_float(j, "rope_local_base_freq", 1e4f, where);
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", true, where);
  c.rope = parse_rope_scaling(j, where);
  const std::string act = opt_str(j, "hidden_activation", "gelu_pytorch_tanh");
  ZT_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_new", where, ": hidden_activation ", quote(act),
           " is not supported; Gemma uses \"gelu_pytorch_tanh\"");
  if (g3) {
    refuse_set(j, "attn_logit_softcapping", mt, where, "Gemma 3 has no attention soft-capping");
    refuse_set(j, "final_logit_softcapping", mt, where, "Gemma 3 has no final logit soft-capping");
  } else {
    c.attn_softcap = softcap(j, "attn_logit_softcapping", 50.f, where);
    c.final_softcap = softcap(j, "final_logit_softcapping", 30.f, where);
  }
  refuse_set(j, "use_bidirectional_attention", mt, where, "attention is causal");
  refuse_set(j, "rope_parameters", mt, where, "give rope_theta, rope_local_base_freq and rope_scaling instead");
  c.qkv_bias = c.o_bias = opt_bool(j, "attention_bias", false, where);
  c.qk_norm = g3;
  c.pre_norm = c.post_norm = true;
  c.norm_unit_offset = c.embed_scale = c.geglu = true;
  // A number (published configs hold integers: 256, 168); HF scales by its double ** -0.5.
  c.attn_scale = float(std::pow(double(opt_float(j, "query_pre_attn_scalar", 256.f, where)), -0.5));
  c.sliding_window = opt_int(j, "sliding_window", 4096, where);
  const char* key = j.contains("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
  parse_layer_types(j, g3 ? opt_int(j, key, 6, where) : 2, where, &c);
}

}  // namespace

ModelConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  ZT_CHECK(j.is_object(), where, ": config.json must be a JSON object");
  ModelConfig c;
  c.raw = j;
  ZT_CHECK(j.contains("model_type") && j["model_type"].is_string(), where,
           ": config.json is missing the required key \"model_type\" (\"gpt2\" or \"llama\")");
  const std::string mt = j["model_type"].get<std::string>();
  if (mt == "gpt2") {
    c.arch = Arch::gpt2;
    c.vocab_size = req_int(j, "vocab_size", where);
    c.n_embd = req_int(j, "n_embd", where);
    c.n_layer = req_int(j, "n_layer", where);
    c.n_head = req_int(j, "n_head", where);
    c.n_kv_head = c.n_head;
    c.max_position = j.contains("n_positions") ? req_int(j, "n_positions", where) : req_int(j, "n_ctx", where);
    c.ffn = opt_int(j, "n_inner", 4 * c.n_embd, where);
    c.norm_eps = opt_float(j, "layer_norm_epsilon", 1e-5f, where);
    c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", true, where);
    ZT_CHECK(c.tie_word_embeddings, where,
             ": GPT-2 with an untied LM head is not supported; remove tie_word_embeddings");
    std::string act = opt_str(j, "activation_function", "gelu_new");
    ZT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": activation_function ", quote(act),
             " is not supported; ztrain's GPT-2 uses the tanh GELU (\"gelu_new\")");
  } else if (mt == "llama" || mt == "mistral" || mt == "qwen2" || mt == "qwen3" || mt == "olmo2" || mt == "phi3") {
    parse_llama_family(j, mt, where, &c);
  } else if (mt == "mixtral" || mt == "qwen2_moe" || mt == "qwen3_moe") {
    parse_llama_family(j, mt, where, &c);
    parse_moe_config(j, mt, where, &c);
  } else if (mt == "gemma3_text" || mt == "gemma2") {
    parse_gemma(j, mt, where, &c);
  } else if (mt == "gemma3" || mt == "gemma") {
    throw Error(str_cat(where, ": model_type ", quote(mt),
                        " is not supported; of the Gemma family ztrain trains \"gemma2\" and the text model "
                        "\"gemma3_text\""));
  } else {
    throw Error(str_cat(where, ": model_type ", quote(mt),
                        " is not supported; use \"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"olmo2\", "
                        "\"phi3\", \"gemma3_text\", \"mixtral\", \"qwen2_moe\" or \"qwen3_moe\""));
  }
  if (mt == "gpt2") c.model_type = "gpt2";
  // Qwen3Config's and Gemma3TextConfig's head_dim defaults are 128 and 256.
  const bool gemma = c.model_type == "gemma3_text" || c.model_type == "gemma2";
  const int default_hs = c.model_type == "qwen3" || c.model_type == "qwen3_moe" ? 128
                         : gemma                                                ? 256
                                                                                : c.n_embd / c.n_head;
  c.head_size = c.arch == Arch::llama ? opt_int(j, "head_dim", default_hs, where) : c.n_embd / c.n_head;
  ZT_CHECK(c.arch == Arch::llama || c.n_embd % c.n_head == 0, where, ": n_embd (", c.n_embd,
           ") must be divisible by n_head (", c.n_head, ")");
  ZT_CHECK(c.n_head % c.n_kv_head == 0, where, ": num_attention_heads (", c.n_head,
           ") must be a multiple of num_key_value_heads (", c.n_kv_head, ")");
  ZT_CHECK(c.head_size > 0, where, ": head size is 0: hidden_size (", c.n_embd,
           ") is smaller than the number of heads (", c.n_head, "); fix num_attention_heads or set head_dim");
  ZT_CHECK(c.head_size % 2 == 0 || c.arch == Arch::gpt2, where, ": head size must be even for RoPE");
  for (auto [key, list] : {std::pair{"short_factor", &c.rope.short_factor}, {"long_factor", &c.rope.long_factor}})
    ZT_CHECK(c.rope.type != "longrope" || list->size() == size_t(c.head_size / 2), where, ": rope_scaling ", key,
             " has ", list->size(),
             " entries; longrope needs one per rotated frequency, head_dim / 2 = ", c.head_size / 2);
  ZT_CHECK(c.vocab_size <= (1 << 30), where, ": vocab_size is implausibly large");
  for (auto [name, width] : {std::pair{"n_embd / hidden_size", int64_t(c.n_embd)},
                             {"the FFN width", int64_t(c.ffn)},
                             {"heads * head size", int64_t(c.n_head) * c.head_size},
                             {"the q, k, v width", int64_t(c.n_head + 2 * int64_t(c.n_kv_head)) * c.head_size}})
    ZT_CHECK(width <= kMaxWidth, where, ": ", name, " (", width, ") is implausibly large (limit ", kMaxWidth, ")");
  return c;
}

ModelConfig config_from_file(const std::string& path) {
  std::ifstream f(path);
  ZT_CHECK(f.good(), "cannot open model config ", path, "; pass an HF config.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(path, ": not valid JSON (", e.what(), ")"));
  }
  return config_from_json(j, path);
}

nlohmann::json config_to_json(const ModelConfig& c, const std::string& torch_dtype) {
  nlohmann::json j = c.raw;
  j["model_type"] = c.model_type;
  if (!j.contains("architectures")) {
    const std::string& mt = c.model_type;
    j["architectures"] = {mt == "gpt2"          ? "GPT2LMHeadModel"
                          : mt == "mistral"     ? "MistralForCausalLM"
                          : mt == "qwen2"       ? "Qwen2ForCausalLM"
                          : mt == "qwen3"       ? "Qwen3ForCausalLM"
                          : mt == "olmo2"       ? "Olmo2ForCausalLM"
                          : mt == "phi3"        ? "Phi3ForCausalLM"
                          : mt == "gemma3_text" ? "Gemma3ForCausalLM"
                          : mt == "gemma2"      ? "Gemma2ForCausalLM"
                          : mt == "mixtral"     ? "MixtralForCausalLM"
                          : mt == "qwen2_moe"   ? "Qwen2MoeForCausalLM"
                          : mt == "qwen3_moe"   ? "Qwen3MoeForCausalLM"
                                                : "LlamaForCausalLM"};
  }
  j["torch_dtype"] = torch_dtype;
  if (c.arch == Arch::llama) j["tie_word_embeddings"] = c.tie_word_embeddings;
  return j;
}

}  // namespace zt
