// params.h: the parameter table. Every parameter is a named view (HF name, shape,
// offset) into one flat fp32 buffer; gradients and optimizer state use the same
// offsets in their own flat buffers. Data-parallel buckets, ZeRO shards and checkpoints
// are byte ranges of these buffers, so the table is the single source of layout truth.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class ParamInit { normal, residual_normal, zeros, ones };

struct ParamInfo {
  std::string name;  // HF name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats
  int64_t numel = 0;
  ParamInit init = ParamInit::normal;
  // AdamW decay applies to tensors of rank >= 2 only (HF Trainer / nanoGPT convention).
  bool decay() const { return shape.size() >= 2; }
};

class ParamTable {
 public:
  // Appends a parameter right after the previous one (no padding, so tensors added in
  // sequence form one contiguous matrix, e.g. Llama's q/k/v projections).
  int64_t add(const std::string& name, std::vector<int64_t> shape, ParamInit init);
  const ParamInfo* find(const std::string& name) const;
  const std::vector<ParamInfo>& list() const { return params_; }
  int64_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
};

}  // namespace zt
