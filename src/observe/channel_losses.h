// channel_losses.h: the training loss per data channel (docs/observability.md#channel-losses).
// With named channels (--train_file web=a.bin,code=b.bin, data/blend.h) the model writes every
// token's loss of a micro-batch into token_losses() (ModelRuntime::set_token_losses: the fused
// LM head + cross-entropy stores the value it sums anyway, nothing is recomputed); add() sums
// them per row into the row's channel, with the row's counted targets. At a logging step every
// data-parallel rank calls reduce(): one all-reduce of 2K numbers (K channels) per logging step,
// none per step, gives the window's token-weighted mean loss of each channel over all ranks,
// logged as loss/<name>.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "dist/communicator.h"

namespace zt {

class ChannelLosses {
 public:
  // B x T: the largest micro-batch the model runs on this rank (training; evaluation batches are
  // smaller); under context parallelism T is the rank's T / cp tokens of each row.
  ChannelLosses(const std::vector<std::string>& names, int B, int T);
  double* token_losses() { return tok_.data(); }
  // Adds the micro-batch whose token losses the model has just written: row b's channel is
  // channels[b] (0 when empty: a single channel), `targets` the B x T targets the model ran on
  // (this rank's, under context parallelism).
  void add(const std::vector<int32_t>& channels, const int32_t* targets);
  // A collective over `dp` (every rank at the same steps; the ranks holding other tokens: data
  // and context parallel): the window's mean loss per channel,
  // {"loss/<name>", mean}, for channels with counted tokens in it; starts a new window. The keys
  // stay valid while this object lives.
  const std::vector<std::pair<const char*, double>>& reduce(dist::Communicator& dp);
  // Forgets the window (a rollback restores an earlier step).
  void reset();
  // The window's per-channel sums on this rank: losses then token counts (for tests).
  const std::vector<double>& sums() const { return sums_; }

 private:
  std::vector<std::string> keys_;
  int B_, T_;
  std::vector<double> tok_, sums_;
  std::vector<std::pair<const char*, double>> out_;
};

}  // namespace zt
