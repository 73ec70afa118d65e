// blend.h: training data from several named token files or SFT record files ("channels"),
// mixed by weight.
//
// `--train_file web=a.bin,code=b.bin` names two channels (or `chat=a.jsonl,math=b.jsonl`: one kind
// per blend); `--train_file_weights 0.7,0.3` (or `web=0.7,code=0.3`) sets their shares, by
// default proportional to each file's sequences (what concatenating the files would give). A plain `--train_file a.bin` is one unnamed source and
// takes none of this code's paths: the loader reads it exactly as before.
//
// Order. Global sequence g (the loader's cursor, data/loader.h) is drawn from channel
// c = BlendIndex::at(g).channel, as that channel's sequence k = at(g).index (the number of
// earlier sequences drawn from c); channel c then maps k through its own seeded per-epoch
// window (or SFT row) order. The blend is a pure function of the weights: every rank computes the same
// choice for every g, ranks slice the blended sequence exactly as they slice one file, and the
// checkpoint's cursor (the next g) restores it whatever the world size.
//
// The choice at g is "earliest deadline first" among the channels whose share is behind its
// target (Tijdeman's chairman assignment): the target after g+1 draws is w_c (g+1); among the
// channels with n_c < w_c (g+1), the one whose next draw falls due first ((n_c + 1) / w_c
// smallest, ties to the lower index) is drawn. Every channel then stays within one sequence of
// its target at every prefix (|n_c - w_c g| < 1). (Megatron-LM's blend picks the channel
// furthest below its target instead; with three or more channels that can drift past one.)
// Weights are quantised to integers (2^30 in all) and compared in 128-bit integers, so the
// choice never depends on floating-point contraction or the host.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/file_identity.h"
#include "data/loader.h"
#include "data/token_data.h"

namespace zt {

struct DataChannel {
  std::string name;  // empty for a plain --train_file
  std::string path;
};

// What --train_file and --train_file_weights say. `named` is false for a plain path (one
// unnamed channel); weights are as given (not normalised), empty when not given.
struct ChannelSpec {
  std::vector<DataChannel> channels;
  std::vector<double> weights;
  bool named = false;
  bool sft = false;  // named channels of SFT records (.jsonl), all of them
};

// Parses the flags; throws a one-line zt::Error on bad syntax, a duplicate or bad name, weights
// that do not match the channels, negative or all-zero weights, token files and SFT records
// (.jsonl) mixed in one blend, or weights without named channels. Touches no file.
ChannelSpec parse_channels(const std::string& train_file, const std::string& weights);

// The identity of the training data (data/file_identity.h): a plain file's own, or for named
// channels one combining every channel's name, file identity and given weight (so ranks that
// disagree, or a resume on other data or weights, are told; bytes is the files' total).
FileIdentity channels_identity(const ChannelSpec& spec);

// The blend of K channels with weights w (> 0). at(g) is O(1) amortised when g advances (the
// loader's order) and at most kStride steps from a cached snapshot otherwise. Thread-safe.
class BlendIndex {
 public:
  static constexpr int64_t kStride = 4096;
  explicit BlendIndex(const std::vector<double>& weights);
  struct Pick {
    int channel;
    int64_t index;  // sequences drawn from the channel before this one
  };
  Pick at(int64_t g);
  // Picks for g, g+1, ..., g+count-1.
  void fill(int64_t g, int count, Pick* out);
  // The normalised weights after quantisation (what the blend realises).
  std::vector<double> weights() const;

 private:
  int step(std::vector<int64_t>& n, int64_t t) const;  // the channel drawn at sequence t
  std::vector<int64_t> q_;                             // quantised weights, about 2^30 in all
  int64_t S_ = 0;                                      // their sum
  std::mutex mu_;
  std::vector<std::vector<int64_t>> snaps_;  // counts per channel before sequence j * kStride
  int64_t at_ = 0;                           // the running state: counts before sequence at_
  std::vector<int64_t> n_;
};

// The loader's source for named channels: every channel's sequences (a token file's windows in
// the channel's own seeded order, seed + channel; or SFT rows, data/sft_data.h) and the blend.
// fill_channels gives each row's channel.
class BlendedSource final : public SequenceSource {
 public:
  // Token files: opens and checks every file (vocab_size as TokenFile does); weights default to
  // the channels' window counts.
  BlendedSource(const ChannelSpec& spec, int vocab_size, int T, bool shuffle, uint64_t seed);
  // Given sources (SFT rows, each of length T, outliving this), one per channel; weights
  // default to their sequence counts.
  BlendedSource(const ChannelSpec& spec, const std::vector<SequenceSource*>& sources, int T);
  ~BlendedSource() override;
  // Token files: packing positions restart after EOS (set before the loader starts).
  void set_packing(bool packing, int64_t eos_id) { packing_ = packing, eos_ = eos_id; }
  int64_t num_sequences() const override { return total_; }
  int length() const override { return T_; }
  bool has_positions() const override { return packing_ || sources_[0]->has_positions(); }
  void fill(int32_t* inputs, int32_t* targets, int32_t* positions, int64_t g, int count) override;
  // Token files: count * T; SFT rows: each row's counted targets, from its channel.
  int64_t count_targets(int64_t g, int64_t count) const override;
  int num_channels() const override { return int(sources_.size()); }
  void fill_channels(int32_t* channels, int64_t g, int count) override;

  const std::vector<std::string>& names() const { return names_; }
  int64_t channel_sequences(int c) const;
  const std::vector<double>& weights() const { return weights_; }  // normalised
  std::string describe() const;  // "web 70.0% (a.bin, 1234 sequences), code 30.0% (...)"

 private:
  void init(const ChannelSpec& spec);
  int T_;
  bool packing_ = false, tokens_ = false;
  int64_t eos_ = -1, total_ = 0;
  std::vector<std::string> names_, paths_;
  std::vector<std::unique_ptr<TokenFile>> files_;
  std::vector<std::unique_ptr<SequenceSource>> owned_;  // token files' windows
  std::vector<SequenceSource*> sources_;
  std::vector<double> weights_;
  std::unique_ptr<BlendIndex> blend_;
  std::vector<BlendIndex::Pick> picks_;  // the producer thread's: the last fill's rows, from picks_g_
  int64_t picks_g_ = -1;
};

}  // namespace zt
