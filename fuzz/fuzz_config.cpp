// fuzz_config.cpp: libFuzzer target for the HF config.json reader (src/models/config.cpp). The
// input is the file; an accepted config is written back (config_to_json) and its derived sizes
// are computed, which must not overflow.
#include "fuzz_util.h"
#include "models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/true);
  zt::fuzz::MemFile file(zt::fuzz::as_view(data, size));
  zt::fuzz::expect_ok_or_error([&] {
    zt::ModelConfig c = zt::config_from_file(file.path());
    if (c.vocab_size <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.head_size <= 0 ||
        c.ffn <= 0 || c.max_position <= 0)
      zt::fuzz::finding("accepted a config with a non-positive dimension");
    volatile int qkv = c.qkv_dim();  // UBSan reports a signed overflow here
    (void)qkv;
    (void)zt::config_to_json(c, "float32").dump();
  });
  return 0;
}
