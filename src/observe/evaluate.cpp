// evaluate.cpp: see evaluate.h.
#include "observe/evaluate.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "kernels/cross_entropy.h"

namespace zt {

namespace {

// One forward over a batch's rows (this rank's part of them under context parallelism).
double batch_loss(Transformer& model, const int32_t* in, const int32_t* tg, const int32_t* pos, int64_t* count,
                  const EvalShard* cp) {
  if (cp) cp->shard(&in, &tg, &pos);
  return model.forward_loss(in, tg, count, pos);
}

void reduce(double* sum, int64_t* tokens, const EvalShard* cp) {
  if (!cp) return;
  double v[2] = {*sum, double(*tokens)};
  cp->reduce(v);
  *sum = v[0];
  *tokens = int64_t(v[1]);
}

}  // namespace

EvalResult evaluate(Transformer& model, const TokenFile& data, int B, int T, int64_t max_windows, int64_t packing_eos,
                    int per_call, const EvalShard* cp) {
  ZT_ASSERT(per_call >= 0 && per_call <= B);
  const int step = per_call > 0 ? per_call : B;
  auto t0 = std::chrono::steady_clock::now();
  WindowSampler sampler(data, T, /*shuffle=*/false, 0);
  int64_t windows = sampler.num_windows();
  ZT_CHECK(windows > 0, data.path(), " has ", data.size(), " tokens, fewer than one sequence of ", T,
           "+1; use a longer validation file or a smaller --model_max_length");
  if (max_windows > 0 && max_windows < windows) windows = max_windows;
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T), pos;
  if (packing_eos >= 0) pos.resize(in.size());
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t w = 0; w < windows; w += step) {
    int n = int(std::min<int64_t>(step, windows - w));
    sampler.fill(in.data(), tg.data(), w, n);
    for (size_t i = size_t(n) * T; i < in.size(); ++i) {
      in[i] = 0;
      tg[i] = kernels::kIgnoreIndex;
    }
    int64_t c = 0;
    if (packing_eos >= 0) packing_positions(pos.data(), in.data(), B, T, packing_eos);
    sum += batch_loss(model, in.data(), tg.data(), pos.empty() ? nullptr : pos.data(), &c, cp);
    tokens += c;
  }
  reduce(&sum, &tokens, cp);
  EvalResult r;
  r.loss = sum / double(tokens);
  r.perplexity = std::exp(r.loss);
  r.tokens = tokens;
  r.windows = windows;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

EvalResult evaluate(Transformer& model, SequenceSource& data, int B, int T, int64_t max_windows, const EvalShard* cp) {
  auto t0 = std::chrono::steady_clock::now();
  int64_t windows = data.num_sequences();
  if (max_windows > 0 && max_windows < windows) windows = max_windows;
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T), pos;
  if (data.has_positions()) pos.resize(in.size());
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t w = 0; w < windows; w += B) {
    const int n = int(std::min<int64_t>(B, windows - w));
    data.fill(in.data(), tg.data(), pos.empty() ? nullptr : pos.data(), w, n);
    for (size_t i = size_t(n) * T; i < in.size(); ++i) {
      in[i] = 0;
      tg[i] = kernels::kIgnoreIndex;
      if (!pos.empty()) pos[i] = int32_t(i % size_t(T));
    }
    int64_t c = 0;
    sum += batch_loss(model, in.data(), tg.data(), pos.empty() ? nullptr : pos.data(), &c, cp);
    tokens += c;
  }
  reduce(&sum, &tokens, cp);
  EvalResult r;
  r.loss = tokens > 0 ? sum / double(tokens) : 0;
  r.perplexity = std::exp(r.loss);
  r.tokens = tokens;
  r.windows = windows;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace zt
