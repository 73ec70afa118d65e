// bench_attention.cpp: GPU attention throughput (kernels/cuda/attention_cuda.h). Each case is
// timed with CUDA events, 3 warm-ups, median of 10. FLOPs count the causal half of the score
// matrix: forward 4 B NH T^2 HS / 2 (QK^T and PV), backward 2.5x that (five products).
#include "bench_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/attention_cuda.h"

namespace {

using zt::DeviceBuffer;
using zt::kernels::AttnDims;

struct Shape {
  const char* name;
  int B, NH, KVH, T, HS;
};

// Uniform values of unit variance from a counter hash: fast for 100M elements, never all zero.
std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    v[i] = float((double(x >> 11) / double(1ull << 53) * 2.0 - 1.0) * 1.7320508);
  }
  return v;
}

template <class F>
double median_ms(F&& run) {
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t start, stop;
  ZT_CUDA_CHECK(cudaEventCreate(&start));
  ZT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(10);
  for (float& m : ms) {
    ZT_CUDA_CHECK(cudaEventRecord(start));
    run();
    ZT_CUDA_CHECK(cudaEventRecord(stop));
    ZT_CUDA_CHECK(cudaEventSynchronize(stop));
    ZT_CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  zt::device_synchronize();  // surfaces an asynchronous kernel fault here, not later
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[4] + ms[5]);
}

struct Buffers {
  AttnDims d;
  size_t n_qkv, n_out, n_lse;
  DeviceBuffer qkv, dout, out, lse, dqkv;
  explicit Buffers(const Shape& s)
      : d{s.B, s.T, s.NH, s.KVH, s.HS},
        n_qkv(size_t(s.B) * s.T * d.row_stride()),
        n_out(size_t(s.B) * s.T * s.NH * s.HS),
        n_lse(size_t(s.B) * s.NH * s.T),
        qkv(n_qkv * 4, "bench qkv"),
        dout(n_out * 4, "bench dout"),
        out(n_out * 4, "bench out"),
        lse(n_lse * 4, "bench lse"),
        dqkv(n_qkv * 4, "bench dqkv") {
    const std::vector<float> q = random_floats(n_qkv, 1), g = random_floats(n_out, 2);
    zt::copy_to_device(qkv.data(), q.data(), n_qkv * 4);
    zt::copy_to_device(dout.data(), g.data(), n_out * 4);
  }
  void forward(bool bf16) {
    zt::kernels::cuda::attention_forward(out.as<float>(), lse.as<float>(), qkv.as<float>(), d, bf16);
  }
  void backward(bool bf16) {
    zt::kernels::cuda::attention_backward(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(),
                                          lse.as<float>(), d, bf16);
  }
  std::vector<float> out_host() {
    zt::device_synchronize();
    std::vector<float> h(n_out);
    zt::copy_to_host(h.data(), out.data(), n_out * 4);
    return h;
  }
};

void bench_shape(FILE* table, const Shape& s, bool check) {
  Buffers buf(s);
  const double fwd_flop = 4.0 * s.B * s.NH * double(s.T) * s.T * s.HS / 2;
  for (bool bf16 : {true, false}) {
    const char* mode = bf16 ? "bf16" : "fp32";
    const double f = median_ms([&] { buf.forward(bf16); });
    std::fprintf(table, "attention_fwd_%s_%s %.3f ms %.1f TFLOP/s\n", mode, s.name, f, fwd_flop / (f * 1e9));
    const double fb = median_ms([&] {
      buf.forward(bf16);
      buf.backward(bf16);
    });
    std::fprintf(table, "attention_fwdbwd_%s_%s %.3f ms %.1f TFLOP/s\n", mode, s.name, fb, 3.5 * fwd_flop / (fb * 1e9));
  }
  if (!check) return;
  buf.forward(true);
  const std::vector<float> lo = buf.out_host();
  buf.forward(false);
  const std::vector<float> hi = buf.out_host();
  double num = 0, den = 0;
  for (size_t i = 0; i < lo.size(); ++i) {
    num += (double(lo[i]) - hi[i]) * (double(lo[i]) - hi[i]);
    den += double(hi[i]) * hi[i];
  }
  std::fprintf(table, "attention_check %.3e\n", den > 0 && std::isfinite(num) ? std::sqrt(num / den) : INFINITY);
}

}  // namespace

void bench_attention(FILE* table) {
  bench_shape(table, {"B4_NH16_T4096_HS128", 4, 16, 16, 4096, 128}, true);
  bench_shape(table, {"gpt2_B8_NH12_T1024_HS64", 8, 12, 12, 1024, 64}, false);
  std::fflush(table);
}
