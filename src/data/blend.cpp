// blend.cpp: see blend.h.
#include "data/blend.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/hash.h"

namespace zt {

namespace {

constexpr int64_t kScale = int64_t(1) << 30;  // the quantised weights' total (about 1e-9 resolution)

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (unsigned char c : n)
    if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
  return true;
}

double parse_weight(const std::string& text, const std::string& item) {
  char* end = nullptr;
  const double w = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  ZT_CHECK(!text.empty() && end && *end == 0 && std::isfinite(w), "--train_file_weights ", quote(item),
           " is not a number; give one weight per channel, e.g. 0.7,0.3 or web=0.7,code=0.3");
  ZT_CHECK(w > 0, "--train_file_weights ", quote(item),
           ": weights must be > 0 (drop a channel from --train_file instead of giving it weight 0)");
  return w;
}

bool is_jsonl_path(const std::string& p) { return p.size() > 6 && p.compare(p.size() - 6, 6, ".jsonl") == 0; }

}  // namespace

ChannelSpec parse_channels(const std::string& train_file, const std::string& weights) {
  ChannelSpec s;
  // A plain path: no '=' at all, or an existing file whose name happens to hold one.
  std::error_code ec;
  if (train_file.find('=') == std::string::npos || std::filesystem::is_regular_file(train_file, ec)) {
    ZT_CHECK(weights.empty(), "--train_file_weights needs named channels: --train_file name1=path1,name2=path2");
    s.channels.push_back({"", train_file});
    return s;
  }
  s.named = true;
  std::set<std::string> seen;
  for (const std::string& item : split(train_file, ',')) {
    const size_t eq = item.find('=');
    ZT_CHECK(eq != std::string::npos, "--train_file ", quote(item),
             " has no channel name; with channels every item is name=path, e.g. web=a.bin,code=b.bin");
    DataChannel c{item.substr(0, eq), item.substr(eq + 1)};
    ZT_CHECK(valid_name(c.name), "--train_file ", quote(item), ": the channel name ", quote(c.name),
             " must be 1-64 letters, digits, '_' or '-' (it names the log keys loss/<name>)");
    ZT_CHECK(!c.path.empty(), "--train_file ", quote(item), ": channel ", c.name, " has no file after '='");
    ZT_CHECK(seen.insert(c.name).second, "--train_file names channel ", c.name,
             " twice; give every channel a different name");
    if (s.channels.empty()) s.sft = is_jsonl_path(c.path);
    ZT_CHECK(is_jsonl_path(c.path) == s.sft, "--train_file channel ", c.name, "=", c.path, " is ",
             s.sft ? "a token file" : "SFT records (.jsonl)", " but channel ", s.channels[0].name, " is ",
             s.sft ? "SFT records (.jsonl)" : "a token file", "; blend channels of one kind");
    s.channels.push_back(c);
  }
  if (weights.empty()) return s;
  const std::vector<std::string> items = split(weights, ',');
  const bool by_name = weights.find('=') != std::string::npos;
  ZT_CHECK(items.size() == s.channels.size(), "--train_file_weights has ", items.size(), " weights for ",
           s.channels.size(), " channels; give one per channel, in --train_file's order or as name=weight");
  s.weights.assign(s.channels.size(), 0.0);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!by_name) {
      s.weights[i] = parse_weight(items[i], items[i]);
      continue;
    }
    const size_t eq = items[i].find('=');
    ZT_CHECK(eq != std::string::npos, "--train_file_weights ", quote(items[i]),
             ": mix the forms, name=weight for every channel or plain weights in --train_file's order");
    const std::string name = items[i].substr(0, eq);
    size_t c = 0;
    while (c < s.channels.size() && s.channels[c].name != name) ++c;
    ZT_CHECK(c < s.channels.size(), "--train_file_weights names channel ", quote(name),
             ", which --train_file does not have");
    ZT_CHECK(s.weights[c] == 0, "--train_file_weights gives channel ", name, " twice");
    s.weights[c] = parse_weight(items[i].substr(eq + 1), items[i]);
  }
  return s;
}

FileIdentity channels_identity(const ChannelSpec& spec) {
  if (!spec.named) return file_identity(spec.channels[0].path, "--train_file");
  FileIdentity all;
  std::string key = "ztrain.channels.v1";
  for (size_t c = 0; c < spec.channels.size(); ++c) {
    const DataChannel& ch = spec.channels[c];
    const FileIdentity id = file_identity(ch.path, "--train_file channel " + ch.name + ":");
    all.bytes += id.bytes;
    key += str_cat("|", ch.name, ":", id.bytes, ":", hex64(id.prefix_hash), ":",
                   spec.weights.empty() ? std::string("auto") : str_cat(spec.weights[c]));
  }
  all.prefix_hash = hash64(key.data(), key.size());
  return all;
}

BlendIndex::BlendIndex(const std::vector<double>& weights) {
  ZT_ASSERT(!weights.empty());
  double sum = 0;
  for (double w : weights) {
    ZT_ASSERT(w > 0 && std::isfinite(w));
    sum += w;
  }
  for (double w : weights) q_.push_back(std::max<int64_t>(1, std::llround(w / sum * double(kScale))));
  for (int64_t q : q_) S_ += q;
  n_.assign(q_.size(), 0);
}

std::vector<double> BlendIndex::weights() const {
  int64_t s = 0;
  for (int64_t q : q_) s += q;
  std::vector<double> w;
  for (int64_t q : q_) w.push_back(double(q) / double(s));
  return w;
}

// Draw t (0-based): among the channels behind their target after t+1 draws
// (n_c * S < q_c * (t+1)), the one with the earliest next deadline (n_c + 1) / q_c.
int BlendIndex::step(std::vector<int64_t>& n, int64_t t) const {
  using i128 = __int128;
  const i128 S = S_;
  int best = -1;
  for (int c = 0; c < int(q_.size()); ++c) {
    if (i128(n[c]) * S >= i128(q_[c]) * (i128(t) + 1)) continue;
    if (best < 0 || i128(n[c] + 1) * q_[best] < i128(n[best] + 1) * q_[c]) best = c;
  }
  ZT_ASSERT(best >= 0);  // the deficits sum to 1 > 0 after each draw's targets move: one is behind
  ++n[best];
  return best;
}

BlendIndex::Pick BlendIndex::at(int64_t g) {
  Pick p;
  fill(g, 1, &p);
  return p;
}

void BlendIndex::fill(int64_t g, int count, Pick* out) {
  ZT_ASSERT(g >= 0 && count >= 0);
  std::lock_guard<std::mutex> l(mu_);
  // Back, or forward past a snapshot: restart from the nearest snapshot at or before g.
  const int64_t j = std::min<int64_t>(g / kStride, int64_t(snaps_.size()) - 1);
  if (g < at_ || j * kStride > at_) {
    if (j >= 0) {
      n_ = snaps_[size_t(j)];
      at_ = j * kStride;
    } else {
      n_.assign(q_.size(), 0);
      at_ = 0;
    }
  }
  auto advance = [&]() {
    if (at_ % kStride == 0 && int64_t(snaps_.size()) == at_ / kStride) snaps_.push_back(n_);
    const int c = step(n_, at_);
    ++at_;
    return c;
  };
  while (at_ < g) advance();
  for (int i = 0; i < count; ++i) {
    const int c = advance();
    out[i] = {c, n_[c] - 1};
  }
}

namespace {

// A token file's windows, in the channel's own order; positions are the blend's business.
class TokenChannel final : public SequenceSource {
 public:
  TokenChannel(const TokenFile& f, int T, bool shuffle, uint64_t seed) : s_(f, T, shuffle, seed), T_(T) {}
  int64_t num_sequences() const override { return s_.num_windows(); }
  int length() const override { return T_; }
  bool has_positions() const override { return false; }
  void fill(int32_t* in, int32_t* tg, int32_t*, int64_t g, int count) override { s_.fill(in, tg, g, count); }
  int64_t count_targets(int64_t, int64_t count) const override { return count * T_; }

 private:
  WindowSampler s_;
  int T_;
};

}  // namespace

BlendedSource::BlendedSource(const ChannelSpec& spec, int vocab_size, int T, bool shuffle, uint64_t seed)
    : T_(T), tokens_(true) {
  for (size_t c = 0; c < spec.channels.size(); ++c) {
    files_.push_back(std::make_unique<TokenFile>(spec.channels[c].path, vocab_size));
    // Each channel its own order: a file given twice is not read in lockstep.
    owned_.push_back(std::make_unique<TokenChannel>(*files_.back(), T, shuffle, seed + c));
    sources_.push_back(owned_.back().get());
  }
  init(spec);
}

BlendedSource::BlendedSource(const ChannelSpec& spec, const std::vector<SequenceSource*>& sources, int T)
    : T_(T), sources_(sources) {
  ZT_ASSERT(sources.size() == spec.channels.size());
  for (SequenceSource* s : sources) ZT_ASSERT(s->length() == T && s->has_positions() == sources[0]->has_positions());
  init(spec);
}

void BlendedSource::init(const ChannelSpec& spec) {
  std::vector<double> w = spec.weights;
  for (size_t c = 0; c < spec.channels.size(); ++c) {
    names_.push_back(spec.channels[c].name);
    paths_.push_back(spec.channels[c].path);
    total_ += sources_[c]->num_sequences();
    if (spec.weights.empty()) w.push_back(double(sources_[c]->num_sequences()));  // as concatenating would mix
  }
  blend_ = std::make_unique<BlendIndex>(w);
  weights_ = blend_->weights();
}

BlendedSource::~BlendedSource() = default;

int64_t BlendedSource::channel_sequences(int c) const { return sources_[size_t(c)]->num_sequences(); }

void BlendedSource::fill(int32_t* inputs, int32_t* targets, int32_t* positions, int64_t g, int count) {
  picks_.resize(size_t(count));
  blend_->fill(g, count, picks_.data());
  picks_g_ = g;
  for (int r = 0; r < count; ++r) {
    const BlendIndex::Pick p = picks_[size_t(r)];
    SequenceSource& src = *sources_[size_t(p.channel)];
    int32_t* in = inputs + int64_t(r) * T_;
    int32_t* pos = positions ? positions + int64_t(r) * T_ : nullptr;
    src.fill(in, targets + int64_t(r) * T_, src.has_positions() ? pos : nullptr, p.index, 1);
    if (pos && !src.has_positions()) packing_positions(pos, in, 1, T_, eos_);
  }
}

// Token files: every target counts. SFT rows: each row's own, from its channel (the loader asks
// for the whole step's rows, so this walks the blend back to the step's start: at most a
// snapshot's stride of draws).
int64_t BlendedSource::count_targets(int64_t g, int64_t count) const {
  if (tokens_) return count * T_;
  std::vector<BlendIndex::Pick> picks(static_cast<size_t>(count));
  blend_->fill(g, int(count), picks.data());
  int64_t n = 0;
  for (const BlendIndex::Pick& p : picks) n += sources_[size_t(p.channel)]->count_targets(p.index, 1);
  return n;
}

// The loader asks right after fill() for the same rows: the picks are still there.
void BlendedSource::fill_channels(int32_t* channels, int64_t g, int count) {
  if (picks_g_ != g || int(picks_.size()) != count) {
    picks_.resize(size_t(count));
    blend_->fill(g, count, picks_.data());
    picks_g_ = g;
  }
  for (int r = 0; r < count; ++r) channels[r] = picks_[size_t(r)].channel;
}

std::string BlendedSource::describe() const {
  std::string s;
  for (size_t c = 0; c < names_.size(); ++c) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * weights_[c]);
    s += str_cat(c ? ", " : "", names_[c], " ", pct, " (", paths_[c], ", ", sources_[c]->num_sequences(),
                 tokens_ ? " sequences)" : " rows)");
  }
  return s;
}

}  // namespace zt
