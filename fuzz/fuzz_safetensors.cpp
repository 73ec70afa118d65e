// fuzz_safetensors.cpp: libFuzzer target for the safetensors reader (src/checkpoint/safetensors.cpp).
// The input is the whole file (u64 header length, JSON header, data), opened through a memfd;
// every tensor the reader accepts is then converted to fp32, which must stay inside the file.
#include <vector>

#include "checkpoint/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zt::fuzz::LeakCheck leaks(/*maps=*/true);
  zt::fuzz::MemFile file(zt::fuzz::as_view(data, size));
  zt::fuzz::expect_ok_or_error([&] {
    zt::SafetensorsFile f(file.path());
    for (const auto& [k, v] : f.metadata()) (void)(k.size() + v.size());
    std::vector<float> out;
    for (const zt::StEntry& e : f.entries()) {
      if (e.numel() < 0 || uint64_t(e.numel()) > size) zt::fuzz::finding("accepted a tensor larger than the file");
      if (f.find(e.name) == nullptr) zt::fuzz::finding("entry not found by its own name");
      out.assign(size_t(e.numel()) + 1, 0.f);                            // + 1: never a null destination
      zt::fuzz::expect_ok_or_error([&] { f.read_f32(e, out.data()); });  // unsupported dtypes throw
    }
  });
  return 0;
}
