// optimizer.cpp: see optimizer.h. The slot storage, checkpoint pieces and the factory;
// the arithmetic lives in each optimizer's own file (adamw.cpp).
#include "optim/optimizer.h"

#include "core/error.h"
#include "optim/adamw.h"

namespace zt::optim {

std::vector<StepPiece> flat_pieces(float* params, const float* grads, const std::vector<ParamRange>& ranges) {
  std::vector<StepPiece> pieces;
  pieces.reserve(ranges.size());
  for (const ParamRange& r : ranges)
    pieces.push_back({params + r.offset, grads + r.offset, r.offset, r.numel, r.decay});
  return pieces;
}

Optimizer::Optimizer(std::string name, const OptimizerConfig& cfg, int64_t numel, std::vector<std::string> slot_names)
    : name_(std::move(name)), cfg_(cfg), numel_(numel), slot_names_(std::move(slot_names)) {
  for (size_t i = 0; i < slot_names_.size(); ++i)
    slots_.emplace_back(size_t(numel) * sizeof(float), MemCategory::optimizer_state);
}

float* Optimizer::slot(const std::string& name) const {
  for (size_t i = 0; i < slot_names_.size(); ++i)
    if (slot_names_[i] == name) return slot(i);
  ZT_ASSERT(false, "optimizer ", name_, " has no state slot ", name);
  return nullptr;
}

void Optimizer::save_state(StateWriter& w) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    for (const StateSpan& sp : spans_)
      w.put_tensor({sp.tensor, sp.shape, slot_names_[s], {sp.begin, sp.count}, slot(s) + sp.state_offset});
  // The hyper-parameters are recorded, not restored: a resumed run uses its own flags.
  w.put_json(
      "ztrain.optimizer",
      {{"name", name_},
       {"step", t_},
       {"slots", slot_names_},
       {"config",
        {{"beta1", cfg_.beta1}, {"beta2", cfg_.beta2}, {"eps", cfg_.eps}, {"weight_decay", cfg_.weight_decay}}}});
}

void Optimizer::load_state(StateReader& r) {
  const std::string saved = r.get_string("ztrain.optimizer.name");
  ZT_CHECK(saved == name_, r.source(), ": the checkpoint holds the state of --optim ", quote(saved), ", this run uses ",
           quote(name_), "; resume with --optim ", saved);
  const int64_t t = r.get_int("ztrain.optimizer.step");
  ZT_CHECK(t >= 0, r.source(), ": \"ztrain.optimizer.step\" is negative; the checkpoint is damaged");
  for (size_t s = 0; s < slots_.size(); ++s)
    for (const StateSpan& sp : spans_)
      r.get_tensor({sp.tensor, sp.shape, slot_names_[s], {sp.begin, sp.count}, slot(s) + sp.state_offset});
  t_ = t;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerConfig& cfg, int64_t numel) {
  // HF's --optim names; an alias makes the canonical name, which checkpoints record.
  if (name == "adamw_torch" || name == "adamw") return std::make_unique<AdamW>(cfg, numel, "adamw_torch");
  throw Error(
      str_cat("--optim ", quote(name), " is not supported; use adamw_torch (HF's default) or adamw (the same)"));
}

int64_t optimizer_state_bytes_per_param(const std::string& name) {
  return make_optimizer(name, OptimizerConfig{}, 0)->state_bytes_per_param();
}

}  // namespace zt::optim
