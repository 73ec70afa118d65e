#!/usr/bin/env bash
# gpu_pack.sh: prepares .gpu/ (git-ignored) for bench/gpu_check.sh on a GPU machine that has the
# CUDA toolkit but not the CPU engine's libraries: gtest's sources (the kernel tests are built
# there), and zt_tests and ztrain built here (full build with CUDA) with the Debian libraries they
# link and the quickstart's tokens, packed as .gpu/run.tar.xz, for the model-level GPU tests
# (tests/test_cuda_model.cpp) and the training runs of bench/gpu_train.sh; and .gpu/peft for
# bench/gpu_peft_check.py (PEFT loading ztrain's adapter folders).
#   bash bench/gpu_pack.sh [build dir (build)]      then carry .gpu with the GPU call
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
mkdir -p .gpu
[ -d .gpu/googletest ] || cp -r /usr/src/googletest .gpu/
cmake --build "$build" -j"$(nproc)" --target zt_tests ztrain >/dev/null
rm -rf .gpu/run && mkdir -p .gpu/run/lib .gpu/run/data
cp "$build/zt_tests" "$build/ztrain" .gpu/run/ && strip .gpu/run/zt_tests .gpu/run/ztrain
# The libraries a Debian build links that a CUDA image lacks (the CUDA ones it has).
ldd "$build/ztrain" "$build/zt_tests" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+)\.so|cuda' | while read -r l; do cp -L "$l" .gpu/run/lib/; done
# The quickstart's tokens (bench/gpu_train.sh trains on them), when scripts/quickstart.sh made them.
tokens=.cache/corpus/bpe-16384-tokens
[ -f "$tokens/train.bin" ] && cp "$tokens/train.bin" "$tokens/validation.bin" .gpu/run/data/
(cd .gpu && tar cJf run.tar.xz run && rm -rf run)
# Issue 24's PEFT check (bench/gpu_peft_check.py): tiny models, ztrain's adapter folders on them and the
# adapter-applied logits (a dense Llama all-linear, a Mixtral all-linear, a Qwen2-MoE's experts).
rm -rf .gpu/peft && mkdir -p .gpu/peft
for c in llama_gqa_all_linear mixtral_all_linear qwen2moe_experts; do
  /usr/bin/python3 tests/parity/lora_parity.py --ztrain "$build/ztrain" --only "$c" --pack .gpu/peft >/dev/null ||
    echo "gpu_pack: lora_parity $c failed"
done
du -sh .gpu/run.tar.xz .gpu
