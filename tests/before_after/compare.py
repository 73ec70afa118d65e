#!/usr/bin/env python3
"""compare.py: per-step losses of two ztrain binaries, bit for bit (the foundation refactor's guard).

Runs the same trainings with OLD and NEW and compares every logged loss (trainer_state.json
log_history, full precision) exactly:
  - one process: tiny GPT-2 (tied head) and tiny Llama (GQA, untied), with and without
    --packing, and the PyTorch-parity shape (a bigger GPT-2, 5 steps);
  - under mpirun: DDP, ZeRO-1/2/3 at N=2, ZeRO-3 hybrid (G=2 of N=4), --overlap_comm false;
  - resume: 8 steps saved every 4, then resumed from checkpoint-4 (NEW only; its losses must
    equal the uninterrupted OLD run's).
Prints one line per case (bit-identical, or the worst relative difference) and exits 1 if a
case differs by more than --tol (default 0: bit-identical).
usage: compare.py OLD_ZTRAIN NEW_ZTRAIN [--tol 1e-6] [--mpirun mpirun]
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("old")
ap.add_argument("new")
ap.add_argument("--tol", type=float, default=0.0)
ap.add_argument("--mpirun", default="mpirun")
args = ap.parse_args()
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
MODELS = {
    "gpt2": {"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4,
             "eos_token_id": 0},
    "gpt2big": {"model_type": "gpt2", "vocab_size": 512, "n_positions": 128, "n_embd": 128, "n_layer": 4,
                "n_head": 4},
    "llama": {"model_type": "llama", "vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "tie_word_embeddings": False, "eos_token_id": 0},
}


def train(zt, work, name, model, np=1, steps=12, extra=(), acc=None, out=None):
    out = out or os.path.join(work, name)
    acc = acc if acc is not None else 4 // np
    cmd = [zt, "train", "--model_config_path", os.path.join(work, model + ".json"), "--train_file",
           os.path.join(work, "train.bin"), "--max_steps", str(steps), "--save_strategy", "no", "--no_shuffle",
           "--model_max_length", "32", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
           str(acc), "--learning_rate", "1e-3", "--weight_decay", "0.1", "--max_grad_norm", "1.0",
           "--report_to", "none", "--logging_steps", "1", "--threads", "1", "--output_dir", out] + list(extra)
    if np > 1:
        cmd = [args.mpirun, "-np", str(np), "--oversubscribe", "--bind-to", "none"] + cmd
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"{name} ({zt}): exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    return [h["loss"] for h in state["log_history"] if "loss" in h and "train_loss" not in h]


def compare(name, a, b):
    if len(a) != len(b):
        print(f"{name:34s} DIFFERENT LENGTHS {len(a)} vs {len(b)}")
        return False
    worst = max((abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)), default=0.0)
    same = all(x == y for x, y in zip(a, b))
    print(f"{name:34s} {len(a):3d} steps  " + ("bit-identical" if same else f"worst relative difference {worst:.3e}"))
    return worst <= args.tol


def main():
    work = tempfile.mkdtemp(prefix="zt-before-after-")
    for k, v in MODELS.items():
        json.dump(v, open(os.path.join(work, k + ".json"), "w"))
    rnd = random.Random(7)
    with open(os.path.join(work, "train.bin"), "wb") as f:
        f.write(struct.pack(f"<{60000}H", *[rnd.randrange(512) for _ in range(60000)]))
    ok = True
    cases = [("serial gpt2", "gpt2", 1, []), ("serial llama", "llama", 1, []),
             ("serial gpt2 --packing", "gpt2", 1, ["--packing"]), ("serial llama --packing", "llama", 1, ["--packing"]),
             ("serial gpt2big (parity shape)", "gpt2big", 1, [])]
    for st in (0, 1, 2, 3):
        for m in ("gpt2", "llama"):
            cases.append((f"np2 zero_stage {st} {m}", m, 2, ["--zero_stage", str(st)]))
    cases += [("np4 zero3 hybrid G=2 llama", "llama", 4, ["--zero_stage", "3", "--zero_hpz_partition_size", "2"]),
              ("np2 ddp --overlap_comm false", "gpt2", 2, ["--overlap_comm", "false"])]
    for name, m, np, extra in cases:
        tag = name.replace(" ", "_").replace("=", "")
        a = train(args.old, work, "old_" + tag, m, np, extra=extra)
        b = train(args.new, work, "new_" + tag, m, np, extra=extra)
        ok &= compare(name, a, b)
    # Resume (NEW): 8 steps saving every 4, then again from checkpoint-4 in a copy.
    for m, np, extra in (("gpt2", 1, []), ("llama", 2, ["--zero_stage", "3"])):
        ref = train(args.old, work, f"old_full_{m}{np}", m, np, steps=8, extra=extra)
        out = os.path.join(work, f"new_resume_{m}{np}")
        train(args.new, work, "", m, np, steps=8, out=out, extra=["--save_strategy", "steps", "--save_steps", "4"] + extra)
        shutil.rmtree(os.path.join(out, "checkpoint-8"), ignore_errors=True)
        b = train(args.new, work, "", m, np, steps=8, out=out,
                  extra=["--resume_from_checkpoint", os.path.join(out, "checkpoint-4")] + extra)
        ok &= compare(f"resume {m} np{np} (vs old uninterrupted)", ref, b)
    shutil.rmtree(work, ignore_errors=True)
    print("all cases within tolerance" if ok else "SOME CASES DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
