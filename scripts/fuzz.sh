#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets (fuzz/, -DZT_FUZZ=ON, clang, ASan + UBSan) in build-fuzz
# and runs each for a fixed time, one after another, then prints per target the executions,
# executions per second and whether it found anything. Exit status 1 if any target did.
# usage: scripts/fuzz.sh [seconds per target (180)] [target ...]   (targets: fuzz_flags, ...)
# Findings (crashing inputs) land in build-fuzz/findings/<target>/; reproduce one with
#   build-fuzz/fuzz/<target> build-fuzz/findings/<target>/crash-...
# New corpus entries go to build-fuzz/corpus/<target>/; the seeds in fuzz/corpus/ are read only.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-180}
shift $(( $# > 0 ? 1 : 0 ))
all=(fuzz_flags fuzz_config fuzz_safetensors fuzz_tokenizer_gpt2 fuzz_tokenizer_hf fuzz_tokenizer_encode
     fuzz_token_shard fuzz_checkpoint fuzz_tokenize_jsonl fuzz_chat_template fuzz_jinja_render
     fuzz_tokenizer_pipeline fuzz_sft_cache fuzz_tokenizer_spm)
targets=("$@")
[ $# -gt 0 ] || targets=("${all[@]}")

pkgs=(clang libclang-rt-14-dev libomp-dev cmake libdnnl-dev nlohmann-json3-dev libgtest-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build=build-fuzz
cmake -S . -B "$build" -DZT_FUZZ=ON -DZT_WITH_CUDA=OFF -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" >/dev/null
cmake --build "$build" -j"${ZT_FUZZ_JOBS:-2}" --target fuzz_all 2>&1 | grep -E "error|warning: " || true

export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
found=0
summary=()
for t in "${targets[@]}"; do
  exe="$build/fuzz/$t"
  [ -x "$exe" ] || { echo "fuzz.sh: no target $t"; exit 2; }
  name=${t#fuzz_}
  work="$build/corpus/$t" out="$build/findings/$t" log="$build/logs/$t.log"
  mkdir -p "$work" "$out" "$(dirname "$log")"
  echo "fuzz.sh: $t for ${secs}s (log $log)"
  rc=0
  "$exe" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$out/" "$work" "fuzz/corpus/$name" >"$log" 2>&1 || rc=$?
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  time_s=$(grep -m1 'stat::average_exec_per_sec' "$log" | awk '{print $2}')
  artifacts=$(find "$out" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$artifacts" -gt 0 ]; then
    found=1; verdict="FOUND ($artifacts inputs in $out, exit $rc)"
    grep -m3 -E "ERROR: |FUZZ FINDING|runtime error|terminate called|Exception|what\(\)" "$log" | sed 's/^/    /' || true
  else
    verdict="nothing found"
  fi
  summary+=("$(printf '%-24s %12s execs %8s execs/s  corpus %5s  %s' "$t" "${execs:-?}" "${time_s:-?}" \
    "$(find "$work" -type f | wc -l)" "$verdict")")
done
echo
echo "fuzz.sh: ${secs}s per target"
printf '%s\n' "${summary[@]}"
exit $found
