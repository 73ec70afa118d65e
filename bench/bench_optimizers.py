#!/usr/bin/env python3
"""bench_optimizers.py: the optimizer zoo on the quickstart (docs/optimizers.md).

Trains the quickstart model (configs/quickstart-llama.json, B 16 x T 128, cosine schedule with 55
warmup steps, 576 steps, the corpus scripts/quickstart.sh prepares) once per optimizer, evaluating
every 25 steps on the same 128 validation windows, and reports per optimizer: the eval loss at
steps 350 and 500 and at the end, the first evaluated step at which it reaches AdamW's step-350
eval loss (linear interpolation between evaluations), tokens/s and step time against AdamW's from
the same run, optimizer-state bytes per parameter (train_results.json), and draws every eval curve
in one PNG (`ztrain plot`). Each optimizer gets the settings its authors recommend relative to
AdamW's, printed with it.

With --timing it instead measures each optimizer's step time against AdamW's alone: 60 steps
without evaluation per optimizer, the runs alternated over --repeats rounds, the median step time of
steps 11-60 (metrics.jsonl) per run and the median over rounds (keep the machine otherwise idle).

usage: bench_optimizers.py [--ztrain build/ztrain] [--out DIR] [--steps 576] [--only NAME,...]
       [--png docs/optimizers_quickstart.png] [--timing [--repeats 3]]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, ".cache/corpus/bpe-16384-tokens")
BASE = ["--model_config_path", os.path.join(ROOT, "configs/quickstart-llama.json"),
        "--train_file", os.path.join(DATA, "train.bin"), "--validation_file", os.path.join(DATA, "validation.bin"),
        "--per_device_train_batch_size", "16", "--model_max_length", "128", "--learning_rate", "2e-3",
        "--weight_decay", "0.1", "--adam_beta2", "0.95", "--lr_scheduler_type", "cosine", "--warmup_steps", "55",
        "--eval_steps", "25", "--max_eval_samples", "128", "--logging_steps", "25", "--save_strategy", "no",
        "--report_to", "none", "--overwrite_output_dir"]
# name -> extra flags (later flags override BASE's): the authors' advice relative to AdamW's.
RUNS = {
    "adamw_torch": [],
    "adamw_8bit": ["--optim", "adamw_8bit"],
    "adamw_bf16_state": ["--optim_state_dtype", "bf16"],
    "adafactor": ["--optim", "adafactor"],  # HF Trainer's: scale_parameter / relative_step off, the LR given
    # Lion paper: LR 3-10x smaller, weight decay larger (lr x wd about AdamW's), betas 0.9 / 0.99.
    "lion_32bit": ["--optim", "lion_32bit", "--learning_rate", "3e-4", "--weight_decay", "0.6", "--adam_beta2", "0.99"],
    "sgd": ["--optim", "sgd", "--optim_args", "momentum=0.9,nesterov=true", "--learning_rate", "0.1"],
    # Sophia's README (125M): AdamW's LR, rho 0.05, weight decay 0.2, betas 0.965 / 0.99, k = 10.
    "sophia": ["--optim", "sophia", "--optim_args", "rho=0.05", "--weight_decay", "0.2", "--adam_beta1", "0.965",
               "--adam_beta2", "0.99"],
    "muon": ["--optim", "muon"],  # Moonlight's scaling: AdamW's LR and decay
    "muon_fp32": ["--optim", "muon", "--optim_args", "ns_dtype=fp32"],  # timing: the iteration in fp32
}


def evals(out):
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    return [(h["step"], h["eval_loss"]) for h in state["log_history"] if "eval_loss" in h]


def at(curve, step):
    for (s0, v0), (s1, v1) in zip(curve, curve[1:]):
        if s0 <= step <= s1:
            return v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return None


def reach(curve, target):
    """The (interpolated) step where the eval loss first falls to target, or None."""
    prev = None
    for s, v in curve:
        if v <= target:
            if prev is None:
                return float(s)
            (s0, v0) = prev
            return s0 + (s - s0) * (v0 - target) / (v0 - v)
        prev = (s, v)
    return None


def timing(a, names):
    """Median step time per optimizer over alternated rounds, and its ratio to AdamW's."""
    times = {n: [] for n in names}
    for rnd in range(a.repeats):
        for n in names:
            out = os.path.join(a.out, "timing", n)
            extra = [x for x in RUNS[n]]
            base = []  # BASE without evaluation
            skip = {"--validation_file", "--eval_steps", "--max_eval_samples", "--logging_steps"}
            for i, x in enumerate(BASE):
                if x in skip or (i > 0 and BASE[i - 1] in skip):
                    continue
                base.append(x)
            cmd = [a.ztrain, "train", *base, "--max_steps", "60", "--logging_steps", "1", "--output_dir", out, *extra]
            subprocess.run(cmd, capture_output=True, text=True, check=True)
            steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"step_time_s"' in line]
            st = sorted(s["step_time_s"] for s in steps if s["step"] > 10)
            times[n].append(st[len(st) // 2])
    base = sorted(times["adamw_torch"])[a.repeats // 2] if "adamw_torch" in times else None
    print(f"{'optimizer':<18}{'median step s':>14}{'vs AdamW':>10}   (per round: ...)")
    for n in names:
        med = sorted(times[n])[a.repeats // 2]
        print(f"{n:<18}{med:>14.4f}{(med / base if base else float('nan')):>10.3f}   "
              + " ".join(f"{t:.4f}" for t in times[n]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", default=os.path.join(ROOT, "build/ztrain"))
    ap.add_argument("--out", default="/tmp/zt_bench_optimizers")
    ap.add_argument("--steps", type=int, default=576)
    ap.add_argument("--only", default="")
    ap.add_argument("--png", default=os.path.join(ROOT, "docs/optimizers_quickstart.png"))
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "train.bin")):
        sys.exit(f"{DATA}/train.bin is missing: run scripts/quickstart.sh once (it prepares the corpus)")
    names = [n for n in RUNS if not a.only or n in a.only.split(",")]
    if a.timing:
        return timing(a, names)
    for n in names:
        out = os.path.join(a.out, n)
        if os.path.exists(os.path.join(out, "train_results.json")):
            continue  # a finished run of an earlier invocation
        cmd = [a.ztrain, "train", *BASE, "--max_steps", str(a.steps), "--output_dir", out, *RUNS[n]]
        print(f"== {n}: {' '.join(RUNS[n]) or '(the quickstart settings)'}", flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"   failed ({r.returncode}): {(r.stdout + r.stderr).strip().splitlines()[-1:]}")
    rows, done = {}, []
    for n in names:
        out = os.path.join(a.out, n)
        if not os.path.exists(os.path.join(out, "train_results.json")):
            continue
        res = json.load(open(os.path.join(out, "train_results.json")))
        ms = res["data_parallel"]["model_state_bytes"]
        rows[n] = {"curve": evals(out), "tokens_per_s": res["train_tokens_per_second"],
                   "state_bytes_per_param": ms["optimizer_state"] / (ms["parameters"] / 4.0)}
        done.append(n)
    base = rows.get("adamw_torch")
    target = at(base["curve"], 350) if base else None
    print(f"\n{'optimizer':<18}{'eval@350':>10}{'eval@500':>10}{'final':>9}{'steps to AdamW@350':>20}"
          f"{'tok/s vs AdamW':>16}{'state B/param':>15}")
    for n in done:
        r = rows[n]
        c = r["curve"]
        st = reach(c, target) if target else None
        speed = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        f = lambda v: f"{v:.4f}" if v is not None else "-"  # noqa: E731
        print(f"{n:<18}{f(at(c, 350)):>10}{f(at(c, 500)):>10}{c[-1][1]:>9.4f}"
              f"{(f'{st:.0f}' if st else 'not reached'):>20}{speed:>16.3f}{r['state_bytes_per_param']:>15.3f}")
    if target:
        print(f"(AdamW's eval loss at step 350: {target:.4f})")
    json.dump(rows, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    if len(done) > 1:
        subprocess.run([a.ztrain, "plot", "--runs", ",".join(os.path.join(a.out, n) for n in done), "--labels",
                        ",".join(done), "--metric", "eval_loss", "--output", a.png,
                        "--title", "quickstart eval loss by optimizer"], check=True)


if __name__ == "__main__":
    main()
