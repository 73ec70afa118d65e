#!/usr/bin/env bash
# gpu_check.sh: every GPU check in one call, for a machine with an NVIDIA GPU and the CUDA
# toolkit (docs/gpu.md). Builds the CUDA kernels, their tests and their benchmark on that machine
# (ZT_CUDA_ONLY: no oneDNN, Highway or MPI needed there), runs the tests (then once more under
# compute-sanitizer's memcheck where it works), the kernel benchmark and the PyTorch peer on the
# same GPU, and prints one summary table last. Writes logs to $OUT (default /tmp/gpu_check).
#   bash bench/gpu_check.sh            # gtest from ZT_GTEST_SOURCE, default .gpu/googletest
# Prepare .gpu/ (gtest's sources, the model tests built here) with bench/gpu_pack.sh, and carry
# .gpu to the GPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)

note "== machine"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>&1 | tee -a "$summary"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
note "nvcc: $("$nvcc_bin" --version 2>&1 | tail -1); cmake: $(cmake --version 2>&1 | head -1); c++: $(c++ --version 2>&1 | head -1)"

note "== build (ZT_CUDA_ONLY)"
gtest="${ZT_GTEST_SOURCE:-$PWD/.gpu/googletest}"
build=build-gpu
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S . -B "$build" "${gen[@]}" -DZT_CUDA_ONLY=ON -DZT_GTEST_SOURCE="$gtest" -DCMAKE_CUDA_COMPILER="$nvcc_bin" \
     >"$out/configure.log" 2>&1 && cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1; then
  bin="$build"
  note "built on this machine in $(($(date +%s) - t0)) s"
else
  tail -30 "$out/configure.log" "$out/build.log"
  bin=.gpu/prebuilt
  note "BUILD FAILED here (logs in $out); falling back to the binaries carried in $bin"
fi

note "== tests"
timeout 300 "$bin/zt_cuda_tests" >"$out/tests.log" 2>&1
rc=$?
grep -E '^\[  (FAILED|PASSED|SKIPPED) ' "$out/tests.log" | tee -a "$summary"
grep -B3 -A12 'Failure' "$out/tests.log" | head -80
note "zt_cuda_tests rc=$rc"
if command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 5 "$bin/zt_cuda_tests" >"$out/memcheck.log" 2>&1
  note "memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
fi

note "== the model on the GPU against the CPU (zt_tests built by bench/gpu_pack.sh)"
if [ -f .gpu/run.tar.xz ]; then
  rm -rf /tmp/zt_run && mkdir -p /tmp/zt_run && tar xJf .gpu/run.tar.xz -C /tmp/zt_run
  LD_LIBRARY_PATH="/tmp/zt_run/run/lib:${LD_LIBRARY_PATH:-}" OMP_NUM_THREADS=8 timeout 300 \
    /tmp/zt_run/run/zt_tests --gtest_filter='*Cuda*' >"$out/model.log" 2>&1
  rc=$?
  grep -E 'worst per-step|gradient rel|^\[  (FAILED|PASSED|SKIPPED) ' "$out/model.log" | tee -a "$summary"
  grep -B2 -A8 'Failure' "$out/model.log" | head -60
  note "zt_tests *Cuda* rc=$rc"
else
  note "(no .gpu/run.tar.xz: run bench/gpu_pack.sh first)"
fi

note "== PEFT loads ztrain's adapter folders (bench/gpu_peft_check.py)"
if [ -d .gpu/peft ]; then
  timeout 240 python3 bench/gpu_peft_check.py .gpu/peft 2>&1 | tee "$out/peft.log" | grep -E '^peft_check' >>"$summary"
else
  note "(no .gpu/peft: run bench/gpu_pack.sh first)"
fi

note "== kernel benchmark"
timeout 180 "$bin/zt_cuda_bench" 2>&1 | tee "$out/bench.log" >>"$summary"

note "== PyTorch peer on the same GPU"
PYTHONUNBUFFERED=1 timeout 240 python3 bench/gpu/torch_peer.py ${ZT_TORCH_PEER_ARGS:-} 2>&1 | tee "$out/torch.log" | grep -E '^(torch|error)' >>"$summary"

note "== total $(($(date +%s) - t0)) s"
echo
echo "================ summary ================"
cat "$summary"
