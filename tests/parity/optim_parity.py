#!/usr/bin/env python3
"""Tier-2 parity of the optimizer zoo: ztrain's --optim against the PyTorch references of
tests/parity/ref_optimizers.py (torch.optim's SGD; Hugging Face's Adafactor; bitsandbytes'
8-bit blockwise AdamW; Lion; SophiaG with its sampled-label curvature pass, labels drawn as
ztrain draws them; Muon as torch.optim.Muon computes it, Newton-Schulz in fp32).

One random Llama (64 wide, two layers, vocabulary 256: the embedding and the 64 x 64
projections reach 8-bit AdamW's 4,096-element threshold, the norms stay below it), one token
file, 5 steps (lr 1e-3, weight decay 0.1, clip 1.0, betas 0.9/0.95, constant lr, file order,
gradient accumulation 2) per optimizer in both, every per-step loss and pre-clip gradient norm
within the tolerance (1e-4 relative; sign-based updates, Lion and Sophia, 1e-3: a moment within
rounding of zero may take either sign).

usage: optim_parity.py --ztrain build/ztrain [--work DIR] [--only NAME]
"""
import argparse
import concurrent.futures
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_parity import PY, rel, run  # noqa: E402  (the model-parity driver's command runner)
B, G, T, STEPS = 4, 2, 32, 5
HP = ["--learning_rate", "1e-3", "--weight_decay", "0.1", "--adam_beta1", "0.9", "--adam_beta2", "0.95",
      "--adam_epsilon", "1e-8", "--max_grad_norm", "1.0"]
# (name, --optim, --optim_args, loss/norm tolerance)
CASES = [
    ("sgd_nesterov", "sgd", "momentum=0.9,nesterov=true", 1e-4),
    ("lion", "lion_32bit", "", 1e-3),
    ("adafactor", "adafactor", "scale_parameter=true,beta1=0.9", 1e-4),
    ("adamw_8bit", "adamw_8bit", "", 1e-4),
    ("sophia", "sophia", "hessian_interval=2,rho=0.04", 1e-3),
    ("muon", "muon", "ns_dtype=fp32", 1e-4),
]


def run_case(case, model, tokens, work, ztrain, env):
    name, optim, args, tol = case
    common = ["--per_device_train_batch_size", str(B), "--gradient_accumulation_steps", str(G),
              "--model_max_length", str(T), "--max_steps", str(STEPS)] + HP
    extra = ["--optim", optim] + (["--optim_args", args] if args else [])
    ref = json.loads(run([PY, os.path.join(HERE, "torch_train.py"), "--model", model, "--train_file", tokens]
                         + common + extra, env=env).strip().splitlines()[-1])
    out = os.path.join(work, name)
    run([ztrain, "train", "--model_name_or_path", model, "--train_file", tokens, "--output_dir", out,
         "--overwrite_output_dir", "--no_shuffle", "--lr_scheduler_type", "constant", "--logging_steps", "1",
         "--save_strategy", "no", "--threads", env["OMP_NUM_THREADS"]] + common + extra, env=env)
    hist = [e for e in json.load(open(os.path.join(out, "trainer_state.json")))["log_history"] if "loss" in e]
    worst_loss = max(rel(h["loss"], r) for h, r in zip(hist, ref["losses"]))
    worst_norm = max(rel(h["grad_norm"], r) for h, r in zip(hist, ref["grad_norms"]))
    ok = len(hist) == STEPS and worst_loss <= tol and worst_norm <= tol
    return ok, [f"{name:<14} losses ztrain {[round(h['loss'], 6) for h in hist]}",
                f"{'':<14} losses torch  {[round(x, 6) for x in ref['losses']]}",
                f"{'':<14} worst relative difference: loss {worst_loss:.2e}, grad_norm {worst_norm:.2e} "
                f"(tolerance {tol:g}) -> {'ok' if ok else 'FAIL'}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--work", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="zt_optim_parity_")
    model, tokens = os.path.join(work, "model"), os.path.join(work, "train.bin")
    run([PY, os.path.join(HERE, "make_model.py"), "--arch", "llama", "--out", model, "--seed", "3", "--vocab_size",
         "256", "--n_embd", "64", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--ffn", "128",
         "--tokens", tokens, "--num_tokens", "6000"])
    env = {**os.environ, "OMP_NUM_THREADS": "1" if a.jobs > 1 else "2"}
    cases = [c for c in CASES if a.only in c[0]]
    failures = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_case, c, model, tokens, work, a.ztrain, env) for c in cases]
        for f in futures:
            ok, lines = f.result()
            failures += not ok
            print("\n".join(lines), flush=True)
    # `ztrain plot` overlays the runs' curves in one PNG (bench/bench_optimizers.py draws the quickstart's).
    png = os.path.join(work, "optimizers.png")
    run([a.ztrain, "plot", "--runs", ",".join(os.path.join(work, c[0]) for c in cases), "--metric", "loss",
         "--output", png])
    ok = open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    print(f"ztrain plot of {len(cases)} runs -> {'a PNG' if ok else 'FAIL: not a PNG'}")
    failures += not ok
    print(f"{len(cases) + 1 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
