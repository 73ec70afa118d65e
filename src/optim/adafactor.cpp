// adafactor.cpp: see adafactor.h.
#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <omp.h>

#include "core/error.h"

namespace zt::optim {

Adafactor::Adafactor(const OptimizerConfig& cfg, int64_t numel)
    : Optimizer("adafactor", cfg, numel, {}),
      scale_parameter_(arg_flag("scale_parameter", false)),
      relative_step_(arg_flag("relative_step", false)),
      warmup_init_(arg_flag("warmup_init", false)),
      clip_threshold_(arg("clip_threshold", 1.0)),
      decay_rate_(arg("decay_rate", -0.8)),
      beta1_(arg("beta1", -1.0)),
      eps1_(arg("eps1", 1e-30)),
      eps2_(arg("eps2", 1e-3)) {
  refuse_unknown_args(
      {"scale_parameter", "relative_step", "warmup_init", "clip_threshold", "decay_rate", "beta1", "eps1", "eps2"});
  ZT_CHECK(!warmup_init_ || relative_step_, "--optim_args warmup_init=true needs relative_step=true (adafactor)");
  ZT_CHECK(!first_moment(cfg) || (beta1_ >= 0.0 && beta1_ < 1.0), "--optim_args beta1=", beta1_,
           " must be in [0, 1) (adafactor)");
  ZT_CHECK(clip_threshold_ > 0.0, "--optim_args clip_threshold must be > 0 (adafactor)");
  ZT_CHECK(cfg.state_dtype == DType::f32, "--optim_state_dtype bf16 is not supported by adafactor (its state is tiny)");
}

void Adafactor::on_layout() {
  const std::vector<TensorInfo>& ts = layout().tensors;
  tensors_.assign(ts.size(), Tensor{});
  for (const StepPiece& p : layout().pieces) {
    ZT_ASSERT(p.tensor >= 0 && size_t(p.tensor) < ts.size(), "adafactor needs per-tensor pieces");
    tensors_[size_t(p.tensor)].held = true;
  }
  int64_t s = 0, rows = 0, cols = 0;
  for (size_t t = 0; t < ts.size(); ++t) {
    Tensor& k = tensors_[t];
    k.sums = s;
    if (ts[t].matrix) s += ts[t].rows + ts[t].cols;
    k.sq = s++;
    if (ts[t].matrix && k.held) {
      k.row_state = rows;
      k.col_state = cols;
      rows += ts[t].rows;
      cols += ts[t].cols;
    }
  }
  sums_.assign(size_t(s), 0.f);
  sq_.assign(ts.size(), 0.f);
  rms_.assign(ts.size(), 0.0);
  rows_.assign(size_t(rows), 0.f);
  cols_.assign(size_t(cols), 0.f);
  rfac_.assign(size_t(rows), 0.f);
  cfac_.assign(size_t(cols), 0.f);
  v_ = PackedState(
      layout().pieces, [&](const StepPiece& p) { return !ts[size_t(p.tensor)].matrix; }, 1, DType::f32);
  if (beta1_ >= 0.0)
    m_ = PackedState(
        layout().pieces, [](const StepPiece&) { return true; }, 1, DType::f32);
}

int64_t Adafactor::own_state_bytes() const {
  return int64_t((rows_.size() + cols_.size()) * sizeof(float)) + v_.bytes() + m_.bytes();
}

namespace {

// The piece's elements row by row: f(row, c0, c1, at) for columns [c0, c1) of `row`, which are the
// piece's elements [at, at + c1 - c0). Rows run in parallel (each row belongs to one call).
template <class F>
void for_each_row(const StepPiece& r, int64_t cols, F&& f) {
  const int64_t first = r.tensor_begin / cols, last = (r.tensor_begin + r.numel - 1) / cols;
#pragma omp parallel for schedule(static)
  for (int64_t row = first; row <= last; ++row) {
    const int64_t c0 = row == first ? r.tensor_begin % cols : 0;
    const int64_t c1 = row == last ? (r.tensor_begin + r.numel - 1) % cols + 1 : cols;
    f(row, c0, c1, row * cols + c0 - r.tensor_begin);
  }
}

}  // namespace

// Row and column sums of g^2 + eps1 (matrices) and the sum of p^2 of the piece's tensor.
void Adafactor::accumulate(const StepPiece& r) {
  const TensorInfo& ti = layout().tensors[size_t(r.tensor)];
  const Tensor& k = tensors_[size_t(r.tensor)];
  double psq = 0.0;
#pragma omp parallel for simd reduction(+ : psq)
  for (int64_t i = 0; i < r.numel; ++i) psq += double(r.params[i]) * r.params[i];
  sums_[size_t(k.sq)] += float(psq);
  if (!ti.matrix) return;
  float* row = sums_.data() + k.sums;
  float* col = row + ti.rows;
  const float e1 = float(eps1_);
  // Column sums per thread, then added: each thread's rows touch every column.
  const int threads = omp_get_max_threads();
  col_scratch_.assign(size_t(threads) * size_t(ti.cols), 0.0);
  for_each_row(r, ti.cols, [&](int64_t i, int64_t c0, int64_t c1, int64_t at) {
    double* mine = col_scratch_.data() + size_t(omp_get_thread_num()) * size_t(ti.cols);
    const float* g = r.grads + at - c0;
    double s = 0.0;
    for (int64_t c = c0; c < c1; ++c) {
      const double u = double(g[c] * g[c] + e1);
      s += u;
      mine[c] += u;
    }
    row[i] += float(s);
  });
  for (int t = 0; t < threads; ++t)
    for (int64_t c = 0; c < ti.cols; ++c) col[c] += float(col_scratch_[size_t(t) * size_t(ti.cols) + size_t(c)]);
}

void Adafactor::update_factors(double beta2t) {
  const std::vector<TensorInfo>& ts = layout().tensors;
  const float b = float(beta2t), a = float(1.0 - beta2t);
  for (size_t t = 0; t < ts.size(); ++t) {
    const Tensor& k = tensors_[t];
    rms_[t] = std::sqrt(double(sums_[size_t(k.sq)]) / double(ts[t].numel()));
    if (k.row_state < 0) continue;
    const float* rs = sums_.data() + k.sums;
    const float* cs = rs + ts[t].rows;
    float* row = rows_.data() + k.row_state;
    float* col = cols_.data() + k.col_state;
    for (int64_t i = 0; i < ts[t].rows; ++i) row[i] = row[i] * b + rs[i] / float(ts[t].cols) * a;
    for (int64_t j = 0; j < ts[t].cols; ++j) col[j] = col[j] * b + cs[j] / float(ts[t].rows) * a;
    // The factors of v_hat^-1/2 = (row / mean(row))^-1/2 (col)^-1/2, kept for the step's passes.
    double mean = 0.0;
    for (int64_t i = 0; i < ts[t].rows; ++i) mean += row[i];
    const float row_mean = float(mean / double(ts[t].rows));
    float* rf = rfac_.data() + k.row_state;
    float* cf = cfac_.data() + k.col_state;
    for (int64_t i = 0; i < ts[t].rows; ++i) rf[i] = 1.0f / std::sqrt(row[i] / row_mean);
    for (int64_t j = 0; j < ts[t].cols; ++j) cf[j] = 1.0f / std::sqrt(col[j]);
  }
}

// f(i, u) for each element of the piece with its unscaled update u = g / sqrt(v_hat), in parallel
// (f must only touch element i, or reduce through thread-safe means).
template <class F>
void Adafactor::for_each_update(const StepPiece& r, F&& f) const {
  const TensorInfo& ti = layout().tensors[size_t(r.tensor)];
  const Tensor& k = tensors_[size_t(r.tensor)];
  if (!ti.matrix) {
    const float* v = v_.f32(0) + v_.at(r.state_offset);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < r.numel; ++i) f(i, r.grads[i] / std::sqrt(v[i]));
    return;
  }
  const float* rf = rfac_.data() + k.row_state;
  const float* cf = cfac_.data() + k.col_state;
  for_each_row(r, ti.cols, [&](int64_t row, int64_t c0, int64_t c1, int64_t at) {
    for (int64_t c = c0; c < c1; ++c) f(at + c - c0, r.grads[at + c - c0] * rf[row] * cf[c]);
  });
}

// The sum of squares of the piece's unscaled update.
double Adafactor::update_sq(const StepPiece& r) const {
  const TensorInfo& ti = layout().tensors[size_t(r.tensor)];
  const Tensor& k = tensors_[size_t(r.tensor)];
  double s = 0.0;
  if (!ti.matrix) {
    const float* v = v_.f32(0) + v_.at(r.state_offset);
#pragma omp parallel for simd reduction(+ : s)
    for (int64_t i = 0; i < r.numel; ++i) {
      const float u = r.grads[i] / std::sqrt(v[i]);
      s += double(u) * u;
    }
    return s;
  }
  const float* rf = rfac_.data() + k.row_state;
  const float* cf = cfac_.data() + k.col_state;
  const int64_t first = r.tensor_begin / ti.cols, last = (r.tensor_begin + r.numel - 1) / ti.cols;
#pragma omp parallel for schedule(static) reduction(+ : s)
  for (int64_t row = first; row <= last; ++row) {
    const int64_t c0 = row == first ? r.tensor_begin % ti.cols : 0;
    const int64_t c1 = row == last ? (r.tensor_begin + r.numel - 1) % ti.cols + 1 : ti.cols;
    const float* g = r.grads + row * ti.cols - r.tensor_begin;
    for (int64_t c = c0; c < c1; ++c) {
      const float u = g[c] * rf[row] * cf[c];
      s += double(u) * u;
    }
  }
  return s;
}

double Adafactor::step_size(double lr, const Tensor& k) const {
  double rel = lr;
  if (relative_step_) rel = std::min(warmup_init_ ? 1e-6 * double(t_) : 1e-2, 1.0 / std::sqrt(double(t_)));
  const double scale = scale_parameter_ ? std::max(eps2_, rms_[size_t(&k - tensors_.data())]) : 1.0;
  return scale * rel;
}

void Adafactor::step(std::span<const StepPiece> pieces, double lr) {
  ZT_ASSERT(pieces.size() == layout().pieces.size(), "adafactor steps all its pieces at once");
  ++t_;
  const double beta2t = 1.0 - std::pow(double(t_), decay_rate_);
  std::fill(sums_.begin(), sums_.end(), 0.f);
  for (const StepPiece& r : pieces) accumulate(r);
  if (layout().group_sum) layout().group_sum(sums_.data(), int64_t(sums_.size()));
  update_factors(beta2t);
  // The non-factored moments, then every update's sum of squares (for its RMS clipping).
  std::fill(sq_.begin(), sq_.end(), 0.f);
  const float b = float(beta2t), a = float(1.0 - beta2t), e1 = float(eps1_);
  for (const StepPiece& r : pieces) {
    if (!layout().tensors[size_t(r.tensor)].matrix) {
      float* v = v_.f32(0) + v_.at(r.state_offset);
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < r.numel; ++i) v[i] = v[i] * b + (r.grads[i] * r.grads[i] + e1) * a;
    }
    sq_[size_t(r.tensor)] += float(update_sq(r));
  }
  if (layout().group_sum) layout().group_sum(sq_.data(), int64_t(sq_.size()));
  const float b1 = float(beta1_), c1 = float(1.0 - beta1_);
  for (const StepPiece& r : pieces) {
    const TensorInfo& ti = layout().tensors[size_t(r.tensor)];
    const Tensor& k = tensors_[size_t(r.tensor)];
    const double lr_t = step_size(lr, k);
    const float rms = std::sqrt(sq_[size_t(r.tensor)] / float(ti.numel()));
    const float denom = std::max(rms / float(clip_threshold_), 1.0f), step = float(lr_t);
    const float decay = r.decay ? float(-config().weight_decay * lr_t) : 0.f;
    float* m = beta1_ >= 0.0 ? m_.f32(0) + m_.at(r.state_offset) : nullptr;
    float* p = r.params;
    for_each_update(r, [&](int64_t i, float u) {
      float upd = u / denom * step;
      if (m) upd = m[i] = m[i] * b1 + upd * c1;
      p[i] = p[i] + decay * p[i];
      p[i] -= upd;
    });
  }
}

void Adafactor::for_each_state(int64_t offset, int64_t n, int tensor, const std::function<void(void*, size_t)>& f) {
  const Tensor& k = tensors_[size_t(tensor)];
  const TensorInfo& ti = layout().tensors[size_t(tensor)];
  if (k.row_state >= 0) {
    f(rows_.data() + k.row_state, size_t(ti.rows) * sizeof(float));
    f(cols_.data() + k.col_state, size_t(ti.cols) * sizeof(float));
  }
  for (const PackedState* s : {&v_, &m_})
    if (s->size() > 0 && s->at(offset) >= 0) f(s->f32(0) + s->at(offset), size_t(n) * sizeof(float));
}

void Adafactor::save_own(StateWriter& w) const {
  std::unordered_map<std::string, size_t> index;
  for (size_t t = 0; t < layout().tensors.size(); ++t) index[layout().tensors[t].name] = t;
  for (const StateSpan& sp : state_spans()) {
    const size_t t = index.at(sp.tensor);
    const TensorInfo& ti = layout().tensors[t];
    const Tensor& k = tensors_[t];
    if (ti.matrix && sp.begin == 0) {  // the factors once per tensor: by the rank holding its start
      w.put_tensor(
          {sp.tensor, {ti.rows}, "exp_avg_sq_row", {0, ti.rows}, const_cast<float*>(rows_.data()) + k.row_state});
      w.put_tensor(
          {sp.tensor, {ti.cols}, "exp_avg_sq_col", {0, ti.cols}, const_cast<float*>(cols_.data()) + k.col_state});
    }
    if (!ti.matrix)
      w.put_tensor({sp.tensor, sp.shape, "exp_avg_sq", {sp.begin, sp.count}, v_.f32(0) + v_.at(sp.state_offset)});
    if (beta1_ >= 0.0)
      w.put_tensor({sp.tensor, sp.shape, "exp_avg", {sp.begin, sp.count}, m_.f32(0) + m_.at(sp.state_offset)});
  }
}

void Adafactor::load_own(StateReader& r) {
  std::unordered_map<std::string, size_t> index;
  for (size_t t = 0; t < layout().tensors.size(); ++t) index[layout().tensors[t].name] = t;
  std::vector<char> done(layout().tensors.size(), 0);
  for (const StateSpan& sp : state_spans()) {
    const size_t t = index.at(sp.tensor);
    const TensorInfo& ti = layout().tensors[t];
    const Tensor& k = tensors_[t];
    if (ti.matrix && !done[t]) {  // every rank holding a piece reads the whole factors
      r.get_tensor({sp.tensor, {ti.rows}, "exp_avg_sq_row", {0, ti.rows}, rows_.data() + k.row_state});
      r.get_tensor({sp.tensor, {ti.cols}, "exp_avg_sq_col", {0, ti.cols}, cols_.data() + k.col_state});
      done[t] = 1;
    }
    if (!ti.matrix)
      r.get_tensor({sp.tensor, sp.shape, "exp_avg_sq", {sp.begin, sp.count}, v_.f32(0) + v_.at(sp.state_offset)});
    if (beta1_ >= 0.0)
      r.get_tensor({sp.tensor, sp.shape, "exp_avg", {sp.begin, sp.count}, m_.f32(0) + m_.at(sp.state_offset)});
  }
}

}  // namespace zt::optim
