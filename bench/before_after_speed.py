#!/usr/bin/env python3
"""before_after_speed.py: the step time of two ztrain binaries on the same workloads, alternated.

The speed guard of structural changes (tests/before_after/compare.py is the numerics guard):
GPT-2 124M (random init, random tokens) in fp32 and bf16 on one process, and 2-rank tensor- and
pipeline-parallel runs under mpirun, each run `--repeats` times with OLD and NEW in turn (OLD, NEW,
OLD, NEW, ...) so drift of the machine hits both alike. A run's figure is its mean step time over
the steps after the first (which pays one-time costs); a workload's is the median over its runs,
and the line prints NEW / OLD (below 1: NEW is faster).

usage: bench/before_after_speed.py OLD_ZTRAIN NEW_ZTRAIN [--repeats 3] [--steps 5] [--only NAME]
"""
import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import tempfile

GPT2_124M = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
             "n_head": 12}
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# (name, ranks, B, T, extra flags); the one-process cases use both cores, the 2-rank ones one each.
WORKLOADS = [
    ("gpt2-124m fp32 B4 T128", 1, 4, 128, []),
    ("gpt2-124m bf16 B4 T128", 1, 4, 128, ["--bf16"]),
    # The portability issue's shape (bench/bench_train.py's main workload).
    ("gpt2-124m fp32 B8 T256", 1, 8, 256, []),
    ("gpt2-124m bf16 B8 T256", 1, 8, 256, ["--bf16"]),
    ("gpt2-124m tp2 fp32 B4 T128", 2, 4, 128, ["--tensor-model-parallel-size", "2"]),
    ("gpt2-124m pp2 fp32 B2x4 T128", 2, 2, 128, ["--pipeline-model-parallel-size", "2",
                                                 "--gradient_accumulation_steps", "4"]),
]


def step_time(zt, work, ranks, B, T, steps, extra):
    out = os.path.join(work, "out")
    threads = "2" if ranks == 1 else "1"
    cmd = [zt, "train", "--model_config_path", os.path.join(work, "cfg.json"), "--train_file",
           os.path.join(work, "tokens.bin"), "--output_dir", out, "--overwrite_output_dir",
           "--per_device_train_batch_size", str(B), "--model_max_length", str(T), "--max_steps", str(steps),
           "--logging_steps", "1", "--threads", threads, "--save_strategy", "no", "--report_to", "none",
           "--learning_rate", "1e-4"] + extra
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--bind-to", "none"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"step_time_s"' in l]
    return statistics.mean(r["step_time_s"] for r in rows[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated parts of workload names")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="zt-speed-")
    json.dump(GPT2_124M, open(os.path.join(work, "cfg.json"), "w"))
    rnd = random.Random(0)
    # Twice the largest step's tokens per step, so no run wraps around the file.
    n = 2 * max(B * T for _, _, B, T, _ in WORKLOADS) * (args.steps + 2) + 1
    with open(os.path.join(work, "tokens.bin"), "wb") as f:
        f.write(struct.pack(f"<{n}H", *[rnd.randrange(50257) for _ in range(n)]))
    for name, ranks, B, T, extra in WORKLOADS:
        if not any(part in name for part in args.only.split(",")):
            continue
        times = {"old": [], "new": []}
        for _ in range(args.repeats):
            for which in ("old", "new"):
                times[which].append(step_time(getattr(args, which), work, ranks, B, T, args.steps, extra))
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"{name:32s} old {old:7.3f} s/step  new {new:7.3f} s/step  new/old {new / old:.3f}  "
              f"(runs old {['%.3f' % t for t in times['old']]}, new {['%.3f' % t for t in times['new']]})",
              flush=True)


if __name__ == "__main__":
    main()
