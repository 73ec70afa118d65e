// hf_model.h: a Transformer's weights in Hugging Face's layout: model.safetensors, or the
// shards a model.safetensors.index.json lists (save_pretrained's max_shard_size), under HF
// parameter names (F32 / BF16 / F16 in, F32 or BF16 out) beside config.json; and the files
// an HF model folder carries besides (tokenizer, generation config). The model itself does
// no file I/O (models sits below checkpoint in the layering); this is where its parameter
// table meets the file format.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/tensor.h"
#include "models/transformer.h"

namespace zt {

// HF's file names.
inline constexpr const char* kHfWeights = "model.safetensors";
inline constexpr const char* kHfWeightsIndex = "model.safetensors.index.json";

// Loads the weights into the model's flat parameters; checks every name and shape. `path` is
// a model folder (model.safetensors, else model.safetensors.index.json and its shards, as
// transformers picks them) or a .safetensors file. A missing shard or a tensor the index
// places in a file that lacks it is an Error naming both, raised before anything is read.
void hf_load_weights(Transformer& model, const std::string& path);

// The weights of an HF folder (or file), opened and checked as hf_load_weights does, read by flat
// range of a rank's own layout: a tensor-parallel rank's slices (vocabulary padding zero), a ZeRO
// shard. Only the elements asked for are converted, so no rank reads the whole model.
class HfWeights {
 public:
  HfWeights(const std::string& path, const ModelConfig& cfg);
  ~HfWeights();
  // Elements [begin, begin + n) of the flat layout of `table` into dst; every tensor touched is
  // checked by name and global shape (one error line naming it).
  void read(const ParamTable& table, int64_t begin, int64_t n, float* dst) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An HF folder's weights as a parameter source (models/param_provider.h) in `table`'s layout.
class HfParamSource final : public ParamSource {
 public:
  HfParamSource(const HfWeights& weights, const ParamTable& table) : weights_(weights), table_(table) {}
  void read(int64_t begin, int64_t n, float* dst) const override { weights_.read(table_, begin, n, dst); }

 private:
  const HfWeights& weights_;
  const ParamTable& table_;
};

// Opens the weights as hf_load_weights would (every shard present, the index consistent)
// without reading them: a run checks its model folder before it touches --output_dir.
void hf_check_weights(const std::string& path);

// The file that identifies a folder's weights (ranks compare it): model.safetensors, or the
// index of a sharded folder; "" when there is neither.
std::string hf_weights_file(const std::string& folder);

// save_pretrained's default max_shard_size, "5GB".
inline constexpr int64_t kHfDefaultShardBytes = 5'000'000'000;
// A size as transformers' max_shard_size reads it: bytes ("52428800"), decimal units
// ("50MB", "5GB", "10KB"), binary units ("50MiB", "2GiB", "64KiB"), or bits with a lower-case
// b ("400Mb" = 50 MB); case-insensitive otherwise. `flag` names the source in errors.
int64_t hf_parse_size(const std::string& text, const std::string& flag);

// Writes config.json + the weights into folder, tensors as dtype (f32 or bf16): one
// model.safetensors when they fit in max_shard_bytes, else model-0000i-of-0000N.safetensors
// shards cut as save_pretrained cuts them (in table order; a tensor that would overflow the
// current shard starts the next; one larger than the limit gets a shard of its own) and a
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}) listing every
// tensor once. Weight files of an earlier save that this one does not write are removed
// after it (so the folder never offers two sets).
void hf_save_model(const Transformer& model, const std::string& folder, DType dtype,
                   int64_t max_shard_bytes = kHfDefaultShardBytes);
// Which tensors (indices, by their bytes in the saved dtype) go into which weight file, in the
// order the files are written: save_pretrained's cut (a tensor larger than the limit gets a file of
// its own, listed before the file still filling, so the write order is not always table order).
std::vector<std::vector<size_t>> hf_shard_plan(const std::vector<int64_t>& bytes, int64_t max_shard_bytes);
// The same folder from the model's tensors in table order (HF names, global shapes), each with its
// data or a fill() that produces it when its turn comes (checkpoint/hf_export.h streams them so).
void hf_save_tensors(const ModelConfig& cfg, const std::vector<StTensorOut>& tensors, const std::string& folder,
                     DType dtype, int64_t max_shard_bytes = kHfDefaultShardBytes);

// Where an HF folder stores a model tensor (name, global shape): itself, or (Phi-3's qkv_proj,
// gate_up_proj) rows [row, row + shape[0]) of a fused tensor `name` of shape `shape`. ztrain keeps
// the parts (q / k / v, gate / up) back to back in its layouts; the reader splits the fused
// tensors, the writers fuse them again.
struct HfStored {
  std::string name;
  int64_t row = 0;
  std::vector<int64_t> shape;
};
HfStored hf_stored(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& shape);
// The reverse: the parts ztrain holds of a fused tensor `name` of shape `shape` (Phi-3's qkv_proj:
// q, k, v; gate_up_proj: gate, up), in row order, each {part name, first row, part shape};
// empty when `name` is not a fused tensor of this config (or its shape is not the fused one).
std::vector<HfStored> hf_parts(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& shape);
// The tensors as a folder stores them: each run of consecutive tensors that are the parts of
// one fused tensor, in order and complete, becomes it (its data when the parts lie back to back,
// else a fill() that copies them part after part); every other tensor stays as it is. counts
// (optional) gets, per output tensor, how many inputs it covers. An incomplete run is an error
// (strict: a model's whole table) or kept as its parts.
std::vector<StTensorOut> hf_fuse_tensors(const ModelConfig& cfg, const std::vector<StTensorOut>& tensors, bool strict,
                                         std::vector<size_t>* counts = nullptr);

// The non-weight files of an HF model folder that travel with its weights: the tokenizer
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json,
// tokenizer.model, vocab.json + merges.txt, GPT-2's encoder.json + vocab.bpe,
// chat_template.jinja) and generation_config.json. Those present in `folder`, as (name, bytes).
using HfSideFiles = std::vector<std::pair<std::string, std::string>>;
HfSideFiles hf_side_files(const std::string& folder);
// Writes them into folder, each atomically.
void hf_write_side_files(const std::string& folder, const HfSideFiles& files);

}  // namespace zt
