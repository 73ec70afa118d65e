// buckets.h: data-parallel gradient buckets. Backward produces gradients from the last
// layer to the first, so buckets are cut walking the parameter table in reverse: the
// first bucket holds the last parameters and its all-reduce can start while backward
// still runs through the earlier layers. Each bucket is one contiguous range of the flat
// gradient buffer (the table has no padding), so it is reduced in place with no copy.
// It deliberately is not the reducer (which all-reduces ready buckets through a
// Communicator) nor does it split a parameter over two buckets: a parameter larger than
// the cap gets a bucket of its own.
#pragma once
#include <cstdint>
#include <vector>

#include "models/params.h"
#include "parallel/shard.h"

namespace zt::parallel {

struct BucketOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's bucket_cap_mb default (25 MiB)
  // Cap of the first bucket (the last parameters); 0 = bucket_bytes. PyTorch uses 1 MiB so
  // the first all-reduce starts as early as possible.
  int64_t first_bucket_bytes = 0;
  int elem_bytes = 4;  // fp32 gradients
  // Only these parameters (by ParamTable index; null: all): a pipeline stage reduces its own
  // units' gradients. A gap between kept parameters closes the bucket (buckets stay contiguous).
  const std::vector<char>* keep = nullptr;
};

struct Bucket {
  Range range;              // elements of the flat gradient buffer
  std::vector<int> params;  // indices into ParamTable::list(), in backward order (last first)
  int64_t bytes(int elem_bytes = 4) const { return range.size() * elem_bytes; }
};

struct BucketPlan {
  std::vector<Bucket> buckets;  // in the order backward completes them
  std::vector<int> bucket_of;   // parameter index -> bucket index
};
BucketPlan plan_buckets(const ParamTable& table, const BucketOptions& opt = {});

// The gradient bucket cap in fp32 elements when the user sets none (reduce_bucket_size 0):
// DDP takes PyTorch DDP's 25 MiB (bucket_cap_mb), so the all-reduce of the last layers'
// gradients runs while backward goes on (DeepSpeed's 5e8 made GPT-2 124M one bucket, reduced
// only after backward); ZeRO stages keep DeepSpeed's reduce_bucket_size default, 5e8. The
// trainer and estimate-memory both resolve the default here.
constexpr int64_t kDdpDefaultBucketElements = (int64_t(25) << 20) / 4;  // 6553600
constexpr int64_t kZeroDefaultBucketElements = 500000000;
inline int64_t reduce_bucket_elements(int64_t requested, int stage) {
  if (requested != 0) return requested;  // explicit; a negative one is rejected by the option check
  return stage == 0 ? kDdpDefaultBucketElements : kZeroDefaultBucketElements;
}

// Counts finished parameters per bucket during one backward pass: mark() returns the
// bucket index that just became complete (every parameter in it done), or -1. reset()
// starts the next pass. Parameters whose gradient is produced twice (a tied embedding
// used by the LM head and the input) must be marked only after their last use.
class BucketTracker {
 public:
  explicit BucketTracker(const BucketPlan& plan);
  int mark(int param);
  void reset();

 private:
  const BucketPlan* plan_;
  std::vector<int> pending_;
  std::vector<char> marked_;
};

}  // namespace zt::parallel
