// config.h: the model hyper-parameters ztrain understands, read from and written to a
// Hugging Face config.json (GPT2Config / LlamaConfig / MistralConfig / Qwen2Config /
// Qwen3Config / Olmo2Config / Phi3Config / Gemma2Config / Gemma3TextConfig key names). Keys ztrain does not use
// are kept and written back untouched; missing required keys and settings ztrain cannot honour
// (Qwen's per-layer window, soft-capping, other activations) are errors naming the key.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {

// LoRA adapters (PEFT's LoraConfig; models/lora.h): a low-rank update B A, scaled, added to the
// targeted linear layers of a frozen base. r = 0: none (the model trains all its parameters).
enum class PeftType : uint8_t { lora, ia3 };
struct LoraSpec {
  // lora: B A updates (r, alpha, dropout, rslora, dora apply); ia3: PEFT's IA3, a learned vector
  // scaling each target's outputs, or its input for the feedforward modules (r stays 0).
  PeftType type = PeftType::lora;
  int r = 0;
  double alpha = 32;
  double dropout = 0;   // on the adapter's input only (PEFT's lora_dropout)
  bool rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // DoRA (PEFT's use_dora): y = b + (m / ||W + s B A||_row) (x W^T + s x A^T B^T), the norm held
  // constant in backward; m trains.
  bool dora = false;
  // PEFT's target_modules: module names matched as a whole name or a last dotted part, or
  // "all-linear"; empty: PEFT's default for the architecture.
  std::vector<std::string> targets;
  // QLoRA (--load_in_4bit): the frozen base's linear weights stored as NF4 (kernels/nf4.h), with
  // bitsandbytes' double quantization of the block scales when nf4_double_quant.
  bool nf4 = false;
  bool nf4_double_quant = false;
  // --load_in_8bit: bitsandbytes' Int8Params instead (row-wise int8 codes and absmax), in the same
  // storage (kernels/nf4.h's int8 format).
  bool int8 = false;
  bool quantized() const { return nf4 || int8; }
  // IA3's feedforward_modules (a subset of the targets) when feedforward_named; else PEFT's
  // default for the family.
  std::vector<std::string> feedforward;
  bool feedforward_named = false;
  bool ia3() const { return type == PeftType::ia3; }
  bool enabled() const { return r > 0 || ia3(); }
  float scale() const;
};

// gpt2: GPT2LMHeadModel. llama: the Llama-shaped decoders (RMSNorm, RoPE, SwiGLU, GQA);
// ModelConfig::model_type tells the families apart (llama, mistral, qwen2, qwen3, olmo2, phi3,
// gemma2, gemma3_text), which differ only in the options below.
enum class Arch { gpt2, llama };

// RoPE frequencies as transformers' modeling_rope_utils computes them (models/rope.cpp).
struct RopeScaling {
  std::string type = "default";  // default | linear | dynamic | yarn | llama3 | longrope ("su" read as longrope)
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int original_max_position = 0;  // llama3; yarn when given; longrope: config.json's top-level key (0: not given)
  double attention_factor = 0.0;  // yarn; 0: derived from factor / mscale
  double beta_fast = 32.0, beta_slow = 1.0;   // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek style), 0: unset
  bool truncate = true;                       // yarn
  // longrope (Phi-3): per-frequency divisors, (HS/2) each; long_factor for sequences longer than
  // original_max_position_embeddings, short_factor otherwise. attention_factor 0: derived.
  std::vector<double> short_factor, long_factor;
};

// Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE; models/config_moe.cpp): every layer's MLP is
// num_experts SwiGLU experts of width expert_ffn, top_k of them per token. The last two fields are
// run settings (--moe_capacity_factor, --router_z_loss_coef), not config.json keys.
struct MoeConfig {
  int num_experts = 0;           // num_local_experts (Mixtral) / num_experts (Qwen); 0: a dense model
  int top_k = 0;                 // num_experts_per_tok
  int expert_ffn = 0;            // intermediate_size (Mixtral) / moe_intermediate_size (Qwen)
  int shared_ffn = 0;            // shared_expert_intermediate_size (Qwen2-MoE); 0: none
  bool shared_gate = false;      // Qwen2-MoE: the shared expert's output times sigmoid(shared_expert_gate(x))
  bool norm_topk = true;         // top-k weights divided by their sum (Mixtral always; Qwen's norm_topk_prob)
  bool aux_loss = false;         // output_router_logits: the load-balancing loss joins the loss
  float aux_loss_coef = 0.f;     // router_aux_loss_coef
  double capacity_factor = 0.0;  // > 0: capacity-limited routing (overflowing tokens dropped); 0: dropless
  float z_loss_coef = 0.f;       // the router z-loss's weight; 0: none
  bool on() const { return num_experts > 0; }
};

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
  // Llama-family options (all off for GPT-2 and plain Llama):
  // config.json's model_type: gpt2 | llama | mistral | qwen2 | qwen3 | olmo2 | phi3 | gemma2 | gemma3_text
  std::string model_type = "gpt2";
  RopeScaling rope;           // rope_scaling
  bool qkv_bias = false;      // q/k/v projections have biases (Qwen2; Llama attention_bias)
  bool o_bias = false;        // o_proj has a bias (Llama attention_bias)
  bool mlp_bias = false;      // gate/up/down have biases (Llama mlp_bias)
  bool qk_norm = false;       // RMSNorm over each q and k head before RoPE (Qwen3)
  bool qk_norm_full = false;  // qk_norm over the whole q and k projections instead (OLMo-2)
  bool pre_norm = true;       // RMSNorm before attention and MLP (all but OLMo-2)
  bool post_norm = false;     // RMSNorm on attention's and the MLP's outputs before the residual add (OLMo-2)
  int sliding_window = 0;     // a query sees at most this many keys, itself included; 0: all
  // Gemma 3: which layers the window applies to (1: sliding, 0: global attention); empty: all.
  std::vector<uint8_t> sliding_layers;
  float rope_local_theta = 0.f;   // Gemma 3: the sliding layers' RoPE base (no scaling); 0: one table
  bool norm_unit_offset = false;  // Gemma: RMSNorms scale by (1 + weight), weights stored zero-centred
  bool embed_scale = false;       // Gemma: the token embeddings times sqrt(hidden_size)
  bool geglu = false;             // Gemma: MLP gelu_tanh(gate) * up instead of SwiGLU
  float attn_scale = 0.f;         // attention's score scale (Gemma: query_pre_attn_scalar^-1/2); 0: head_dim^-1/2
  // Gemma 2's soft-capping (attn_logit_softcapping, final_logit_softcapping): scores / logits
  // become c tanh(x / c); 0: none.
  float attn_softcap = 0.f, final_softcap = 0.f;
  MoeConfig moe;       // mixture of experts (mixtral, qwen2_moe, qwen3_moe); off for dense models
  nlohmann::json raw;  // the config.json as read, for writing back
  LoraSpec lora;       // not from config.json: the run's adapters (set by the caller)

  int qkv_dim() const { return (n_head + 2 * n_kv_head) * head_size; }
  const char* arch_name() const { return model_type.c_str(); }
  // Whether layer l attends through the sliding window (every layer when sliding_layers is empty).
  bool layer_slides(int l) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[size_t(l)] != 0);
  }
};

// The MoE families' keys (config_moe.cpp), after the Llama-family keys they share.
void parse_moe_config(const nlohmann::json& j, const std::string& mt, const std::string& where, ModelConfig* c);
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
