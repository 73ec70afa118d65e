// bench_attention.h: the attention section of zt_cuda_bench (bench_main.cpp calls it).
#pragma once
#include <cstdio>

// Times causal attention forward and forward+backward (bf16 and fp32 modes) at a long-context
// and a GPT-2 shape and prints one line per case to `table`, plus an `attention_check` line.
void bench_attention(FILE* table);
