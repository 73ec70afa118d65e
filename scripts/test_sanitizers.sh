#!/usr/bin/env bash
# test_sanitizers.sh: the ctest suite again, built with AddressSanitizer (+ LeakSanitizer) and
# UndefinedBehaviorSanitizer (-DZT_SANITIZE=ON, UBSan fatal) in build-asan: every unit test and the
# CLI scripts, which then drive the sanitized ztrain binary (the longest in their
# ZT_TEST_SUBSET=sanitizers subset, below; the few left out are named at the ctest call).
# Any report aborts the process, so the test that triggered it fails. scripts/test.sh runs this
# after the normal ctest run; alone it assumes the Debian packages are installed (scripts/setup.sh).
# usage: scripts/test_sanitizers.sh [extra ctest args]     (ZT_ASAN_BUILD_DIR picks the folder)
# -O1: sanitizer reports keep useful stacks, and the suite runs in about 2-3x the normal time.
# -g1: line tables only (file:line in every report frame, no variable locations): 17% less compile
# time than -g on the largest unity batch. Only the targets ctest runs are built (not bench/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${ZT_ASAN_BUILD_DIR:-build-asan}
start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DZT_SANITIZE=ON -DZT_WITH_CUDA=OFF >/dev/null  # CUDA under ASan needs protect_shadow_gap=0; the GPU kernels are checked by compute-sanitizer (bench/gpu_check.sh)
cmake --build "$build" -j"$(nproc)" --target ztrain zt_tests zt_dist_tests zt_cp_tests fuzz_smoke 2>&1 |
  grep -E "error|warning: " || true
test -x "$build/ztrain" && test -x "$build/zt_tests" || { echo "test_sanitizers: build failed"; exit 1; }
built=$(date +%s)

# abort_on_error / halt_on_error: a report kills the process (no "recovered" reports).
# tests/lsan.supp suppresses leaks inside third-party runtimes only (libgomp, oneDNN), never ztrain code.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp:print_suppressions=0
export OMP_NUM_THREADS=2
export OMP_WAIT_POLICY=passive  # two tests at a time (-j2): waiting threads sleep (scripts/test.sh)
# The tokenizer parity tests encode every 8th Brown document here (all of them in the plain pass).
export ZT_TEST_SAMPLE_EVERY=8
# The longest scripts run their sanitizer subset (docs/testing.md#sanitizer-run): every layout,
# schedule, ZeRO stage, resume path and feature still runs instrumented at least once, but with fewer
# training steps (tests/dist/train_*_test.py via disttest.py, resume_kill.sh, preempt.sh,
# multihost.sh), a layout case for one model where the plain pass runs it for two (train_*_test.py),
# and without repeats that vary only timing or numbers (resume_kill.sh: one kill point;
# long_context.sh: one RoPE scaling; preempt.sh: SIGINT / SIGUSR1, the same handler as SIGTERM).
# The full-length numeric equivalence ran in the plain pass, which never sets this.
export ZT_TEST_SUBSET=sanitizers
cd "$build"
rc=0
# Left out here (they ran in the plain pass; docs/testing.md#sanitizer-run):
# parity_torch*: PyTorch's side is most of the test and is not instrumented, and the ztrain code it
#   drives (GPT-2 / Llama training) runs under the sanitizers in the CLI and model tests;
# dist_train_families: every family's model code runs instrumented in zt_tests (ModelTest), its DDP
#   path in dist_train_dp; cli_spikes: the spike guard runs instrumented in zt_tests (SpikeGuard) and
#   in dist_train_tp's rollback; cli_long_context: RoPE scaling and the context stages run
#   instrumented in zt_tests (Rope, ContextStage, llama3 frequencies in ModelTest); cli_output_dir_lock:
#   file locking between processes, its time mostly waiting for a run to start and stop.
# -j2: two tests at a time, a test that needs both cores alone (PROCESSORS 2, CMakeLists.txt).
ctest --output-on-failure -j2 -E '^(parity_torch|dist_train_families$|cli_spikes$|cli_long_context$|cli_output_dir_lock$)' \
  "$@" || rc=$?
end=$(date +%s)
echo "test_sanitizers: build $((built - start)) s, ctest $((end - built)) s"
exit $rc
