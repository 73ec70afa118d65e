#!/usr/bin/env python3
"""Recipe table: precision x activation recomputation, measured in one run on this machine.

For GPT-2 124M and the Llama 124M config (bench/configs) at B=8, T=256, 2 threads: ztrain
trains fp32 / bf16 / fp16 with recomputation none / selective / full, and the table gives
tokens/s, MFU (against the GEMM peak of the dtype the GEMMs run in, both measured at the
start of this run: oneDNN sgemm for fp32 and fp16 -- fp16 runs on fp32 arithmetic here --,
oneDNN's bf16 matmul for bf16), the step time relative to the same precision without
recomputation, the planned activation bytes (the arena plus what recomputation adds to the
temporaries; from `estimate-memory`) relative to none, peak RSS, and `estimate-memory`'s
total with the ratio measured / estimated. The PyTorch 1.13 peer runs fp32 and bf16 autocast
on the same shapes (OpenBLAS at the CPU's best core type, bench_train.best_coretype), and the speed checks of issue 10 are printed
at the end: bf16 MFU >= 70% of the bf16 peak and bf16 >= 1.4x ztrain's fp32 tokens/s.

usage: bench/bench_recipes.py [--build build] [--steps 5] [--threads 2] [--only gpt2] [--no_torch]
                              [--precisions fp32,bf16] [--recompute none]
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
sys.path.insert(0, HERE)
import bench_train  # noqa: E402  (flops_per_token, run_torch conventions)

PRECISIONS = [("fp32", []), ("bf16", ["--bf16"]), ("fp16", ["--fp16"])]
RECOMPUTE = [("none", []), ("selective", ["--recompute-granularity", "selective"]),
             ("full", ["--recompute-granularity", "full"])]
MODELS = [("gpt2-124m", "gpt2"), ("llama-124m", "llama")]
B, T = 8, 256


def peaks(build, threads):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = {}
    for kind, args in (("fp32", []), ("bf16", ["bf16"])):
        text = subprocess.run([os.path.join(build, "zt_gemm_peak"), "2048"] + args, capture_output=True, text=True,
                              env=env, check=True).stdout
        out[kind] = float(re.search(r"square 2048.*?([\d.]+) GFLOP/s", text).group(1))
    return out


def estimate(build, cfg, flags):
    text = subprocess.run([os.path.join(build, "ztrain"), "estimate-memory", "--model_config_path", cfg,
                           "--per_device_train_batch_size", str(B), "--model_max_length", str(T)] + flags,
                          capture_output=True, text=True, check=True).stdout
    row = next(l for l in text.splitlines() if l.strip().startswith("DDP"))
    cols = re.findall(r"([\d.]+) MiB", row)
    # params grads optim acts temp comm | total
    return {"acts_mib": float(cols[3]), "temp_mib": float(cols[4]), "total_mib": float(cols[-1])}


def run_ztrain(build, cfg, flags, steps, threads, tmp):
    import numpy as np
    vocab = json.load(open(cfg))["vocab_size"]
    tokens = os.path.join(tmp, "tokens.bin")
    if not os.path.exists(tokens):
        np.random.default_rng(0).integers(0, vocab, size=B * T * (steps + 2) + 1, dtype=np.uint16).tofile(tokens)
    out = os.path.join(tmp, "out")
    cmd = [os.path.join(build, "ztrain"), "train", "--model_config_path", cfg, "--train_file", tokens,
           "--output_dir", out, "--overwrite_output_dir", "--per_device_train_batch_size", str(B),
           "--model_max_length", str(T), "--max_steps", str(steps), "--logging_steps", str(steps),
           "--threads", str(threads), "--save_strategy", "no", "--learning_rate", "1e-4",
           "--report_to", "none"] + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"tokens_per_second"' in l]
    timed = [r["step_time_s"] for r in rows[1:]]  # the first step pays one-time costs
    res = json.load(open(os.path.join(out, "train_results.json")))
    return {"tokens_per_s": B * T / statistics.median(timed), "peak_rss_mib": res["memory_bytes"]["peak_rss"] / 2**20}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--no_torch", action="store_true")
    ap.add_argument("--precisions", default="fp32,bf16,fp16", help="comma-separated subset (fp32 is needed)")
    ap.add_argument("--recompute", default="none,selective,full", help="comma-separated subset (none is needed)")
    a = ap.parse_args()
    # The peaks are measured twice and the higher of each kept, and once more at the end as a
    # check: a neighbour's burst during a measurement lowers it (an MFU over 100% once showed it).
    pk = peaks(a.build, a.threads)
    pk = {k: max(v, peaks(a.build, a.threads)[k]) for k, v in pk.items()}
    print(f"measured GEMM peaks (2048^3, {a.threads} threads, best of two): oneDNN sgemm {pk['fp32']:.1f} GFLOP/s, "
          f"oneDNN bf16 matmul {pk['bf16']:.1f} GFLOP/s")
    results = []
    for name, arch in MODELS:
        if a.only and a.only not in name:
            continue
        cfg = os.path.join(HERE, "configs", name + ".json")
        fpt = bench_train.flops_per_token(json.load(open(cfg)), T)
        print(f"\n{name}, B={B} T={T}")
        print(f"{'precision':<10}{'recompute':<11}{'tok/s':>8}{'MFU':>7}{'time':>7}{'act MiB':>9}{'acts':>7}"
              f"{'RSS MiB':>9}{'est MiB':>9}{'RSS/est':>8}")
        base = {}
        with tempfile.TemporaryDirectory() as tmp:
            for prec, pflags in [p for p in PRECISIONS if p[0] in a.precisions.split(",")]:
                for rc, rflags in [r for r in RECOMPUTE if r[0] in a.recompute.split(",")]:
                    flags = pflags + rflags
                    z = run_ztrain(a.build, cfg, flags, a.steps, a.threads, tmp)
                    est = estimate(a.build, cfg, flags)
                    none_est = estimate(a.build, cfg, pflags)
                    # Activation bytes: the arena, plus what recomputation adds to the temporaries.
                    act = est["acts_mib"] + est["temp_mib"] - none_est["temp_mib"]
                    if rc == "none":
                        base[prec] = (z["tokens_per_s"], act)
                    gf = z["tokens_per_s"] * fpt / 1e9
                    peak = pk["bf16" if prec == "bf16" else "fp32"]
                    r = {"model": name, "precision": prec, "recompute": rc, **z, "gflops": gf, "mfu": gf / peak,
                         "time_vs_none": base[prec][0] / z["tokens_per_s"], "act_mib": act,
                         "act_vs_none": act / base[prec][1], "estimate_mib": est["total_mib"],
                         "rss_vs_estimate": z["peak_rss_mib"] / est["total_mib"]}
                    results.append(r)
                    print(f"{prec:<10}{rc:<11}{r['tokens_per_s']:>8.1f}{100 * r['mfu']:>6.1f}%"
                          f"{r['time_vs_none']:>6.2f}x{act:>9.0f}{100 * r['act_vs_none']:>6.0f}%"
                          f"{r['peak_rss_mib']:>9.0f}{r['estimate_mib']:>9.0f}{r['rss_vs_estimate']:>8.3f}", flush=True)
        if not a.no_torch:
            for label, extra in (("torch fp32", []), ("torch bf16 autocast", ["--autocast", "bf16"])):
                env = {**os.environ, "OPENBLAS_CORETYPE": bench_train.best_coretype(), "OMP_NUM_THREADS": str(a.threads)}
                cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_peer.py"), "--config", cfg, "--B", str(B),
                       "--T", str(T), "--steps", "3", "--warmup", "1", "--threads", str(a.threads)] + extra
                t = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                              env=env).stdout.strip().splitlines()[-1])
                mine = next(r for r in results if r["model"] == name and r["recompute"] == "none" and
                            r["precision"] == ("bf16" if extra else "fp32"))
                print(f"{label:<21}{t['tokens_per_s']:>8.1f} tok/s, RSS {t['peak_rss_mb']:.0f} MiB; ztrain "
                      f"{mine['precision']} is {mine['tokens_per_s'] / t['tokens_per_s']:.2f}x")
                results.append({"model": name, "peer": label, **t})
        f32 = next(r for r in results if r.get("model") == name and r.get("precision") == "fp32"
                   and r.get("recompute") == "none")
        b16 = next(r for r in results if r.get("model") == name and r.get("precision") == "bf16"
                   and r.get("recompute") == "none")
        print(f"{name} bf16: MFU {100 * b16['mfu']:.1f}% of the bf16 peak (target >= 70%), "
              f"{b16['tokens_per_s'] / f32['tokens_per_s']:.2f}x fp32 tokens/s (target >= 1.4x)")
    end = peaks(a.build, a.threads)
    print(f"peaks measured again at the end: sgemm {end['fp32']:.1f}, bf16 {end['bf16']:.1f} GFLOP/s"
          + ("  (higher than at the start by over 5%: the MFU figures above are overstated)"
             if any(end[k] > 1.05 * pk[k] for k in pk) else ""))
    json.dump({"peaks": pk, "peaks_at_end": end, "results": results}, open(os.path.join(a.build, "bench_recipes.json"), "w"), indent=2)


if __name__ == "__main__":
    sys.exit(main())
