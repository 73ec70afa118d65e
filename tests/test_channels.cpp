// test_channels.cpp: named data channels (data/blend.h) and their losses
// (observe/channel_losses.h): the blend keeps every channel within one sequence of its share at
// every prefix, is deterministic and randomly addressable (resume), the loader over it splits a
// step over ranks like one process and restarts at a step exactly, every row carries its
// channel; the flags' bad input is one error each; the LM head's per-token losses sum to its
// loss (which they leave bit-identical); the per-channel sums follow the rows' channels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/blend.h"
#include "dist/communicator.h"
#include "kernels/cross_entropy.h"
#include "test_util.h"
#include "observe/channel_losses.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

std::string temp_prefix() { return "zt_chan_" + std::to_string(::getpid()) + "_"; }

// This process's token files, removed when it exits.
struct RemoveTempFiles {
  ~RemoveTempFiles() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec))
      if (e.path().filename().string().rfind(temp_prefix(), 0) == 0) fs::remove(e.path(), ec);
  }
} remove_temp_files;

// A headerless uint16 token file whose ids all lie in [lo, lo + span): rows tell their file.
// Named per process (ctest runs the tests of this file in parallel processes).
std::string token_file(const std::string& name, int n, int lo, int span) {
  const std::string p = (fs::temp_directory_path() / (temp_prefix() + name + ".bin")).string();
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = uint16_t(lo + (i * 7919 + 13) % span);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 2));
  return p;
}

TEST(Blend, EveryChannelWithinOneSequenceOfItsShareAtEveryPrefix) {
  Rng r(17);
  for (int trial = 0; trial < 60; ++trial) {
    const int K = 2 + int(r.below(7));
    std::vector<double> w;
    for (int c = 0; c < K; ++c) w.push_back(std::pow(r.uniform(), 3.0) + 1e-3);
    BlendIndex b(w);
    const std::vector<double> q = b.weights();
    std::vector<int64_t> n(size_t(K), 0);
    std::vector<BlendIndex::Pick> picks(20000);
    b.fill(0, int(picks.size()), picks.data());
    for (int64_t g = 0; g < int64_t(picks.size()); ++g) {
      const auto [c, k] = picks[size_t(g)];
      ASSERT_EQ(k, n[size_t(c)]) << "the index counts the channel's earlier draws";
      ++n[size_t(c)];
      for (int j = 0; j < K; ++j)
        ASSERT_LT(std::abs(double(n[size_t(j)]) - q[size_t(j)] * double(g + 1)), 1.0)
            << "trial " << trial << " K " << K << " after " << g + 1 << " channel " << j;
    }
  }
}

TEST(Blend, QuantisedWeightsAreTheGivenOnes) {
  BlendIndex b({0.7, 0.3});
  EXPECT_NEAR(b.weights()[0], 0.7, 1e-9);
  BlendIndex u({3, 1, 1, 5});  // not normalised: shares 0.3, 0.1, 0.1, 0.5
  EXPECT_NEAR(u.weights()[3], 0.5, 1e-9);
  std::vector<BlendIndex::Pick> p(10);
  u.fill(0, 10, p.data());
  std::map<int, int> count;
  for (auto& x : p) ++count[x.channel];
  EXPECT_EQ(count[0], 3);
  EXPECT_EQ(count[1], 1);
  EXPECT_EQ(count[2], 1);
  EXPECT_EQ(count[3], 5);
}

TEST(Blend, DeterministicAndRandomAccessEqualsSequential) {
  const std::vector<double> w{0.5, 0.25, 0.125, 0.125 + 1e-7};
  BlendIndex a(w), b(w);
  const int n = 3 * int(BlendIndex::kStride) + 777;
  std::vector<BlendIndex::Pick> seq(static_cast<size_t>(n)), other(static_cast<size_t>(n));
  a.fill(0, n, seq.data());
  b.fill(0, n, other.data());
  for (int g = 0; g < n; ++g) ASSERT_EQ(seq[size_t(g)].channel, other[size_t(g)].channel) << g;
  // Backwards, forwards past snapshots, and a fresh index jumping straight to the end.
  Rng r(5);
  for (int i = 0; i < 300; ++i) {
    const int64_t g = int64_t(r.below(uint64_t(n)));
    const BlendIndex::Pick p = a.at(g);
    ASSERT_EQ(p.channel, seq[size_t(g)].channel) << g;
    ASSERT_EQ(p.index, seq[size_t(g)].index) << g;
  }
  BlendIndex fresh(w);
  EXPECT_EQ(fresh.at(n - 1).index, seq[size_t(n - 1)].index);
}

// All (channel, row) a configuration sees in one step, sorted.
std::vector<std::vector<int32_t>> step_rows(BlendedSource& src, LoaderConfig c, int64_t step) {
  std::vector<std::vector<int32_t>> rows;
  for (int r = 0; r < c.world; ++r) {
    c.rank = r;
    DataLoader dl(src, c, step);
    for (int m = 0; m < c.accumulation; ++m) {
      const MicroBatch& mb = dl.next();
      EXPECT_EQ(mb.channels.size(), size_t(c.B));
      for (int b = 0; b < c.B; ++b) {
        std::vector<int32_t> row{mb.channels[size_t(b)]};
        row.insert(row.end(), mb.inputs.begin() + b * c.T, mb.inputs.begin() + (b + 1) * c.T);
        rows.push_back(row);
      }
    }
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

ChannelSpec two_channels(const std::string& weights = "") {
  const std::string a = token_file("web", 6000, 0, 100), b = token_file("code", 3000, 200, 100);
  return parse_channels("web=" + a + ",code=" + b, weights);
}

TEST(BlendedSource, RowsComeFromTheirChannelsFileInTheBlendsShares) {
  BlendedSource src(two_channels("web=1,code=3"), 512, 16, true, 9);
  EXPECT_EQ(src.num_channels(), 2);
  EXPECT_EQ(src.names(), (std::vector<std::string>{"web", "code"}));
  EXPECT_NEAR(src.weights()[1], 0.75, 1e-9);
  LoaderConfig c;
  c.B = 4;
  c.T = 16;
  c.accumulation = 2;
  c.seed = 9;
  DataLoader dl(src, c, 0);
  int per[2] = {0, 0};
  for (int k = 0; k < 50; ++k) {
    const MicroBatch& mb = dl.next();
    for (int b = 0; b < c.B; ++b) {
      const int ch = mb.channels[size_t(b)];
      ++per[ch];
      for (int t = 0; t < c.T; ++t) {
        const int32_t id = mb.inputs[size_t(b * c.T + t)];
        ASSERT_TRUE(ch == 0 ? id < 100 : id >= 200) << "row " << b << " of micro-batch " << k;
      }
    }
  }
  EXPECT_EQ(per[0], 50);  // 200 rows at 1:3, exactly (within one at every prefix)
  EXPECT_EQ(per[1], 150);
}

TEST(BlendedSource, DefaultWeightsFollowTheFilesSizes) {
  BlendedSource src(two_channels(), 512, 16, false, 0);
  const double a = double(src.channel_sequences(0)), b = double(src.channel_sequences(1));
  EXPECT_NEAR(src.weights()[0], a / (a + b), 1e-9);
  EXPECT_EQ(src.num_sequences(), int64_t(a + b));
}

TEST(BlendedSource, RanksSplitTheStepLikeOneProcessAndResumeIsExact) {
  BlendedSource src(two_channels("0.6,0.4"), 512, 8, true, 3);
  LoaderConfig one;
  one.B = 2;
  one.T = 8;
  one.accumulation = 8;
  one.seed = 3;
  for (int64_t step : {0, 5, 300}) {  // 300: well past several snapshots and both files' epochs
    const auto ref = step_rows(src, one, step);
    for (auto [world, accum, B] : {std::tuple{2, 4, 2}, {4, 2, 2}, {4, 1, 4}, {2, 1, 8}}) {
      LoaderConfig c = one;
      c.world = world;
      c.accumulation = accum;
      c.B = B;
      EXPECT_EQ(step_rows(src, c, step), ref) << "world " << world << " accum " << accum << " B " << B;
    }
  }
  // A loader started at step 9 continues the stream of one started at 0 (the cursor's resume).
  DataLoader full(src, one, 0);
  std::vector<std::vector<int32_t>> stream, chans;
  for (int k = 0; k < 120; ++k) {
    const MicroBatch& mb = full.next();
    stream.push_back(mb.inputs);
    chans.push_back(mb.channels);
  }
  DataLoader resumed(src, one, 9);
  for (int k = 72; k < 120; ++k) {
    const MicroBatch& mb = resumed.next();
    ASSERT_EQ(mb.inputs, stream[size_t(k)]) << k;
    ASSERT_EQ(mb.channels, chans[size_t(k)]) << k;
  }
}

// A source whose row g has g % 7 counted targets (SFT rows count their own).
class CountingRows final : public SequenceSource {
 public:
  explicit CountingRows(int64_t n) : n_(n) {}
  int64_t num_sequences() const override { return n_; }
  int length() const override { return 4; }
  bool has_positions() const override { return false; }
  void fill(int32_t* in, int32_t* tg, int32_t*, int64_t g, int count) override {
    for (int i = 0; i < 4 * count; ++i) in[i] = tg[i] = int32_t(g + i / 4);
  }
  int64_t count_targets(int64_t g, int64_t count) const override {
    int64_t c = 0;
    for (int64_t s = 0; s < count; ++s) c += (g + s) % 7;
    return c;
  }

 private:
  int64_t n_;
};

TEST(BlendedSource, CountsEachRowsTargetsFromItsChannel) {
  CountingRows a(50), b(30);
  ChannelSpec spec = parse_channels("chat=a.jsonl,math=b.jsonl", "1,2");
  BlendedSource src(spec, {&a, &b}, 4);
  EXPECT_EQ(src.num_sequences(), 80);
  BlendIndex ref({1, 2});
  for (int64_t g : {0, 5, 9000, 3}) {  // forwards past a snapshot and back
    int64_t want = 0;
    for (int64_t s = 0; s < 24; ++s) want += ref.at(g + s).index % 7;
    EXPECT_EQ(src.count_targets(g, 24), want) << g;
  }
  std::vector<int32_t> in(4 * 3), tg(in.size()), ch(3);
  src.fill(in.data(), tg.data(), nullptr, 10, 3);
  src.fill_channels(ch.data(), 10, 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ch[size_t(r)], ref.at(10 + r).channel);
    EXPECT_EQ(in[size_t(4 * r)], ref.at(10 + r).index);
  }
}

std::string parse_error(const std::string& files, const std::string& weights = "") {
  try {
    parse_channels(files, weights);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChannelSpec, PlainFileIsOneUnnamedChannel) {
  const ChannelSpec s = parse_channels("data/train.bin", "");
  EXPECT_FALSE(s.named);
  ASSERT_EQ(s.channels.size(), 1u);
  EXPECT_EQ(s.channels[0].path, "data/train.bin");
  // A file whose name holds '=' is still a plain file when it exists.
  const std::string odd = token_file("a=b", 100, 0, 10);
  EXPECT_FALSE(parse_channels(odd, "").named);
}

TEST(ChannelSpec, BadInputIsOneClearError) {
  EXPECT_NE(parse_error("web=a.bin,b.bin").find("has no channel name"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,web=b.bin").find("names channel web twice"), std::string::npos);
  EXPECT_NE(parse_error("w eb=a.bin").find("must be 1-64 letters"), std::string::npos);
  EXPECT_NE(parse_error("web=").find("has no file"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,chat=c.jsonl").find("is SFT records (.jsonl) but channel web is a token file"),
            std::string::npos);
  EXPECT_NE(parse_error("chat=c.jsonl,web=a.bin").find("is a token file but channel chat is SFT records"),
            std::string::npos);
  EXPECT_TRUE(parse_channels("chat=c.jsonl,math=m.jsonl", "").sft);
  EXPECT_FALSE(parse_channels("web=a.bin,code=b.bin", "").sft);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "1").find("has 1 weights for 2 channels"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "1,-1").find("must be > 0"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "0,0").find("must be > 0"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "1,x").find("is not a number"), std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "web=1,text=2").find("which --train_file does not have"),
            std::string::npos);
  EXPECT_NE(parse_error("web=a.bin,code=b.bin", "web=1,web=2").find("gives channel web twice"), std::string::npos);
  EXPECT_NE(parse_error("a.bin", "1").find("needs named channels"), std::string::npos);
  ChannelSpec s = parse_channels("web=a.bin,code=b.bin", "code=3,web=1");
  EXPECT_EQ(s.weights, (std::vector<double>{1, 3}));
  try {
    channels_identity(parse_channels("web=/nonexistent/a.bin", ""));
    ADD_FAILURE() << "a missing file passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--train_file channel web: /nonexistent/a.bin"), std::string::npos)
        << e.what();
  }
}

TEST(ChannelSpec, IdentityFollowsFilesNamesAndWeights) {
  const ChannelSpec s = two_channels();
  const FileIdentity a = channels_identity(s);
  EXPECT_EQ(a.to_json(), channels_identity(two_channels()).to_json());
  EXPECT_NE(a.to_json(), channels_identity(two_channels("1,1")).to_json());
  ChannelSpec renamed = s;
  renamed.channels[0].name = "text";
  EXPECT_NE(a.to_json(), channels_identity(renamed).to_json());
}

TEST(LmHeadTokenLosses, SumToTheLossAndLeaveItBitIdentical) {
  const int64_t N = 37;
  const int C = 16, V = 50;
  const auto x = test::randn(size_t(N) * C, 1), w = test::randn(size_t(V) * C, 2, 0.3);
  std::vector<int32_t> tg(static_cast<size_t>(N));
  Rng r(3);
  for (auto& t : tg) t = r.below(5) == 0 ? kernels::kIgnoreIndex : int32_t(r.below(V));
  std::vector<float> scratch(size_t(8) * V), dx(size_t(N) * C), dw(size_t(V) * C);
  const kernels::LmHeadDims d{N, C, V, 8};
  int64_t c0 = 0, c1 = 0;
  const double plain =
      kernels::lmhead_ce(dx.data(), dw.data(), x.data(), w.data(), tg.data(), d, 1.0f, scratch.data(), &c0);
  std::vector<double> tok(static_cast<size_t>(N), -1.0);
  std::fill(dw.begin(), dw.end(), 0.f);
  const double with = kernels::lmhead_ce(dx.data(), dw.data(), x.data(), w.data(), tg.data(), d, 1.0f, scratch.data(),
                                         &c1, nullptr, tok.data());
  EXPECT_EQ(plain, with);
  EXPECT_EQ(c0, c1);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (tg[size_t(i)] == kernels::kIgnoreIndex) {
      EXPECT_EQ(tok[size_t(i)], 0.0);
    }
    EXPECT_GE(tok[size_t(i)], 0.0);
    sum += tok[size_t(i)];
  }
  EXPECT_NEAR(sum, plain, 1e-9 * plain);
}

TEST(ChannelLosses, SumsFollowTheRowsChannelsAndSkipIgnoredTargets) {
  ChannelLosses cl({"web", "code"}, 2, 3);
  MicroBatch mb;
  mb.targets = {1, 2, kernels::kIgnoreIndex, 4, 5, 6};
  mb.channels = {1, 0};
  double* t = cl.token_losses();
  for (int i = 0; i < 6; ++i) t[i] = i + 1;
  cl.add(mb.channels, mb.targets.data());
  EXPECT_EQ(cl.sums(), (std::vector<double>{4 + 5 + 6, 1 + 2, 3, 2}));
  auto comm = dist::make_world(dist::Backend::local);
  const auto& out = cl.reduce(*comm);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_STREQ(out[0].first, "loss/web");
  EXPECT_DOUBLE_EQ(out[0].second, 5.0);
  EXPECT_DOUBLE_EQ(out[1].second, 1.5);
  EXPECT_EQ(cl.sums(), (std::vector<double>(4, 0.0)));  // a new window
  EXPECT_TRUE(cl.reduce(*comm).empty());                // no tokens: no entries
}

}  // namespace
}  // namespace zt
