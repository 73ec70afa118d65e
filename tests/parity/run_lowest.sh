#!/usr/bin/env bash
# run_lowest.sh: the PyTorch parity tier again with the kernels and oneDNN held at the lowest
# level this build runs on (x86: ZT_ISA=avx2, which also caps ztrain's oneDNN at AVX2), so a machine with
# AVX-512 also proves the AVX2 path end to end (docs/testing.md). On a machine whose best level
# is the lowest, parity_torch has already run exactly this path, and so this says so and passes.
# No ONEDNN_MAX_CPU_ISA in the environment: it would cap the PyTorch oracle too, whose bf16 autocast
# has no oneDNN matmul under an AVX2 cap; ztrain caps its own oneDNN (kernels/isa.cpp), printed below.
# usage: run_lowest.sh path/to/ztrain
set -euo pipefail
Z=$1
read -r best lowest < <("$Z" info --json | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["kernel_isas_available"][0], j["kernel_isas_available"][-1])')
if [ "$best" = "$lowest" ]; then
  echo "the best kernel level here is the lowest ($lowest): parity_torch ran it; 1 passed, 0 failed"
  exit 0
fi
echo "parity at the lowest kernel level: ZT_ISA=$lowest (best here: $best)"
export ZT_ISA=$lowest
echo "ztrain at ZT_ISA=$lowest: GEMMs $("$Z" info --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["gemm_isa"])')"
exec /usr/bin/python3 "$(dirname "$0")/run_parity.py" --ztrain "$Z"
