// peft_args.cpp: see peft_args.h.
#include "peft_args.h"

#include <cmath>

#include "checkpoint/peft_files.h"
#include "core/error.h"
#include "models/layout.h"

namespace zt {

std::vector<std::string> split_modules(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text + ",") {
    if (ch == ',' || ch == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

namespace {
const char* kLoraFlags[] = {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "use_rslora"};

// The adapter folder's settings win; a flag given with another value is a contradiction.
void check_agrees(const TrainArgs& a, const LoraSpec& s, const std::string& folder) {
  auto given = [&](const char* f) { return a.explicit_flags.count(f) > 0; };
  auto clash = [&](const char* f, const std::string& flag, const std::string& file) {
    throw Error("--" + std::string(f) + " " + flag + " disagrees with " + folder + "/adapter_config.json (" + file +
                "); drop the flag (the adapter's settings apply)");
  };
  if (given("lora_r") && a.lora_r != s.r) clash("lora_r", std::to_string(a.lora_r), std::to_string(s.r));
  if (given("lora_alpha") && std::fabs(a.lora_alpha - s.alpha) > 1e-6)
    clash("lora_alpha", std::to_string(a.lora_alpha), std::to_string(s.alpha));
  if (given("use_rslora") && a.use_rslora != s.rslora) clash("use_rslora", a.use_rslora ? "true" : "false", "");
  if (given("use_dora") && a.use_dora != s.dora) clash("use_dora", a.use_dora ? "true" : "false", "its use_dora");
  if (given("lora_target_modules") && split_modules(a.lora_target_modules) != s.targets)
    clash("lora_target_modules", a.lora_target_modules, "its target_modules");
}
}  // namespace

namespace {
// QLoRA's flags (transformers' BitsAndBytesConfig names).
void check_quant_flags(const TrainArgs& a, bool peft) {
  ZT_CHECK(!a.load_in_8bit || !a.load_in_4bit, "--load_in_8bit and --load_in_4bit: pick one");
  ZT_CHECK(!a.load_in_8bit || peft,
           "--load_in_8bit quantizes the frozen base of LoRA training; add --use_peft (a quantized base cannot be "
           "trained itself)");
  if (!a.load_in_4bit) {
    for (const char* f : {"bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype"})
      ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to a 4-bit base; add --load_in_4bit");
    return;
  }
  ZT_CHECK(peft,
           "--load_in_4bit quantizes the frozen base of LoRA training; add --use_peft (a quantized base "
           "cannot be trained itself)");
  ZT_CHECK(a.bnb_4bit_quant_type == "nf4", "--bnb_4bit_quant_type ", a.bnb_4bit_quant_type,
           " is not supported; ztrain's 4-bit base is nf4");
  const std::string& c = a.bnb_4bit_compute_dtype;
  const std::string run = a.bf16 ? "bfloat16" : a.fp16 ? "float16" : "float32";
  ZT_CHECK(
      c.empty() || c == run || (c == "bf16" && a.bf16) || (c == "fp32" && run == "float32") || (c == "fp16" && a.fp16),
      "--bnb_4bit_compute_dtype ", c, " differs from the run's GEMM dtype (", run,
      "); the base's GEMMs run in the run's precision: pass ", c == "bfloat16" ? "--bf16" : "the matching flag",
      " or drop --bnb_4bit_compute_dtype");
}
}  // namespace

void check_peft_flags(const TrainArgs& a) {
  check_quant_flags(a, a.use_peft || !a.adapter_name_or_path.empty());
  if (!a.use_peft && a.adapter_name_or_path.empty()) {
    for (const char* f : kLoraFlags)
      ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to LoRA adapters; add --use_peft");
    for (const char* f : {"peft_type", "target_modules", "feedforward_modules"})
      ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to PEFT adapters; add --use_peft");
    ZT_CHECK(!a.use_dora, "--use_dora applies to LoRA adapters; add --use_peft");
    return;
  }
  ZT_CHECK(a.peft_type == "lora" || a.peft_type == "ia3", "--peft_type ", a.peft_type,
           " is not supported; ztrain trains lora and ia3 adapters");
  if (a.peft_type == "ia3") {
    for (const char* f : kLoraFlags)
      ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to LoRA adapters, not --peft_type ia3",
               std::string(f) == "lora_target_modules" ? "; IA3 takes --target_modules" : "");
    ZT_CHECK(!a.use_dora, "--use_dora applies to LoRA adapters, not --peft_type ia3");
  } else {
    for (const char* f : {"target_modules", "feedforward_modules"})
      ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to --peft_type ia3",
               std::string(f) == "target_modules" ? "; LoRA takes --lora_target_modules" : "");
  }
  ZT_CHECK(!a.adapter_name_or_path.empty() || a.peft_type == "ia3" || a.lora_r >= 1, "--lora_r ", a.lora_r,
           ": the adapters' rank must be at least 1");
}

void apply_peft_args(const TrainArgs& a, ModelConfig& cfg) {
  const bool adapter = !a.adapter_name_or_path.empty();
  if (!a.use_peft && !adapter) return;
  LoraSpec s;
  if (adapter) {
    s = peft_read_config(a.adapter_name_or_path);
    ZT_CHECK(!a.explicit_flags.count("peft_type") || a.peft_type == (s.ia3() ? "ia3" : "lora"), "--peft_type ",
             a.peft_type, " disagrees with ", a.adapter_name_or_path, "/adapter_config.json (peft_type ",
             s.ia3() ? "IA3" : "LORA", "); drop the flag");
    if (s.ia3()) {
      for (const char* f : kLoraFlags)
        ZT_CHECK(!a.explicit_flags.count(f), "--", f, " applies to LoRA adapters; ", a.adapter_name_or_path,
                 " holds IA3 vectors");
      ZT_CHECK(!a.explicit_flags.count("target_modules") && !a.explicit_flags.count("feedforward_modules"),
               "--target_modules / --feedforward_modules: ", a.adapter_name_or_path,
               "/adapter_config.json sets them; drop the flags");
    } else {
      check_agrees(a, s, a.adapter_name_or_path);
      s.dropout = a.lora_dropout;  // training's dropout is the run's choice, as PEFT's is_trainable load
    }
  } else if (a.peft_type == "ia3") {
    s.type = PeftType::ia3;
    s.targets = split_modules(a.target_modules);
    s.feedforward = split_modules(a.feedforward_modules);
    s.feedforward_named = a.explicit_flags.count("feedforward_modules") > 0;
  } else {
    s.r = a.lora_r;
    s.alpha = a.lora_alpha;
    s.dropout = a.lora_dropout;
    s.rslora = a.use_rslora;
    s.dora = a.use_dora;
    s.targets = split_modules(a.lora_target_modules);
  }
  s.nf4 = a.load_in_4bit;
  s.int8 = a.load_in_8bit;
  s.nf4_double_quant = a.bnb_4bit_use_double_quant;
  cfg.lora = s;
  if (!adapter) {
    lora_resolve_targets(cfg);  // an unknown target fails here, naming the valid ones
    if (s.ia3()) ia3_feedforward_modules(cfg);
    return;
  }
  try {
    lora_resolve_targets(cfg);
    if (s.ia3()) ia3_feedforward_modules(cfg);
  } catch (const Error& e) {
    throw peft_config_error(a.adapter_name_or_path, e);
  }
  peft_check_adapter(cfg, a.adapter_name_or_path);
}

}  // namespace zt
