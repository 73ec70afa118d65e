#!/usr/bin/env bash
# gpu_pack.sh: prepares .gpu/ (git-ignored) for bench/gpu_check.sh on a GPU machine that has the
# CUDA toolkit but not the CPU engine's libraries: gtest's sources (the kernel tests are built
# there), and zt_tests built here (full build with CUDA) with the Debian libraries it links,
# packed as .gpu/run.tar.xz, for the model-level GPU tests (tests/test_cuda_model.cpp).
#   bash bench/gpu_pack.sh [build dir (build)]      then carry .gpu with the GPU call
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
mkdir -p .gpu
[ -d .gpu/googletest ] || cp -r /usr/src/googletest .gpu/
cmake --build "$build" -j"$(nproc)" --target zt_tests >/dev/null
rm -rf .gpu/run && mkdir -p .gpu/run/lib
cp "$build/zt_tests" .gpu/run/ && strip .gpu/run/zt_tests
# The libraries a Debian build links that a CUDA image lacks (the CUDA ones it has).
ldd "$build/zt_tests" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+)\.so|cuda' |
  while read -r l; do cp -L "$l" .gpu/run/lib/; done
(cd .gpu && tar cJf run.tar.xz run && rm -rf run)
du -sh .gpu/run.tar.xz .gpu
