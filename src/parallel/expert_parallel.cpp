// expert_parallel.cpp: see expert_parallel.h.
#include "parallel/expert_parallel.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/profile.h"

namespace zt::parallel {

void expert_parallel_cut(const ModelConfig& c, int size, int rank, LayerCut& cut) {
  const int E = c.moe.num_experts;
  if (size <= 1 || E == 0) return;
  // Under tensor parallelism the cut holds this TP rank's block already; the group splits it.
  const int block = cut.experts > 0 ? cut.experts : E, tp = E / block;
  ZT_CHECK(block % size == 0, "--expert-model-parallel-size ", size,
           tp > 1 ? str_cat(" x --tensor-model-parallel-size ", tp) : std::string(), " does not divide the model's ", E,
           " experts; use sizes whose product divides ", E);
  cut.experts = block / size;
  cut.experts_begin += rank * cut.experts;
}

void ExpertParallel::exchange_counts(const int32_t* send, int32_t* recv, int per_peer) {
  group_.all_to_all(send, recv, size_t(per_peer) * sizeof(int32_t));
}

void ExpertParallel::exchange_rows(const float* send, const int64_t* send_rows, float* recv, const int64_t* recv_rows,
                                   int C) {
  ZT_PROFILE("moe_all_to_all");
  const int P = size(), me = rank();
  const size_t row = size_t(C) * sizeof(float);
  std::vector<dist::Request> pending;
  // Receives first, then sends; a peer with nothing to send or receive exchanges no message (both
  // sides know the counts). The rows for this rank itself are copied.
  std::vector<int64_t> recv_at(size_t(P) + 1, 0), send_at(size_t(P) + 1, 0);
  for (int p = 0; p < P; ++p) {
    recv_at[size_t(p) + 1] = recv_at[size_t(p)] + recv_rows[p];
    send_at[size_t(p) + 1] = send_at[size_t(p)] + send_rows[p];
  }
  for (int p = 0; p < P; ++p)
    if (p != me && recv_rows[p] > 0)
      pending.push_back(group_.irecv(recv + recv_at[size_t(p)] * C, size_t(recv_rows[p]) * row, p));
  for (int p = 0; p < P; ++p)
    if (p != me && send_rows[p] > 0)
      pending.push_back(group_.isend(send + send_at[size_t(p)] * C, size_t(send_rows[p]) * row, p));
  if (send_rows[me] > 0)
    std::memcpy(recv + recv_at[size_t(me)] * C, send + send_at[size_t(me)] * C, size_t(send_rows[me]) * row);
  for (dist::Request& r : pending) r.wait();
  row_bytes_ += double(send_at[size_t(P)]) * double(row);
}

namespace {
class SharedOnceWriter final : public StateWriter {
 public:
  SharedOnceWriter(StateWriter& w, const std::unordered_set<std::string>& skip) : w_(w), skip_(skip) {}
  void put_tensor(const StatePiece& piece) override {
    if (!skip_.count(piece.tensor)) w_.put_tensor(piece);
  }
  void put_json(const std::string& key, const nlohmann::json& value) override { w_.put_json(key, value); }

 private:
  StateWriter& w_;
  const std::unordered_set<std::string>& skip_;
};
}  // namespace

EpStateAdapter::EpStateAdapter(Stateful& inner, const ParamTable& local, int ep_rank) : inner_(inner), rank_(ep_rank) {
  for (const ParamInfo& p : local.list())
    if (!p.expert) shared_.insert(p.name);
}

void EpStateAdapter::save_state(StateWriter& w) const {
  static const std::unordered_set<std::string> none;
  SharedOnceWriter once(w, rank_ == 0 ? none : shared_);
  inner_.save_state(once);
}

}  // namespace zt::parallel
