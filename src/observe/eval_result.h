// eval_result.h: what one evaluation measured (train/evaluate.h computes it, the training log
// reports it: observe/train_log.h).
#pragma once
#include <cstdint>

namespace zt {

struct EvalResult {
  double loss = 0;        // mean over target tokens (nats)
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  int64_t windows = 0;
  double seconds = 0;
};

}  // namespace zt
