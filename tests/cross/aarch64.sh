#!/usr/bin/env bash
# aarch64.sh [--install]: proves the aarch64 build without ARM hardware (docs/kernels.md#aarch64).
# Cross-compiles ztrain and its unit tests with Debian's g++-aarch64-linux-gnu against the :arm64
# multiarch -dev packages (Highway, GoogleTest, PCRE2, utf8proc, xxHash, libpng; oneDNN's -dev package
# cannot be installed beside the amd64 one (dnnl_config.h differs), so its arm64 headers are
# unpacked into .cache/arm64-sysroot; without MPI: Debian's OpenMPI -dev cannot be installed for
# two architectures at once either, nor can libsentencepiece-dev, so the arm64 ztrain refuses a
# tokenizer.model with an error that says so), then runs under
# qemu-aarch64-static the tests that need no PyTorch:
#   - the kernel tests at every Highway target qemu offers (NEON, SVE, SVE2 ... as emulated),
#   - the model tests: gradients against finite differences, the KV decoder against the full
#     forward, recomputation, conversions, optimizers, tokenizers, checkpoints,
#   - a short training run whose per-step losses must equal the x86 run's within 1e-4.
# Skips (exit 77) when the cross tools are absent; --install installs them first (root, apt).
# Not part of ctest: a cross build of everything takes longer than CI should spend on it.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=(g++-aarch64-linux-gnu qemu-user-static libc6:arm64 libdnnl2:arm64 libhwy-dev:arm64 libgtest-dev:arm64
      libpcre2-dev:arm64 libutf8proc-dev:arm64 libxxhash-dev:arm64 libpng-dev:arm64 libgomp1:arm64)
sysroot=$PWD/.cache/arm64-sysroot
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${1:-}" != --install ]; then
    echo "aarch64.sh: skipped: missing ${missing[*]} (run with --install to install them)"
    exit 77
  fi
  dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -f "$sysroot/usr/include/oneapi/dnnl/dnnl_config.h" ]; then
  if [ "${1:-}" != --install ]; then
    echo "aarch64.sh: skipped: no arm64 oneDNN headers in $sysroot (run with --install)"
    exit 77
  fi
  rm -rf "$sysroot.tmp" && mkdir -p "$sysroot.tmp"
  (cd "$sysroot.tmp" && apt-get download libdnnl-dev:arm64 >/dev/null && dpkg -x libdnnl-dev_*_arm64.deb . && rm -f ./*.deb)
  rm -rf "$sysroot" && mv "$sysroot.tmp" "$sysroot"
fi
build=${ZT_CROSS_BUILD_DIR:-build-aarch64}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DZT_WITH_MPI=OFF -DZT_WITH_CUDA=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/tests/cross/aarch64-toolchain.cmake" -DCMAKE_CXX_FLAGS="-isystem $sysroot/usr/include" \
  -DDNNL_LIB=/usr/lib/aarch64-linux-gnu/libdnnl.so.2 >/dev/null
cmake --build "$build" -j"$(nproc)" --target zt_tests ztrain 2>&1 | grep -E "error|warning: " || true
test -x "$build/ztrain" || { echo "aarch64.sh: cross build failed"; exit 1; }
file "$build/ztrain" | grep -q aarch64 || { echo "aarch64.sh: $build/ztrain is not an aarch64 binary"; exit 1; }
# The arm64 loader and libraries from the multiarch root (libc6:arm64), not the cross toolchain's
# /usr/aarch64-linux-gnu: the two glibc builds differ (2.36-8cross1 vs 2.36-9+deb12u14), and the
# cross ld.so with the multiarch libc.so.6 hangs in the first pthread_create (ztrain's signal-watcher
# thread), which is why no training run had finished under qemu before.
run() { QEMU_LD_PREFIX=/ qemu-aarch64-static "$@"; }
echo "kernel levels under qemu: $(run "$build/ztrain" info --json)"
# Three parts, shortest first, each timed (ZT_AARCH64_PARTS picks some: losses,kernels,models):
# emulated, the whole unit-test list ran for over 50 minutes without a sign of progress.
parts=${ZT_AARCH64_PARTS:-losses,kernels,models}
has() { [[ ",$parts," == *",$1,"* ]]; }
t0=$SECONDS
if has losses; then
  # A short training run: the same losses as this machine's (x86) build within 1e-4 relative.
  x86=${ZT_BUILD_DIR:-build}/ztrain
  [ -x "$x86" ] || { echo "aarch64.sh: $x86 missing: build the x86 ztrain first (scripts/setup.sh)"; exit 1; }
  w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
  /usr/bin/python3 -c "import sys; sys.stdout.buffer.write(bytes([(i * 7 + i // 13) % 251 if j == 0 else 0 for i in range(20000) for j in (0, 1)]))" > "$w/tok.bin"
  args=(train --model_config_path tests/fixtures/configs/tiny-llama-gqa-4l.json --train_file "$w/tok.bin"
        --per_device_train_batch_size 4 --model_max_length 64 --max_steps 12 --logging_steps 1 --learning_rate 3e-3
        --save_strategy no --peak_gflops 1 --seed 7 --overwrite_output_dir)
  OMP_NUM_THREADS=1 "$x86" "${args[@]}" --output_dir "$w/x86" >/dev/null
  OMP_NUM_THREADS=1 run "$build/ztrain" "${args[@]}" --output_dir "$w/arm" >/dev/null
  /usr/bin/python3 - "$w" <<'P'
import json, sys
w = sys.argv[1]
def losses(d):
    return [json.loads(l)["loss"] for l in open(f"{w}/{d}/metrics.jsonl") if '"loss"' in l and '"step"' in l]
a, b = losses("x86"), losses("arm")
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"aarch64 vs x86 training losses, 12 steps: worst relative difference {worst:.2e} (bound 1e-4)")
sys.exit(0 if worst <= 1e-4 else 1)
P
  echo "aarch64: losses done at $((SECONDS - t0)) s"
fi
# The unit tests that need neither PyTorch nor MPI nor the npm fixtures (those skip themselves).
# One thread: under qemu-user OpenMP barriers between emulated threads crawl (minutes per test).
# Each test's name is printed as it runs, so a slow one shows. The model tests are parameterized
# (Archs/ModelTest.<test>/<family>), hence the leading * in their pattern.
kernels='Isa*:LayerNorm*:RmsNorm*:Gelu*:SwiGlu*:Rope*:Embedding*:Bias*:Add*:Attention*:LmHead*:AdamW*:Clipping*'
kernels+=':Schedule*:Convert*:Gemm*'
models='Recompute*:*ModelTest.*:HfSizes*:CheckpointTest*:Config*:Safetensors*:Tensor*:Tokenizer*'
for part in kernels models; do
  has $part || continue
  filter=${!part}
  OMP_NUM_THREADS=1 run "$build/zt_tests" --gtest_filter="$filter"
  echo "aarch64: $part done at $((SECONDS - t0)) s"
done
echo "aarch64: parts $parts passed"
