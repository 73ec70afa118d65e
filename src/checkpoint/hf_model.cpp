// hf_model.cpp: see hf_model.h.
#include "checkpoint/hf_model.h"

#include <sys/stat.h>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace zt {

void hf_load_weights(Transformer& model, const std::string& path) {
  SafetensorsFile f(path);
  float* P = model.flat_params().as<float>();
  const ModelConfig& cfg = model.config();
  for (const ParamInfo& p : model.params().list()) {
    const StEntry* e = f.find(p.name);
    // GPT2Model checkpoints (e.g. the original "gpt2" upload) omit the "transformer." prefix.
    if (!e && p.name.rfind("transformer.", 0) == 0) e = f.find(p.name.substr(12));
    ZT_CHECK(e, path, ": tensor \"", p.name, "\" is missing; the weights do not match config.json (", cfg.arch_name(),
             ", ", cfg.n_layer, " layers)");
    ZT_CHECK(e->shape == p.shape, path, ": tensor \"", p.name, "\" has shape ", nlohmann::json(e->shape).dump(),
             " but config.json implies ", nlohmann::json(p.shape).dump());
    f.read_f32(*e, P + p.offset);
  }
}

void hf_save_model(const Transformer& model, const std::string& folder, DType dtype) {
  ::mkdir(folder.c_str(), 0755);
  const float* P = model.flat_params().as<const float>();
  std::vector<StTensorOut> out;
  for (const ParamInfo& p : model.params().list()) out.push_back({p.name, p.shape, P + p.offset});
  safetensors_write(folder + "/model.safetensors", out, dtype, {{"format", "pt"}});
  nlohmann::json cj = config_to_json(model.config(), dtype_name(dtype));
  write_file_atomic(folder + "/config.json", cj.dump(2) + "\n");
}

}  // namespace zt
