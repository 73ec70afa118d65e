// evaluate.h: validation loss over every whole window of a token file, in batches of
// the model's planned B x T. A last, partial batch is padded with ignored targets so
// every window counts exactly once.
#pragma once
#include <cstdint>
#include <functional>

#include "data/loader.h"
#include "data/token_data.h"
#include "models/transformer.h"
#include "parallel/context_parallel.h"

namespace zt {

struct EvalResult {
  double loss = 0;        // mean over target tokens (nats)
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
  int64_t windows = 0;
  double seconds = 0;
};

// Context parallelism: how each batch is cut and the sums reduced (parallel/context_parallel.h).
using EvalShard = parallel::EvalShard;

// Uses the model's current plan (B, T). max_windows <= 0 means all. packing_eos >= 0 evaluates
// as --packing trains: attention and positions restart after each such token. per_call (1..B,
// 0 = B) windows go into each forward (--per_device_eval_batch_size), the planned rows past
// them padded and ignored: the loss is the same token mean whatever the batch. cp: the rows are
// (B, T) and the plan (B, T / cp).
EvalResult evaluate(Transformer& model, const TokenFile& data, int B, int T, int64_t max_windows,
                    int64_t packing_eos = -1, int per_call = 0, const EvalShard* cp = nullptr);
// The same over any sequence source in its order (SFT rows: data/sft_data.h), whose targets may
// be ignored (prompt tokens): the loss is the mean over the counted ones.
EvalResult evaluate(Transformer& model, SequenceSource& data, int B, int T, int64_t max_windows,
                    const EvalShard* cp = nullptr);

}  // namespace zt
