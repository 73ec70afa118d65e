#!/usr/bin/env bash
# setup.sh [EXTRA_PACKAGES...]: installs ztrain's Debian build dependencies (only those
# missing) plus any extra packages named (the test command adds the PyTorch oracle), and
# builds it. Used by both README commands; safe to run again. ZT_BUILD_DIR picks the build folder;
# ZT_BUILD_TARGETS names the targets to build (default: all; the quickstart builds ztrain only).
set -euo pipefail
cd "$(dirname "$0")/.."
# libpcre2-dev, libutf8proc-dev, pkg-config: tokenizer regexes and Unicode normalization (docs/tokenizers.md);
# libsentencepiece-dev: tokenizer.model files, with SentencePiece's own ids (docs/tokenizers.md#sentencepiece);
# sentencepiece: its spm_train / spm_encode make the tokenizer.model parity fixtures (tests/tokenizer/spm_fixtures.sh);
# libhwy-dev: run-time SIMD dispatch of the kernels (docs/kernels.md#dispatch);
# libxxhash-dev: checkpoint and flash snapshot checksums (docs/checkpoints.md#the-folder-checkpoint-n);
# libpng-dev: encodes the loss plot (docs/observability.md#png-loss-plot);
# liburing-dev: io_uring, the asynchronous file I/O of offload to disk (docs/offload.md).
pkgs=(build-essential cmake libdnnl-dev nlohmann-json3-dev libgtest-dev libopenmpi-dev openmpi-bin pkg-config
      libpcre2-dev libutf8proc-dev libsentencepiece-dev sentencepiece libxxhash-dev libhwy-dev libpng-dev liburing-dev
      "$@")
missing=()
# The native architecture named too: with a foreign one (arm64 for tests/cross) installed beside it,
# a bare name is ambiguous to dpkg.
arch=$(dpkg --print-architecture)
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$arch" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm often come preinstalled from outside Debian (NodeSource, npm 11); asking apt
# for Debian's npm then conflicts with that nodejs. Install them only when the commands are absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
build=${ZT_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${ZT_CMAKE_ARGS:-} >/dev/null
targets=()
for t in ${ZT_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}" 2>&1 | grep -E "error|warning: " || true
test -x "$build/ztrain" || { echo "setup: build failed"; exit 1; }
