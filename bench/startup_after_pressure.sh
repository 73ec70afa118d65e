#!/usr/bin/env bash
# startup_after_pressure.sh: ztrain's start-up right after a memory-heavy process, the case that
# used to take 4-11 s instead of about 1 s (docs/memory.md, "Start-up after memory pressure").
# Each run: a helper touches --gib GiB and exits, --gap seconds pass (a person starting the next
# command; meanwhile the guest reports freed 2 MiB blocks to the host, which drops them), then
# `ztrain train` runs one step of GPT-2 124M from random init (B=8, T=256). Prints one row per
# run: start-up, the part of it spent initialising weights, the rest, and what /proc/vmstat and
# the page-reporting counters saw (THP faults, compaction stalls, MiB reported during the gap).
# usage: bench/startup_after_pressure.sh [--ztrain build/ztrain] [--runs 10] [--gib 12] [--gap 15]
set -euo pipefail
cd "$(dirname "$0")/.."
Z=build/ztrain runs=10 gib=12 gap=15
while [ $# -gt 0 ]; do
  case "$1" in
    --ztrain) Z=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --gap) gap=$2; shift 2 ;;
    *) echo "usage: $0 [--ztrain BIN] [--runs N] [--gib GiB] [--gap SECONDS]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The pressure helper in C: Python would take half a minute to touch 12 GiB.
cat > "$work/pressure.c" <<'EOF'
#include <stdlib.h>
#include <string.h>
int main(int argc, char** argv) {
  size_t n = (size_t)atol(argv[1]) << 30;
  char* p = malloc(n);
  if (!p) return 1;
  memset(p, 1, n);
  return p[n / 2] == 1 ? 0 : 1;
}
EOF
cc -O2 -o "$work/pressure" "$work/pressure.c"
# Random GPT-2 tokens (nanoGPT's headerless uint16): enough for one step.
python3 -c "import random, array; random.seed(1); array.array('H', (random.randrange(50257) for _ in range(100000))).tofile(open('$work/train.bin', 'wb'))"
vm() { awk -v k="$1" '$1 == k {print $2}' /proc/vmstat; }
rep=/sys/module/page_reporting/parameters/reported_kib
reported() { if [ -r $rep ]; then cat $rep; else echo 0; fi; }
echo "$Z, GPT-2 124M B=8 T=256, each run after a process touched $gib GiB and ${gap} s passed"
echo "THP: enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
printf "%4s %10s %10s %10s %10s %14s %12s\n" run start-up weights rest thp_faults compact_stalls reported_MiB
fast=0
rests=()
for i in $(seq 1 "$runs"); do
  "$work/pressure" "$gib"
  r0=$(reported)
  sleep "$gap"
  r1=$(reported) t0=$(vm thp_fault_alloc) c0=$(vm compact_stall)
  line=$("$Z" train --model_config_path bench/configs/gpt2-124m.json --train_file "$work/train.bin" \
    --per_device_train_batch_size 8 --model_max_length 256 --max_steps 1 --save_strategy no --report_to none \
    --output_dir "$work/out" --overwrite_output_dir 2>&1 | grep '^start-up:')
  t1=$(vm thp_fault_alloc) c1=$(vm compact_stall)
  # "start-up: S s from launch to the first step (W s of it reading or initialising weights)"
  s=$(echo "$line" | awk '{print $2}') w=$(echo "$line" | sed 's/.*(\([0-9.]*\) s of it.*/\1/')
  rest=$(awk -v s="$s" -v w="$w" 'BEGIN {printf "%.3f", s - w}')
  rests+=("$rest")
  awk -v r="$rest" 'BEGIN {exit !(r < 1)}' && fast=$((fast + 1))
  printf "%4d %10s %10s %10s %10d %14d %12d\n" "$i" "$s" "$w" "$rest" $((t1 - t0)) $((c1 - c0)) $(((r1 - r0) / 1024))
done
median=$(printf "%s\n" "${rests[@]}" | sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}')
echo "$fast of $runs runs under 1 s beyond the weights; median rest $median s"
