#!/usr/bin/env bash
# Builds bench/gemm_libs.cpp against oneDNN, OpenBLAS and BLIS and runs each on the
# GPT-2 124M training shapes with 2 threads. OpenBLAS runs twice: with this machine's
# OPENBLAS_CORETYPE=Haswell trap and with SkylakeX.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/gemm_libs; mkdir -p "$out"
g++ -O2 -DUSE_DNNL bench/gemm_libs.cpp -o "$out/onednn" -ldnnl
g++ -O2 bench/gemm_libs.cpp -I/usr/include/x86_64-linux-gnu/openblas-pthread -o "$out/openblas" \
  -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-pthread
g++ -O2 -DUSE_BLIS bench/gemm_libs.cpp -I/usr/include/x86_64-linux-gnu/blis-openmp -o "$out/blis" \
  /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.a -fopenmp -lpthread -lm
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 BLIS_NUM_THREADS=2
"$out/onednn"
OPENBLAS_CORETYPE=Haswell "$out/openblas" | sed 's/^openblas /openblas-haswell/'
OPENBLAS_CORETYPE=SkylakeX "$out/openblas" | sed 's/^openblas /openblas-skx/'
"$out/blis"
