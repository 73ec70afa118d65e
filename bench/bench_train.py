#!/usr/bin/env python3
"""Training-throughput benchmark: ztrain against PyTorch 1.13 in the same run.

For each workload it runs `ztrain train` (random init, random tokens, fp32) and
bench/torch_peer.py (the same model in plain PyTorch, fp32, AdamW + clipping), both
with the same thread count, and prints tokens/s, achieved GFLOP/s, MFU against the
GEMM peak measured at the start of the run, peak resident memory, and the ratio.

FLOPs per token follow ztrain's convention (6 x matmul parameters incl. the LM head
+ 12 x L x NH x HS x T; causal masking not discounted), used for both sides.
PyTorch runs with OpenBLAS at the CPU's best core type (SkylakeX with AVX-512, Haswell
without; an environment's OPENBLAS_CORETYPE can halve it): the peer gets its best. Under
ZT_ISA=avx2 (with ONEDNN_MAX_CPU_ISA=AVX2) both sides are held to AVX2: Haswell for the peer. The
script installs libopenblas0-pthread when Debian's torch would otherwise call the reference
BLAS (as root; else it stops and says so) and prints which BLAS and core type the peer used.
ztrain's own MFU (metrics.jsonl, against the peak it measured or cached) is printed beside
the MFU against this run's peak.

usage: bench/bench_train.py [--build build] [--steps 6] [--threads 2] [--only NAME]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKLOADS = [
    ("gpt2-124m", "gpt2", 4, 64),
    ("gpt2-124m", "gpt2", 8, 256),
    ("llama-124m", "llama", 8, 256),
]


def flops_per_token(cfg, T):
    if cfg["model_type"] == "gpt2":
        C, L, V, NH = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_head"]
        F = cfg.get("n_inner") or 4 * C
        per_layer = C * 3 * C + C * C + 2 * C * F
        HS = C // NH
    else:
        C, L, V, NH = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["num_attention_heads"]
        KVH, F = cfg.get("num_key_value_heads", NH), cfg["intermediate_size"]
        HS = C // NH
        per_layer = C * (NH + 2 * KVH) * HS + NH * HS * C + 3 * C * F
    return 6.0 * (L * per_layer + V * C) + 12.0 * L * NH * HS * T


def gemm_peak(build, threads):
    out = subprocess.run([os.path.join(build, "zt_gemm_peak")], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(threads)}, check=True).stdout
    m = re.search(r"square 2048.*?([\d.]+) GFLOP/s", out)
    return float(m.group(1))


def best_coretype():
    # ZT_ISA=avx2 holds ztrain to AVX2 (issue 28's AVX2 figure on an AVX-512 machine): the peer gets
    # OpenBLAS's AVX2 kernels then, so both sides run the same instruction set.
    if os.environ.get("ZT_ISA") == "avx2":
        return "Haswell"
    flags = open("/proc/cpuinfo").read()
    return "SkylakeX" if " avx512f" in flags else "Haswell"


def peer_blas():
    """The BLAS Debian's torch will call; installs OpenBLAS (pthread) when it is the reference one."""
    import glob
    links = glob.glob("/usr/lib/*-linux-gnu/libblas.so.3")
    blas = os.path.realpath(links[0]) if links else "none"
    if "openblas" not in blas and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", "libopenblas0-pthread"], check=False,
                       stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        blas = os.path.realpath(links[0]) if links else "none"
    return blas


def run_ztrain(build, cfg_path, B, T, steps, threads, tmp):
    import numpy as np
    cfg = json.load(open(cfg_path))
    tokens = os.path.join(tmp, "tokens.bin")
    rng = np.random.default_rng(0)
    rng.integers(0, cfg["vocab_size"], size=B * T * (steps + 2) + 1, dtype=np.uint16).tofile(tokens)
    out = os.path.join(tmp, "ztrain_out")
    cmd = [os.path.join(build, "ztrain"), "train", "--model_config_path", cfg_path, "--train_file", tokens,
           "--output_dir", out, "--overwrite_output_dir", "--per_device_train_batch_size", str(B),
           "--model_max_length", str(T), "--max_steps", str(steps), "--logging_steps", str(steps),
           "--threads", str(threads), "--save_strategy", "no", "--learning_rate", "1e-4"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"tokens_per_second"' in l]
    timed = [r["step_time_s"] for r in rows[1:]]  # the first step pays one-time costs
    res = json.load(open(os.path.join(out, "train_results.json")))
    return {"tokens_per_s": B * T / statistics.mean(timed),
            "reported_mfu": statistics.mean(r["mfu"] for r in rows[1:]),
            "machine": res.get("machine", {}),
            "peak_rss_mb": res["memory_bytes"]["peak_rss"] / 2**20,
            "accounted_mb": res["memory_bytes"]["accounted_peak"] / 2**20}


def run_torch(arch, cfg_path, B, T, steps, threads):
    env = {**os.environ, "OPENBLAS_CORETYPE": best_coretype(), "OMP_NUM_THREADS": str(threads)}
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_peer.py"), "--config", cfg_path, "--B", str(B), "--T", str(T),
           "--steps", str(steps), "--warmup", "1", "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--no_torch", action="store_true")
    a = ap.parse_args()
    if not a.no_torch:
        # Debian's torch calls whatever libblas.so.3 the alternatives system points at; with only
        # python3-torch installed that is the reference BLAS, about 8x slower than OpenBLAS, and
        # the peer would look far worse than PyTorch really is.
        blas = peer_blas()
        if "openblas" not in blas:
            sys.exit(f"bench_train: libblas.so.3 is {blas}, not OpenBLAS; the PyTorch peer deserves a tuned BLAS: "
                     "apt-get install libopenblas0-pthread (or pass --no_torch)")
        print(f"PyTorch peer: BLAS {blas}, OPENBLAS_CORETYPE={best_coretype()}, {a.threads} threads")
    peak = gemm_peak(a.build, a.threads)
    print(f"measured fp32 GEMM peak (oneDNN sgemm 2048^3, best repetition, {a.threads} threads): {peak:.1f} GFLOP/s")
    hdr = f"{'workload':<22}{'ztrain tok/s':>13}{'GFLOP/s':>9}{'MFU':>7}{'RSS MiB':>9}{'acct MiB':>9}" \
          f"{'torch tok/s':>12}{'torch RSS':>10}{'ratio':>7}{'own MFU':>9}"
    print(hdr)
    results = []
    for name, arch, B, T in WORKLOADS:
        if a.only and a.only not in f"{name} B={B} T={T}":
            continue
        cfg_path = os.path.join(HERE, "configs", name + ".json")
        fpt = flops_per_token(json.load(open(cfg_path)), T)
        with tempfile.TemporaryDirectory() as tmp:
            z = run_ztrain(a.build, cfg_path, B, T, a.steps, a.threads, tmp)
        t = None if a.no_torch else run_torch(arch, cfg_path, B, T, max(3, a.steps // 2), a.threads)
        gf = z["tokens_per_s"] * fpt / 1e9
        tt = t["tokens_per_s"] if t else float("nan")
        tr = t["peak_rss_mb"] if t else float("nan")
        label = f"{name} B={B} T={T}"
        print(f"{label:<22}{z['tokens_per_s']:>13.1f}{gf:>9.1f}{100 * gf / peak:>6.1f}%{z['peak_rss_mb']:>9.0f}"
              f"{z['accounted_mb']:>9.0f}{tt:>12.1f}{tr:>10.0f}{z['tokens_per_s'] / tt:>6.2f}x"
              f"{100 * z['reported_mfu']:>8.1f}%", flush=True)
        results.append({"workload": label, "ztrain": z, "torch": t, "gflops": gf, "mfu": gf / peak})
    # Measured again at the end: a shared machine's neighbours can slow the first measurement.
    end_peak = gemm_peak(a.build, a.threads)
    if end_peak > peak * 1.02:
        print(f"the GEMM peak measured again at the end is {end_peak:.1f} GFLOP/s: MFU against it is "
              + ", ".join(f"{100 * r['gflops'] / end_peak:.1f}%" for r in results))
    json.dump({"gemm_peak_gflops": peak, "gemm_peak_end_gflops": end_peak, "results": results}, open(os.path.join(a.build, "bench_train.json"), "w"),
              indent=2)


if __name__ == "__main__":
    sys.exit(main())
