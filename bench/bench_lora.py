#!/usr/bin/env python3
"""bench_lora.py: LoRA against full fine-tuning on the Llama 124M config (docs/peft.md).

Trains bench/configs/llama-124m.json (random weights; the speed and memory do not depend on them) at
B 8 x T 256 on the quickstart corpus's tokens (random tokens when the corpus is absent), full
fine-tuning (AdamW) against LoRA r 8 on all linear layers, LoRA r 8 on PEFT's default q_proj /
v_proj, DoRA r 8 on all linear layers and IA3 with PEFT's defaults, in --precision fp32 and/or bf16. Per run: the median step time of steps 3..--steps
(metrics.jsonl), the runs alternated over --repeats rounds and the median over rounds taken; tokens/s
as a ratio to full fine-tuning's in the same round; the model states (parameters + gradients +
optimizer state, memory_bytes in all_results.json) as a fraction of full fine-tuning's; MFU against
the GEMM peak ztrain measures in the same run (LoRA's FLOPs: 4 per frozen weight, 6 per adapter
parameter). Keep the machine otherwise idle.

usage: bench_lora.py [--ztrain build/ztrain] [--out DIR] [--steps 12] [--repeats 2] [--precision fp32,bf16]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "bench/configs/llama-124m.json")
CORPUS = os.path.join(ROOT, ".cache/corpus/bpe-16384-tokens/train.bin")
RUNS = {
    "full": [],
    "lora_all_linear": ["--use_peft", "--lora_r", "8", "--lora_target_modules", "all-linear", "--lora_dropout", "0"],
    "lora_q_v": ["--use_peft", "--lora_r", "8", "--lora_dropout", "0"],
    "dora_all_linear": ["--use_peft", "--use_dora", "--lora_r", "8", "--lora_target_modules", "all-linear",
                        "--lora_dropout", "0"],
    "ia3": ["--use_peft", "--peft_type", "ia3"],
}


def tokens_file(out):
    if os.path.exists(CORPUS):
        return CORPUS
    import random
    path = os.path.join(out, "tokens.bin")
    rng = random.Random(0)
    with open(path, "wb") as f:
        f.write(b"".join(rng.randrange(32000).to_bytes(2, "little") for _ in range(300000)))
    return path


def run(ztrain, out, name, extra, precision, steps, data):
    d = os.path.join(out, f"{name}_{precision}")
    cmd = [ztrain, "train", "--model_config_path", CONFIG, "--train_file", data, "--per_device_train_batch_size", "8",
           "--model_max_length", "256", "--max_steps", str(steps), "--logging_steps", "1", "--save_strategy", "no",
           "--report_to", "none", "--overwrite_output_dir", "--output_dir", d, "--learning_rate", "1e-4"] + extra
    if precision == "bf16":
        cmd.append("--bf16")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name} {precision} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    rows = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl")) if '"step_time_s"' in x]
    times = [x["step_time_s"] for x in rows if x["step"] >= 3]
    mfu = statistics.median(x["mfu"] for x in rows if x["step"] >= 3)
    mem = json.load(open(os.path.join(d, "all_results.json")))["memory_bytes"]
    states = mem["parameters"] + mem["gradients"] + mem["optimizer_state"]
    return statistics.median(times), states, mfu, mem


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ztrain", default=os.path.join(ROOT, "build/ztrain"))
    ap.add_argument("--out", default="/tmp/bench_lora")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--precision", default="fp32,bf16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    data = tokens_file(a.out)
    result = {}
    for precision in a.precision.split(","):
        times = {n: [] for n in RUNS}
        info = {}
        for _ in range(a.repeats):
            for name, extra in RUNS.items():
                t, states, mfu, mem = run(a.ztrain, a.out, name, extra, precision, a.steps, data)
                times[name].append(t)
                info[name] = (states, mfu, mem)
        full_t = statistics.median(times["full"])
        full_states = info["full"][0]
        print(f"precision {precision}, B 8 x T 256, Llama 124M config, median step time over {a.repeats} rounds")
        for name in RUNS:
            t = statistics.median(times[name])
            states, mfu, mem = info[name]
            print(f"  {name:<16} step {t:.3f} s  tokens/s x{full_t / t:.3f} of full  MFU {100 * mfu:.1f}%  "
                  f"model states {states / 2**20:.1f} MiB = {states / full_states:.3f} of full "
                  f"(params {mem['parameters'] / 2**20:.1f}, grads {mem['gradients'] / 2**20:.2f}, "
                  f"optimizer {mem['optimizer_state'] / 2**20:.2f} MiB)")
            result[f"{name}_{precision}"] = {"step_s": t, "speedup": full_t / t, "states_bytes": states,
                                             "states_fraction": states / full_states, "mfu": mfu}
    json.dump(result, open(os.path.join(a.out, "bench_lora.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
