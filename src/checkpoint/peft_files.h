// peft_files.h: LoRA adapters in PEFT's folder format: adapter_config.json (LoraConfig's fields)
// and adapter_model.safetensors, whose keys are PEFT's (base_model.model.<module>.lora_A.weight
// (r, in), ....lora_B.weight (out, r)), which are the adapter table's names (models/lora.cpp). A
// folder written here loads with PeftModel.from_pretrained; one PEFT wrote loads here.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "models/config.h"
#include "models/transformer.h"

namespace zt {

inline constexpr const char* kAdapterWeights = "adapter_model.safetensors";
inline constexpr const char* kAdapterConfig = "adapter_config.json";

// adapter_config.json for cfg.lora (targets as PEFT stores them), base_model_name_or_path = base.
nlohmann::ordered_json peft_adapter_config(const ModelConfig& cfg, const std::string& base);
// Writes the adapters (tensors in the adapter table's names, fp32) and adapter_config.json into folder.
void peft_save_adapters(const ModelConfig& cfg, const std::vector<StTensorOut>& tensors, const std::string& folder,
                        const std::string& base);
// The LoraSpec of an adapter folder's adapter_config.json; an Error naming the field for what
// ztrain cannot honour (another peft_type, DoRA, trained biases, modules_to_save, per-layer ranks).
LoraSpec peft_read_config(const std::string& folder);
// The folder's adapter weights file (an Error naming the folder when it has none).
std::string peft_weights_file(const std::string& folder);
// An adapter_config.json the model cannot take, as one error: the file, the reason, and (when a
// target module does not exist here) that the adapter was made for another model.
Error peft_config_error(const std::string& folder, const Error& why);
// Checks an adapter folder's tensors against cfg (cfg.lora its settings): every name the settings
// give this base present with its shape, no other; an Error naming the tensor and both shapes.
void peft_check_adapter(const ModelConfig& cfg, const std::string& folder);
// Adds each adapter's scale B A into the weights of `model` (a model without adapters whose
// config matches the base): merge_and_unload. Shapes are checked against the base (an Error
// naming the tensor and both shapes).
void peft_merge_into(Transformer& model, const std::string& adapter_folder);

}  // namespace zt
