// muon.cpp: see muon.h.
#include "optim/muon.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/convert.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "optim/adamw.h"

namespace zt::optim {

namespace {
constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
}

void newton_schulz(const float* g, int64_t rows, int64_t cols, int ns_steps, DType dtype, float* out) {
  // Iterate on the wide orientation X (r x c, r <= c): the Gram matrix X X^T is the small one.
  // (One oneDNN batched matmul over same-shaped matrices measured slower than these small GEMMs
  // one by one on the quickstart's shapes, so there is no batched form.)
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;
  std::vector<float> x(size_t(r * c)), gram(size_t(r * r)), poly(size_t(r * r)), next(size_t(r * c));
  double sq = 0.0;
  for (int64_t i = 0; i < rows * cols; ++i) sq += double(g[i]) * g[i];
  const float inv = 1.0f / std::max(float(std::sqrt(sq)), 1e-7f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[size_t(tall ? j * c + i : i * c + j)] = g[i * cols + j] * inv;
  const bool bf16 = dtype == DType::bf16;
  std::vector<uint16_t> xl(bf16 ? x.size() : 0), gl(bf16 ? gram.size() : 0), pl(bf16 ? poly.size() : 0);
  // The operands in the iteration's dtype (bf16: rounded to nearest, as X.bfloat16() is).
  auto low = [&](const std::vector<float>& v, std::vector<uint16_t>& l) -> const void* {
    if (!bf16) return v.data();
    kernels::to_lowp(DType::bf16, l.data(), v.data(), int64_t(v.size()));
    return l.data();
  };
  for (int k = 0; k < ns_steps; ++k) {
    const void* xa = low(x, xl);
    kernels::gemm_typed(dtype, false, true, r, r, c, 1.0f, xa, c, xa, c, 0.0f, gram.data(), r);  // A = X X^T
    const void* ga = low(gram, gl);
    std::memcpy(poly.data(), gram.data(), poly.size() * sizeof(float));  // B = b A + c A A
    kernels::gemm_typed(dtype, false, false, r, r, r, kC, ga, r, ga, r, kB, poly.data(), r);
    const void* pa = low(poly, pl);
    std::memcpy(next.data(), x.data(), x.size() * sizeof(float));  // X = a X + B X
    kernels::gemm_typed(dtype, false, false, r, c, r, 1.0f, pa, r, xa, c, kA, next.data(), c);
    std::swap(x, next);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = x[size_t(tall ? j * c + i : i * c + j)];
}

Muon::Muon(const OptimizerConfig& cfg, int64_t numel)
    : Optimizer("muon", cfg, numel, {}),
      mu_(arg("momentum", 0.95)),
      nesterov_(arg_flag("nesterov", true)),
      ns_steps_(int(arg("ns_steps", 5))),
      match_rms_(true),
      ns_dtype_(DType::f32) {
  refuse_unknown_args({"momentum", "nesterov", "ns_steps", "adjust_lr_fn", "ns_dtype"});
  ZT_CHECK(mu_ >= 0.0 && mu_ < 1.0, "--optim_args momentum=", mu_, " must be in [0, 1) (muon)");
  ZT_CHECK(ns_steps_ >= 1 && ns_steps_ <= 100, "--optim_args ns_steps must be in 1..100 (muon)");
  const std::string fn = arg_text("adjust_lr_fn", "match_rms_adamw");
  ZT_CHECK(fn == "match_rms_adamw" || fn == "original", "--optim_args adjust_lr_fn=", quote(fn),
           " is not known; use match_rms_adamw (Moonlight's, the default) or original (Keller Jordan's)");
  match_rms_ = fn == "match_rms_adamw";
  const std::string d = arg_text("ns_dtype", "auto");
  ZT_CHECK(d == "auto" || d == "bf16" || d == "fp32", "--optim_args ns_dtype=", quote(d),
           " must be auto, bf16 or fp32");
  ns_dtype_ = d == "bf16" || (d == "auto" && kernels::isa_bf16_dot()) ? DType::bf16 : DType::f32;
  ZT_CHECK(cfg.state_dtype == DType::f32, "--optim_state_dtype bf16 is not supported by muon yet; use fp32");
}

void Muon::on_layout() {
  const std::vector<TensorInfo>& ts = layout().tensors;
  for (const StepPiece& p : layout().pieces)
    ZT_ASSERT(p.tensor >= 0 && size_t(p.tensor) < ts.size(), "muon needs per-tensor pieces");
  momentum_ = PackedState(
      layout().pieces, [&](const StepPiece& p) { return hidden(p); }, 1, DType::f32);
  adam_ = PackedState(
      layout().pieces, [&](const StepPiece& p) { return !hidden(p); }, 2, DType::f32);
  hidden_at_.assign(ts.size(), -1);
  hidden_total_ = 0;
  if (!layout().group_sum) return;
  for (size_t t = 0; t < ts.size(); ++t)
    if (ts[t].hidden) {
      hidden_at_[t] = hidden_total_;
      hidden_total_ += ts[t].numel();
    }
}

// The momentum update and the (Nesterov) direction of a hidden piece, into out (numel).
void Muon::direction(const StepPiece& r, float* out) {
  float* b = momentum_.f32(0) + momentum_.at(r.state_offset);
  const float mu = float(mu_), one_minus = float(1.0 - mu_);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < r.numel; ++i) {
    b[i] = b[i] * mu + r.grads[i] * one_minus;
    out[i] = nesterov_ ? r.grads[i] + mu * (b[i] - r.grads[i]) : b[i];
  }
}

void Muon::apply(const StepPiece& r, const float* ortho, double lr) {
  const TensorInfo& ti = layout().tensors[size_t(r.tensor)];
  const double m = double(ti.rows), n = double(ti.cols);
  const double scale = match_rms_ ? 0.2 * std::sqrt(std::max(m, n)) : std::sqrt(std::max(1.0, m / n));
  const float decay = r.decay ? float(1.0 - lr * config().weight_decay) : 1.0f, step = float(lr * scale);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < r.numel; ++i) r.params[i] = r.params[i] * decay - step * ortho[i];
}

void Muon::step(std::span<const StepPiece> pieces, double lr) {
  ++t_;
  for (const StepPiece& r : pieces)
    if (!hidden(r))
      adamw_update(config(), t_, lr, r, adam_.f32(0) + adam_.at(r.state_offset),
                   adam_.f32(1) + adam_.at(r.state_offset));
  const std::vector<TensorInfo>& ts = layout().tensors;
  if (!layout().group_sum) {  // whole tensors: each one's direction, orthogonalised in place
    std::vector<const StepPiece*> hidden_pieces;
    int64_t total = 0;
    for (const StepPiece& r : pieces)
      if (hidden(r)) {
        const TensorInfo& ti = ts[size_t(r.tensor)];
        ZT_ASSERT(r.tensor_begin == 0 && r.numel == ti.numel(), "muon: a hidden matrix cut without a group sum");
        hidden_pieces.push_back(&r);
        total += r.numel;
      }
    work_.resize(size_t(total));
    std::vector<float*> at;
    int64_t offset = 0;
    for (const StepPiece* r : hidden_pieces) {
      at.push_back(work_.data() + offset);
      offset += r->numel;
      direction(*r, at.back());
    }
    orthogonalise(hidden_pieces, at, at);
    for (size_t i = 0; i < hidden_pieces.size(); ++i) apply(*hidden_pieces[i], at[i], lr);
    return;
  }
  // ZeRO: assemble every hidden matrix's direction over the group, orthogonalise the ones whose
  // first element this rank holds, and share the results the same way.
  ZT_ASSERT(pieces.size() == layout().pieces.size(), "muon steps all its pieces at once under ZeRO");
  work_.assign(size_t(hidden_total_), 0.f);
  ortho_.assign(size_t(hidden_total_), 0.f);
  for (const StepPiece& r : pieces)
    if (hidden(r)) direction(r, work_.data() + hidden_at_[size_t(r.tensor)] + r.tensor_begin);
  layout().group_sum(work_.data(), hidden_total_);
  std::vector<const StepPiece*> owned;
  std::vector<float*> from, to;
  for (const StepPiece& r : pieces)
    if (hidden(r) && r.tensor_begin == 0) {
      owned.push_back(&r);
      from.push_back(work_.data() + hidden_at_[size_t(r.tensor)]);
      to.push_back(ortho_.data() + hidden_at_[size_t(r.tensor)]);
    }
  orthogonalise(owned, from, to);
  layout().group_sum(ortho_.data(), hidden_total_);
  for (const StepPiece& r : pieces)
    if (hidden(r)) apply(r, ortho_.data() + hidden_at_[size_t(r.tensor)] + r.tensor_begin, lr);
}

// Newton-Schulz for each of the pieces' whole matrices (from[i] -> to[i], which may be the same).
void Muon::orthogonalise(const std::vector<const StepPiece*>& ps, const std::vector<float*>& from,
                         const std::vector<float*>& to) {
  const std::vector<TensorInfo>& ts = layout().tensors;
  // Matrices over the threads, each one's small GEMMs on one thread: a 128 x 344 product split
  // over cores costs more in synchronisation than it saves.
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < ps.size(); ++i) {
    const TensorInfo& ti = ts[size_t(ps[i]->tensor)];
    newton_schulz(from[i], ti.rows, ti.cols, ns_steps_, ns_dtype_, to[i]);
  }
}

void Muon::for_each_state(int64_t offset, int64_t n, int, const std::function<void(void*, size_t)>& f) {
  if (momentum_.at(offset) >= 0) f(momentum_.f32(0) + momentum_.at(offset), size_t(n) * sizeof(float));
  if (adam_.at(offset) >= 0)
    for (int s = 0; s < 2; ++s) f(adam_.f32(s) + adam_.at(offset), size_t(n) * sizeof(float));
}

void Muon::save_own(StateWriter& w) const {
  for (const StateSpan& sp : state_spans()) {
    const int64_t mb = momentum_.at(sp.state_offset);
    if (mb >= 0) {
      w.put_tensor({sp.tensor, sp.shape, "momentum_buffer", {sp.begin, sp.count}, momentum_.f32(0) + mb});
      continue;
    }
    const int64_t a = adam_.at(sp.state_offset);
    w.put_tensor({sp.tensor, sp.shape, "exp_avg", {sp.begin, sp.count}, adam_.f32(0) + a});
    w.put_tensor({sp.tensor, sp.shape, "exp_avg_sq", {sp.begin, sp.count}, adam_.f32(1) + a});
  }
}

void Muon::load_own(StateReader& r) {
  for (const StateSpan& sp : state_spans()) {
    const int64_t mb = momentum_.at(sp.state_offset);
    if (mb >= 0) {
      r.get_tensor({sp.tensor, sp.shape, "momentum_buffer", {sp.begin, sp.count}, momentum_.f32(0) + mb});
      continue;
    }
    const int64_t a = adam_.at(sp.state_offset);
    r.get_tensor({sp.tensor, sp.shape, "exp_avg", {sp.begin, sp.count}, adam_.f32(0) + a});
    r.get_tensor({sp.tensor, sp.shape, "exp_avg_sq", {sp.begin, sp.count}, adam_.f32(1) + a});
  }
}

}  // namespace zt::optim
