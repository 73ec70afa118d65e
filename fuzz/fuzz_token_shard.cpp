// fuzz_token_shard.cpp: libFuzzer target for token files (src/data/token_data.cpp): ztrain
// shards (64-byte ZTTOKENS header) and headerless uint16 files. The input is the file, opened
// through a memfd with a vocabulary of 70000 ids; an accepted file is read through the window
// sampler as the trainer does (which requires at least one window).
#include <vector>

#include "data/token_data.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::MemFile file(zt::fuzz::as_view(data, size));
  zt::fuzz::expect_ok_or_error([&] {
    zt::TokenFile f(file.path(), 70000);
    if (f.size() < 2) zt::fuzz::finding("accepted a token file with fewer than 2 tokens");
    const int T = 1 + int(size % 5);
    for (bool shuffle : {false, true}) {
      zt::WindowSampler s(f, T, shuffle, 1234);
      if (s.num_windows() <= 0) continue;  // the trainer and eval reject such files first
      std::vector<int32_t> in(size_t(3) * T), tg(size_t(3) * T);
      s.fill(in.data(), tg.data(), s.num_windows() - 1, 3);
      for (int32_t id : in)
        if (id < 0 || id >= 70000) zt::fuzz::finding("sampler returned an id outside the vocab");
    }
  });
  return 0;
}
