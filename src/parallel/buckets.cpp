// buckets.cpp: see buckets.h.
#include "parallel/buckets.h"

#include "core/error.h"

namespace zt::parallel {

BucketPlan plan_buckets(const ParamTable& table, const BucketOptions& opt) {
  ZT_CHECK(opt.bucket_bytes > 0, "bucket size must be positive, got ", opt.bucket_bytes, " bytes");
  ZT_CHECK(opt.elem_bytes > 0, "gradient element size must be positive");
  const auto& list = table.list();
  BucketPlan plan;
  plan.bucket_of.assign(list.size(), -1);
  Bucket cur;
  auto cap = [&] {
    return plan.buckets.empty() && opt.first_bucket_bytes > 0 ? opt.first_bucket_bytes : opt.bucket_bytes;
  };
  for (int i = int(list.size()) - 1; i >= 0; --i) {
    const ParamInfo& p = list[i];
    if (opt.keep && !(*opt.keep)[i]) continue;
    if (!cur.params.empty() && p.offset + p.numel != cur.range.begin) {
      plan.buckets.push_back(std::move(cur));
      cur = Bucket{};
    }
    if (cur.params.empty()) {
      cur.range = {p.offset, p.offset + p.numel};
    } else {
      // Walking backwards, each parameter must end where the bucket begins.
      ZT_ASSERT(p.offset + p.numel == cur.range.begin, "parameter ", p.name, " is not contiguous with the next one");
      cur.range.begin = p.offset;
    }
    cur.params.push_back(i);
    plan.bucket_of[i] = int(plan.buckets.size());
    if (cur.bytes(opt.elem_bytes) >= cap()) {
      plan.buckets.push_back(std::move(cur));
      cur = Bucket{};
    }
  }
  if (!cur.params.empty()) plan.buckets.push_back(std::move(cur));
  return plan;
}

BucketTracker::BucketTracker(const BucketPlan& plan) : plan_(&plan) { reset(); }

void BucketTracker::reset() {
  pending_.clear();
  for (auto& b : plan_->buckets) pending_.push_back(int(b.params.size()));
  marked_.assign(plan_->bucket_of.size(), 0);
}

int BucketTracker::mark(int param) {
  ZT_ASSERT(param >= 0 && size_t(param) < marked_.size(), "parameter index ", param);
  ZT_ASSERT(!marked_[param], "parameter ", param, " marked twice in one backward pass");
  marked_[param] = 1;
  int b = plan_->bucket_of[param];
  return --pending_[b] == 0 ? b : -1;
}

}  // namespace zt::parallel
