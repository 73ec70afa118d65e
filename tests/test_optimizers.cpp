// test_optimizers.cpp: the optimizer zoo (optim/) against naive references of the arithmetic
// each one's source defines (PyTorch, Hugging Face, bitsandbytes, the Sophia and Muon reference
// code), sharded updates against whole ones, and exact checkpoint round trips. Whole-model
// parity with PyTorch is tests/parity/run_parity.py's optimizer cases.
#include <barrier>
#include <map>
#include <thread>

#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "optim/adafactor.h"
#include "optim/adamw_8bit.h"
#include "optim/muon.h"
#include "optim/quant8.h"
#include "test_util.h"

namespace zt {
namespace {

using optim::OptimizerConfig;
using optim::StepPiece;
using optim::TensorInfo;
using test::error_of;
using test::expect_close;
using test::randn;

// In-memory checkpoint state: pieces assembled into whole tensors per (slot, tensor).
class MemState final : public StateWriter, public StateReader {
 public:
  void put_tensor(const StatePiece& p) override {
    auto& t = tensors_[p.slot + "/" + p.tensor];
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    t.resize(size_t(n));
    std::copy(p.data, p.data + p.slice.count, t.begin() + p.slice.begin);
  }
  void put_json(const std::string& key, const nlohmann::json& v) override { json_[key] = v; }
  void get_tensor(const StatePiece& p) override {
    auto it = tensors_.find(p.slot + "/" + p.tensor);
    if (it == tensors_.end()) throw Error("missing " + p.slot + "/" + p.tensor);
    std::copy(it->second.begin() + p.slice.begin, it->second.begin() + p.slice.begin + p.slice.count, p.data);
  }
  const nlohmann::json* find_json(const std::string& key) const override {
    // "ztrain.optimizer.step" -> json_["ztrain.optimizer"]["step"]
    const size_t dot = key.rfind('.');
    auto it = json_.find(key.substr(0, dot));
    if (it == json_.end() || !it->second.contains(key.substr(dot + 1))) return nullptr;
    return &it->second[key.substr(dot + 1)];
  }
  std::string source() const override { return "memory"; }

 private:
  std::map<std::string, std::vector<float>> tensors_;
  std::map<std::string, nlohmann::json> json_;
};

// A model of three tensors: a 6 x 9 matrix, a 9-vector and a 64 x 80 matrix (above 8-bit
// AdamW's 4,096-element threshold), in one flat buffer.
struct Toy {
  std::vector<TensorInfo> tensors{{"w", 6, 9, true, true}, {"b", 1, 9, false, false}, {"big", 64, 80, true, true}};
  std::vector<int64_t> offsets{0, 54, 63};
  int64_t numel = 63 + 64 * 80;
  std::vector<float> params = randn(size_t(63 + 64 * 80), 7, 0.5);
  std::vector<StepPiece> pieces(const std::vector<float>& grads) {
    std::vector<StepPiece> out;
    for (size_t t = 0; t < tensors.size(); ++t)
      out.push_back({params.data() + offsets[t], grads.data() + offsets[t], offsets[t], tensors[t].numel(),
                     tensors[t].matrix, int(t), 0});
    return out;
  }
  std::vector<optim::StateSpan> spans() const {
    std::vector<optim::StateSpan> s;
    for (size_t t = 0; t < tensors.size(); ++t) {
      std::vector<int64_t> shape = tensors[t].matrix ? std::vector<int64_t>{tensors[t].rows, tensors[t].cols}
                                                     : std::vector<int64_t>{tensors[t].cols};
      s.push_back({tensors[t].name, shape, 0, tensors[t].numel(), offsets[t]});
    }
    return s;
  }
};

std::unique_ptr<optim::Optimizer> make_on(Toy& toy, const std::string& name, OptimizerConfig cfg,
                                          const std::vector<float>& grads) {
  cfg.tokens_per_step = 1000;
  auto opt = optim::make_optimizer(name, cfg, toy.numel);
  opt->set_layout({toy.tensors, toy.pieces(grads), nullptr});
  opt->set_state_spans(toy.spans());
  return opt;
}

TEST(Quant8, NearestCodeMatchesBruteForceArgmin) {
  Rng r(5);
  for (const float* map : {optim::kDynamicSigned, optim::kDynamicUnsigned})
    for (int k = 0; k < 20000; ++k) {
      float x = k < 256 ? map[k] : k < 511 ? 0.5f * (map[k - 256] + map[k - 255]) : float(r.uniform() * 2.2 - 1.1);
      int best = 0;
      for (int c = 1; c < 256; ++c)
        if (std::fabs(x - map[c]) < std::fabs(x - map[best])) best = c;
      ASSERT_EQ(optim::quantize_nearest(map, x), best) << "x = " << x;
    }
}

TEST(Lion, MatchesTheUpdateRule) {
  Toy toy;
  OptimizerConfig cfg;
  cfg.beta1 = 0.9, cfg.beta2 = 0.99, cfg.weight_decay = 0.1;
  std::vector<double> p(toy.params.begin(), toy.params.end()), m(p.size(), 0.0);
  auto g = randn(size_t(toy.numel), 8);
  auto opt = make_on(toy, "lion", cfg, g);
  EXPECT_EQ(opt->name(), "lion_32bit");
  for (int t = 0; t < 3; ++t) {
    opt->step(toy.pieces(g), 1e-2);
    for (size_t i = 0; i < p.size(); ++i) {
      const double c = 0.9 * m[i] + 0.1 * g[i];
      const bool decay = i < 54 || i >= 63;
      p[i] = p[i] * (decay ? 1 - 1e-3 : 1.0) - 1e-2 * (c > 0 ? 1 : c < 0 ? -1 : 0);
      m[i] = 0.99 * m[i] + 0.01 * g[i];
    }
  }
  expect_close(toy.params, p, 1e-6, 1e-6, "lion");
  EXPECT_EQ(opt->state_bytes_per_param(), 4.0);
}

TEST(Sgd, MatchesTorchOptimSgd) {
  for (bool nesterov : {false, true}) {
    Toy toy;
    OptimizerConfig cfg;
    cfg.weight_decay = 0.01;
    cfg.args = {{"momentum", "0.9"}, {"nesterov", nesterov ? "true" : "false"}};
    if (!nesterov) cfg.args["dampening"] = "0.1";
    const double damp = nesterov ? 0.0 : 0.1;
    std::vector<double> p(toy.params.begin(), toy.params.end()), b(p.size(), 0.0);
    std::vector<float> g;
    auto opt = make_on(toy, "sgd", cfg, randn(size_t(toy.numel), 9));
    for (int t = 0; t < 3; ++t) {
      g = randn(size_t(toy.numel), 10 + t);
      opt->step(toy.pieces(g), 0.05);
      for (size_t i = 0; i < p.size(); ++i) {
        const bool decay = i < 54 || i >= 63;
        const double d = g[i] + (decay ? 0.01 : 0.0) * p[i];
        b[i] = t == 0 ? d : 0.9 * b[i] + (1 - damp) * d;
        p[i] -= 0.05 * (nesterov ? d + 0.9 * b[i] : b[i]);
      }
    }
    expect_close(toy.params, p, 1e-5, 1e-6, nesterov ? "sgd nesterov" : "sgd");
  }
  EXPECT_NE(error_of([] {
              optim::make_optimizer("sgd", {0.9, 0.999, 1e-8, 0, DType::f32, {{"nesterov", "true"}}}, 4);
            }).find("nesterov=true needs momentum > 0"),
            std::string::npos);
}

TEST(Sophia, MatchesTheReferenceStepAndCurvature) {
  Toy toy;
  OptimizerConfig cfg;
  cfg.beta1 = 0.965, cfg.beta2 = 0.99, cfg.weight_decay = 0.1;
  cfg.args = {{"rho", "0.04"}, {"hessian_interval", "2"}};
  std::vector<double> p(toy.params.begin(), toy.params.end()), m(p.size(), 0.0), h(p.size(), 0.0);
  auto opt = make_on(toy, "sophiag", cfg, randn(size_t(toy.numel), 1));
  EXPECT_EQ(opt->curvature_interval(), 2);
  for (int t = 0; t < 4; ++t) {
    auto g = randn(size_t(toy.numel), 20 + t, 0.01);
    opt->step(toy.pieces(g), 1e-3);
    for (size_t i = 0; i < p.size(); ++i) {
      const bool decay = i < 54 || i >= 63;
      p[i] *= decay ? 1 - 1e-4 : 1.0;
      m[i] = 0.965 * m[i] + 0.035 * g[i];
      const double ratio = std::min(std::fabs(m[i]) / (0.04 * 1000 * h[i] + 1e-15), 1.0);
      p[i] -= 1e-3 * (m[i] > 0 ? 1 : m[i] < 0 ? -1 : 0) * ratio;
    }
    auto gh = randn(size_t(toy.numel), 40 + t, 0.01);
    opt->update_curvature(toy.pieces(gh));
    for (size_t i = 0; i < p.size(); ++i) h[i] = 0.99 * h[i] + 0.01 * double(gh[i]) * gh[i];
  }
  expect_close(toy.params, p, 1e-5, 1e-6, "sophia");
}

// bf16 moments with stochastic rounding follow the fp32 run; round-to-nearest would freeze
// exp_avg_sq once 0.001 g^2 falls under its half-ulp.
TEST(AdamW, Bf16StateFollowsFp32) {
  Toy a, b;
  OptimizerConfig cfg;
  cfg.beta2 = 0.999, cfg.weight_decay = 0.1;
  OptimizerConfig low = cfg;
  low.state_dtype = DType::bf16;
  auto g0 = randn(size_t(a.numel), 3);
  auto fa = make_on(a, "adamw", cfg, g0), fb = make_on(b, "adamw", low, g0);
  EXPECT_EQ(fb->state_bytes_per_param(), 4.0);
  for (int t = 0; t < 200; ++t) {
    auto g = randn(size_t(a.numel), 100 + t);
    for (float& x : g) x = 1.0f + 0.1f * x;  // a steady gradient: v climbs towards 1 by 0.1% a step
    fa->step(a.pieces(g), 1e-4);
    fb->step(b.pieces(g), 1e-4);
  }
  MemState sa, sb;
  fa->save_state(sa);
  fb->save_state(sb);
  std::vector<float> va(size_t(a.numel)), vb(size_t(a.numel));
  sa.get_tensor({"big", {64, 80}, "exp_avg_sq", {0, 5120}, va.data()});
  sb.get_tensor({"big", {64, 80}, "exp_avg_sq", {0, 5120}, vb.data()});
  va.resize(5120), vb.resize(5120);
  double mean_a = 0, mean_b = 0;
  for (size_t i = 0; i < va.size(); ++i) mean_a += va[i], mean_b += vb[i];
  EXPECT_NEAR(mean_b / mean_a, 1.0, 2e-3);                                 // unbiased: the means agree to 0.2%
  expect_close(b.params, a.params, 0.0, 1e-3, "bf16-state adamw params");  // 5% of the 2e-2 travelled
}

// bitsandbytes' 8-bit blockwise AdamW, written out naively: dequantize, AdamW in fp32, requantize
// with a brute-force nearest code per element.
TEST(AdamW8bit, MatchesANaiveBlockwiseReference) {
  Toy toy;
  OptimizerConfig cfg;
  cfg.beta1 = 0.9, cfg.beta2 = 0.95, cfg.weight_decay = 0.1;
  std::vector<float> p = toy.params, m(size_t(toy.numel), 0.f), v(size_t(toy.numel), 0.f);
  auto opt = make_on(toy, "adamw_bnb_8bit", cfg, randn(size_t(toy.numel), 1));
  EXPECT_EQ(opt->name(), "adamw_8bit");
  auto nearest = [](const float* map, float x) {
    int best = 0;
    for (int c = 1; c < 256; ++c)
      if (std::fabs(x - map[c]) < std::fabs(x - map[best])) best = c;
    return map[best];
  };
  for (int t = 1; t <= 4; ++t) {
    auto g = randn(size_t(toy.numel), 50 + t, 0.1);
    opt->step(toy.pieces(g), 1e-3);
    const float sz = float(1e-3 / (1 - std::pow(0.9, t))), bc2 = float(std::sqrt(1 - std::pow(0.95, t)));
    for (int64_t i = 0; i < toy.numel; ++i) {
      const float decay = (i < 54 || i >= 63) ? float(1 - 1e-3 * 0.1) : 1.f;
      m[i] = m[i] * 0.9f + g[i] * float(1 - 0.9);
      v[i] = v[i] * 0.95f + g[i] * g[i] * float(1 - 0.95);
      p[i] = p[i] * decay - sz * m[i] / (std::sqrt(v[i]) / bc2 + 1e-8f);
    }
    for (int64_t b0 = 63; b0 < toy.numel; b0 += 256) {  // only "big" is quantized (>= 4096)
      const int64_t n = std::min<int64_t>(256, toy.numel - b0);
      for (auto [x, map] : {std::pair{m.data(), optim::kDynamicSigned}, std::pair{v.data(), optim::kDynamicUnsigned}}) {
        float a = 0.f;
        for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[b0 + i]));
        if (a == 0.f) a = 1.f;
        for (int64_t i = 0; i < n; ++i) x[b0 + i] = nearest(map, x[b0 + i] / a) * a;
      }
    }
  }
  expect_close(toy.params, p, 1e-5, 1e-7, "8-bit adamw params");
  MemState s;
  opt->save_state(s);
  std::vector<float> saved(5120);
  s.get_tensor({"big", {64, 80}, "exp_avg", {0, 5120}, saved.data()});
  expect_close(saved, std::vector<float>(m.begin() + 63, m.end()), 1e-5, 1e-9, "8-bit exp_avg");
  // 2 bytes per element of "big", 8 per block of 256, fp32 moments for the 63 small ones.
  EXPECT_NEAR(opt->state_bytes_per_param() * double(toy.numel), 2 * 5120 + 8 * 20 + 8 * 63, 1e-6);
}

// Hugging Face's Adafactor, in double: factored moments for matrices, RMS clipping, relative
// steps and parameter scaling, optional beta1.
void hf_adafactor(std::vector<double>& p, const std::vector<float>& g, const Toy& toy, int t, double lr, double wd,
                  bool beta1, std::vector<std::vector<double>>& st) {
  const double beta2t = 1 - std::pow(double(t), -0.8);
  for (size_t k = 0; k < toy.tensors.size(); ++k) {
    const TensorInfo& ti = toy.tensors[k];
    const int64_t o = toy.offsets[k], n = ti.numel();
    std::vector<double>& row = st[3 * k];
    std::vector<double>& col = st[3 * k + 1];
    std::vector<double>& m = st[3 * k + 2];
    double rms = 0;
    for (int64_t i = 0; i < n; ++i) rms += p[o + i] * p[o + i];
    rms = std::sqrt(rms / n);
    const double step = std::max(1e-3, rms) * std::min(1e-2, 1 / std::sqrt(double(t)));  // scale + relative
    (void)lr;
    std::vector<double> u(n);
    if (ti.matrix) {
      row.resize(ti.rows), col.resize(ti.cols);
      for (int64_t r = 0; r < ti.rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < ti.cols; ++c) s += double(g[o + r * ti.cols + c]) * g[o + r * ti.cols + c] + 1e-30;
        row[r] = beta2t * row[r] + (1 - beta2t) * s / ti.cols;
      }
      for (int64_t c = 0; c < ti.cols; ++c) {
        double s = 0;
        for (int64_t r = 0; r < ti.rows; ++r) s += double(g[o + r * ti.cols + c]) * g[o + r * ti.cols + c] + 1e-30;
        col[c] = beta2t * col[c] + (1 - beta2t) * s / ti.rows;
      }
      double mean = 0;
      for (double x : row) mean += x;
      mean /= ti.rows;
      for (int64_t i = 0; i < n; ++i)
        u[i] = g[o + i] / std::sqrt(row[i / ti.cols] / mean) / std::sqrt(col[i % ti.cols]);
    } else {
      row.resize(n);  // exp_avg_sq
      for (int64_t i = 0; i < n; ++i) {
        row[i] = beta2t * row[i] + (1 - beta2t) * (double(g[o + i]) * g[o + i] + 1e-30);
        u[i] = g[o + i] / std::sqrt(row[i]);
      }
    }
    double us = 0;
    for (double x : u) us += x * x;
    const double denom = std::max(std::sqrt(us / n) / 1.0, 1.0);
    m.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      double upd = u[i] / denom * step;
      if (beta1) upd = m[i] = 0.9 * m[i] + 0.1 * upd;
      p[o + i] += -(ti.matrix ? wd : 0.0) * step * p[o + i];
      p[o + i] -= upd;
    }
  }
}

TEST(Adafactor, MatchesHuggingFacesAlgorithm) {
  for (bool beta1 : {false, true}) {
    Toy toy;
    OptimizerConfig cfg;
    cfg.weight_decay = 0.1;
    cfg.args = {{"scale_parameter", "true"}, {"relative_step", "true"}};
    if (beta1) cfg.args["beta1"] = "0.9";
    std::vector<double> p(toy.params.begin(), toy.params.end());
    std::vector<std::vector<double>> st(9);
    auto opt = make_on(toy, "adafactor", cfg, randn(size_t(toy.numel), 1));
    for (int t = 1; t <= 4; ++t) {
      auto g = randn(size_t(toy.numel), 60 + t);
      opt->step(toy.pieces(g), 123.0);  // relative_step: the schedule's LR is not used
      hf_adafactor(p, g, toy, t, 0, 0.1, beta1, st);
    }
    expect_close(toy.params, p, 1e-5, 1e-7, beta1 ? "adafactor beta1" : "adafactor");
    // m + n floats per matrix, n for the vector (and numel more with beta1).
    const double want = 4.0 * (6 + 9 + 9 + 64 + 80 + (beta1 ? toy.numel : 0));
    EXPECT_NEAR(opt->state_bytes_per_param() * double(toy.numel), want, 1e-6);
  }
}

// Two "ranks" in threads, each stepping half of every tensor (cut inside rows), their group sums
// meeting at a barrier, give the whole update.
template <class Check>
void sharded_equals_whole(const std::string& name, OptimizerConfig cfg, Check check) {
  Toy whole, halves;
  halves.params = whole.params;
  auto g0 = randn(size_t(whole.numel), 77);
  auto full = make_on(whole, name, cfg, g0);
  std::vector<float> shared;
  std::barrier sync(2);
  auto run_rank = [&](int rank, const std::vector<std::vector<float>>& grads) {
    std::vector<StepPiece> mine;
    for (size_t t = 0; t < halves.tensors.size(); ++t) {
      const int64_t n = halves.tensors[t].numel(), cut = n / 2 + 1, b = rank ? cut : 0, e = rank ? n : cut;
      mine.push_back({halves.params.data() + halves.offsets[t] + b, nullptr, halves.offsets[t] + b, e - b,
                      halves.tensors[t].matrix, int(t), b});
    }
    auto opt = optim::make_optimizer(name, cfg, halves.numel);
    opt->set_layout({halves.tensors, mine, [&](float* v, int64_t n) {
                       if (rank == 0) shared.assign(v, v + n);
                       sync.arrive_and_wait();
                       if (rank == 1)
                         for (int64_t i = 0; i < n; ++i) shared[size_t(i)] += v[i];
                       sync.arrive_and_wait();
                       std::copy(shared.begin(), shared.end(), v);
                       sync.arrive_and_wait();
                     }});
    for (const auto& g : grads) {
      for (StepPiece& p : mine) p.grads = g.data() + p.state_offset;
      opt->step(mine, 1e-2);
    }
  };
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < 3; ++t) grads.push_back(randn(size_t(whole.numel), 80 + t));
  for (const auto& g : grads) full->step(whole.pieces(g), 1e-2);
  std::thread other(run_rank, 1, grads);
  run_rank(0, grads);
  other.join();
  check(halves.params, whole.params);
}

TEST(Adafactor, ShardedEqualsWhole) {
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  cfg.args = {{"scale_parameter", "true"}, {"beta1", "0.9"}};
  sharded_equals_whole("adafactor", cfg, [](auto& a, auto& b) { expect_close(a, b, 1e-5, 1e-7, "sharded adafactor"); });
}

TEST(Muon, NewtonSchulzMatchesADoubleReferenceAndOrthogonalises) {
  for (auto [rows, cols] : {std::pair{24, 40}, std::pair{40, 24}}) {
    auto g = randn(size_t(rows * cols), 11);
    std::vector<float> o(g.size());
    optim::newton_schulz(g.data(), rows, cols, 5, DType::f32, o.data());
    // The same iteration in double on the wide orientation.
    const bool tall = rows > cols;
    const int r = tall ? cols : rows, c = tall ? rows : cols;
    std::vector<double> x(size_t(r * c)), a(size_t(r * r)), b(size_t(r * r)), n(size_t(r * c));
    double norm = 0;
    for (float v : g) norm += double(v) * v;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        x[size_t(tall ? j * c + i : i * c + j)] = g[size_t(i * cols + j)] / std::sqrt(norm);
    for (int k = 0; k < 5; ++k) {
      kernels::gemm_ref<double>(false, true, r, r, c, 1, x.data(), c, x.data(), c, 0, a.data(), r);
      b = a;
      kernels::gemm_ref<double>(false, false, r, r, r, 2.0315, a.data(), r, a.data(), r, -4.7750, b.data(), r);
      n = x;
      kernels::gemm_ref<double>(false, false, r, c, r, 1, b.data(), r, x.data(), c, 3.4445, n.data(), c);
      x = n;
    }
    std::vector<double> want(g.size());
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) want[size_t(i * cols + j)] = x[size_t(tall ? j * c + i : i * c + j)];
    expect_close(o, want, 1e-3, 1e-4, "newton-schulz fp32");
    // Orthogonalised: the singular values of O land near 1 (the quintic's band is about 0.7-1.2),
    // so O O^T (the small side) has its diagonal there.
    if (!tall) {
      std::vector<double> od(o.begin(), o.end()), gram(size_t(r * r));
      kernels::gemm_ref<double>(false, true, rows, rows, cols, 1, od.data(), cols, od.data(), cols, 0, gram.data(), r);
      for (int i = 0; i < r; ++i) EXPECT_NEAR(gram[size_t(i * r + i)], 0.9, 0.35);
    }
    std::vector<float> low(g.size());
    optim::newton_schulz(g.data(), rows, cols, 5, DType::bf16, low.data());
    expect_close(low, o, 0.0, 5e-2, "newton-schulz bf16 vs fp32");
  }
}

TEST(Muon, ShardedEqualsWholeAndHiddenMatricesOnly) {
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1;
  cfg.args = {{"ns_dtype", "fp32"}};
  sharded_equals_whole("muon", cfg, [](auto& a, auto& b) { expect_close(a, b, 1e-4, 1e-6, "sharded muon"); });
  Toy toy;
  auto opt = make_on(toy, "muon", cfg, randn(size_t(toy.numel), 1));
  // Momentum (4 bytes) for the two hidden matrices, AdamW's 8 for the vector.
  EXPECT_NEAR(opt->state_bytes_per_param() * double(toy.numel), 4.0 * (54 + 5120) + 8.0 * 9, 1e-6);
}

// Every optimizer: three steps, save, load into a fresh one, two more steps each: bit-identical.
TEST(Optimizers, CheckpointRoundTripIsExact) {
  for (const std::string name : {"adamw_torch", "lion_32bit", "sgd", "adamw_8bit", "adafactor", "muon", "sophia"}) {
    for (DType state : {DType::f32, DType::bf16}) {
      const bool elementwise = name == "adamw_torch" || name == "lion_32bit" || name == "sgd" || name == "sophia";
      if (state == DType::bf16 && !elementwise) continue;
      SCOPED_TRACE(name + (state == DType::bf16 ? " bf16" : ""));
      OptimizerConfig cfg;
      cfg.weight_decay = 0.1;
      cfg.state_dtype = state;
      if (name == "sgd") cfg.args = {{"momentum", "0.9"}};
      if (name == "adafactor") cfg.args = {{"beta1", "0.9"}};
      Toy a;
      auto g0 = randn(size_t(a.numel), 2);
      auto opt = make_on(a, name, cfg, g0);
      for (int t = 0; t < 3; ++t) {
        auto g = randn(size_t(a.numel), 30 + t, 0.1);
        opt->step(a.pieces(g), 1e-3);
        if (opt->curvature_interval()) opt->update_curvature(a.pieces(g));
      }
      MemState s;
      opt->save_state(s);
      Toy b;
      b.params = a.params;
      auto back = make_on(b, name, cfg, g0);
      back->load_state(s);
      EXPECT_EQ(back->steps(), 3);
      for (int t = 0; t < 2; ++t) {
        auto g = randn(size_t(a.numel), 40 + t, 0.1);
        opt->step(a.pieces(g), 1e-3);
        back->step(b.pieces(g), 1e-3);
      }
      ASSERT_EQ(a.params, b.params);
    }
  }
}

TEST(Optimizers, BadNamesAndArgumentsAreOneClearError) {
  EXPECT_NE(error_of([] { optim::make_optimizer("adamw8bit", {}, 1); }).find("did you mean adamw_8bit?"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              optim::make_optimizer("lion", {0.9, 0.99, 1e-8, 0, DType::f32, {{"rho", "1"}}}, 1);
            }).find("--optim_args key \"rho\" is not used by --optim lion_32bit"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              optim::make_optimizer("muon", {0.9, 0.99, 1e-8, 0, DType::f32, {{"ns_steps", "x"}}}, 1);
            }).find("ns_steps=\"x\" is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { optim::parse_optim_args("momentum=0.9,nesterov"); }).find("is not key=value"),
            std::string::npos);
  EXPECT_EQ(optim::parse_optim_args(" momentum = 0.9 , nesterov=true").at("momentum"), "0.9");
}

// Sophia's labels: drawn from each row's softmax by inverse CDF; the loss and gradient are the
// cross-entropy's with those labels as targets.
TEST(CrossEntropy, SampledLabelsAreTheModelsOwnDraws) {
  const int N = 64, C = 8, V = 13;
  auto x = randn(size_t(N * C), 1), w = randn(size_t(V * C), 2);
  std::vector<int32_t> targets(N, 0);
  targets[5] = kernels::kIgnoreIndex;
  std::vector<float> scratch(size_t(N * V)), dx(size_t(N * C)), dw(size_t(V * C), 0.f);
  kernels::LmHeadDims d{N, C, V, N, 0.f};
  d.sample_seed = 99;
  int64_t count = 0;
  const double loss =
      kernels::lmhead_ce(dx.data(), dw.data(), x.data(), w.data(), targets.data(), d, 1.f, scratch.data(), &count);
  EXPECT_EQ(count, N - 1);  // ignored rows stay ignored
  // The same draws by hand, then the plain loss with them as targets.
  std::vector<int32_t> drawn(targets);
  for (int i = 0; i < N; ++i) {
    if (targets[i] == kernels::kIgnoreIndex) continue;
    std::vector<float> z(V);
    float mx = -1e30f, sum = 0.f;
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += double(x[size_t(i * C + c)]) * w[size_t(v * C + c)];
      z[size_t(v)] = float(s);
      mx = std::max(mx, z[size_t(v)]);
    }
    for (float& v : z) sum += v = std::exp(v - mx);
    drawn[size_t(i)] = kernels::sample_label(z.data(), V, sum, kernels::sample_uniform(99, i));
  }
  d.sample_seed = 0;
  std::vector<float> dx2(dx.size()), dw2(dw.size(), 0.f);
  const double want =
      kernels::lmhead_ce(dx2.data(), dw2.data(), x.data(), w.data(), drawn.data(), d, 1.f, scratch.data(), &count);
  EXPECT_NEAR(loss, want, 1e-4 * want);
  expect_close(dx, dx2, 1e-4, 1e-6, "sampled-label dx");
  // The draws follow the softmax: 20,000 draws of one row land within 2% of each probability.
  const float z[4] = {1.f, 2.f, 4.f, 1.f};  // probabilities 1/8, 2/8, 4/8, 1/8
  std::vector<int> hits(4, 0);
  for (int k = 0; k < 20000; ++k) ++hits[size_t(kernels::sample_label(z, 4, 8.f, kernels::sample_uniform(7, k)))];
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(hits[size_t(v)] / 20000.0, z[v] / 8.0, 0.02) << v;
}

}  // namespace
}  // namespace zt
