// cmd_merge.cpp: `ztrain merge-adapter`: a base HF folder plus a PEFT LoRA adapter folder written
// as one merged HF folder (PEFT's merge_and_unload + save_pretrained), the base's tokenizer and
// generation files copied beside it.
#include <cstdio>

#include "checkpoint/hf_model.h"
#include "checkpoint/peft_files.h"
#include "commands.h"
#include "core/error.h"
#include "flags.h"
#include "models/transformer.h"
#include "plan/memory_fit.h"

namespace zt::app {

int cmd_merge_adapter(const Args& args) {
  std::string base, adapter, out, dtype = "fp32";
  FlagSet f("merge-adapter");
  f.add("model_name_or_path", &base, "the base model's HF folder");
  f.add("adapter_name_or_path", &adapter, "the PEFT adapter folder, LoRA or IA3 (adapter_config.json + weights)");
  f.add("output_dir", &out, "where the merged HF folder goes");
  f.add("save_dtype", &dtype, "fp32 | bf16: the merged weights' dtype (fp32)");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(!base.empty() && !adapter.empty() && !out.empty(),
           "ztrain merge-adapter needs --model_name_or_path, --adapter_name_or_path and --output_dir");
  ZT_CHECK(dtype == "fp32" || dtype == "bf16", "--save_dtype ", dtype, " is not known; use fp32 or bf16");
  const ModelConfig cfg = config_from_file(base + "/config.json");
  parallel::check_memory_fits(parallel::inference_bytes(cfg, 1, 1), 1, "merging this adapter", "",
                              "use a machine with more memory");
  Transformer model(cfg);
  hf_load_weights(model, base);
  peft_merge_into(model, adapter);
  hf_save_model(model, out, dtype == "bf16" ? DType::bf16 : DType::f32);
  hf_write_side_files(out, hf_side_files(base));
  std::printf("Merged %s into %s: %s\n", adapter.c_str(), base.c_str(), out.c_str());
  return 0;
}

}  // namespace zt::app
