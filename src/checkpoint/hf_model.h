// hf_model.h: a Transformer's weights in Hugging Face's layout: model.safetensors under
// HF parameter names (F32 / BF16 / F16 in, F32 or BF16 out) beside config.json. The model
// itself does no file I/O (models sits below checkpoint in the layering); this is where
// its parameter table meets the file format.
#pragma once
#include <string>

#include "core/tensor.h"
#include "models/transformer.h"

namespace zt {

// Loads model.safetensors into the model's flat parameters; checks every name and shape.
void hf_load_weights(Transformer& model, const std::string& path);
// Writes config.json + model.safetensors into folder, tensors as dtype (f32 or bf16).
void hf_save_model(const Transformer& model, const std::string& folder, DType dtype);

}  // namespace zt
