#!/usr/bin/env python3
"""PyTorch oracle trainer for ztrain parity tests.

  torch_train.py --model DIR --train_file tokens.bin [--per_device_train_batch_size B]
      [--gradient_accumulation_steps G] [--model_max_length T] [--max_steps S]
      [--learning_rate 1e-3] [--weight_decay 0.1] [--adam_beta1 0.9] [--adam_beta2 0.95]
      [--adam_epsilon 1e-8] [--max_grad_norm 1.0] [--threads 2]
      [--dump_grads grads.safetensors] [--save_dir OUT_DIR]

Trains an HF model folder (gpt2 or llama) on a flat uint16 token file with the
exact data order, loss scaling, clipping and AdamW grouping that ztrain is
expected to implement, in fp32 on CPU with a constant learning rate, and prints

  {"losses": [...], "grad_norms": [...]}

on stdout (one entry per optimizer step; grad_norms are the pre-clip global L2
norms returned by clip_grad_norm_). Nothing else is written to stdout.

Data order (no shuffling): window i = inputs tokens[i*T : i*T+T], targets
tokens[i*T+1 : i*T+T+1]; step s uses windows s*B*G .. s*B*G+B*G-1 (mod the
number of whole windows), split into G micro-batches of B consecutive windows.
The step loss is the mean over all B*G*T targets, i.e. each micro-batch's mean
loss is scaled by 1/G before backward.
"""

import argparse
import json
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF folder: config.json + model.safetensors")
    p.add_argument("--train_file", required=True, help="flat little-endian uint16 tokens")
    p.add_argument("--per_device_train_batch_size", type=int, default=4)
    p.add_argument("--gradient_accumulation_steps", type=int, default=1)
    p.add_argument("--model_max_length", type=int, default=64)
    p.add_argument("--max_steps", type=int, default=10)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--adam_beta1", type=float, default=0.9)
    p.add_argument("--adam_beta2", type=float, default=0.95)
    p.add_argument("--adam_epsilon", type=float, default=1e-8)
    p.add_argument("--max_grad_norm", type=float, default=1.0, help="<= 0 disables clipping")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--optim", default="adamw_torch", help="ztrain's --optim name (ref_optimizers.py)")
    p.add_argument("--optim_args", default="", help="ztrain's --optim_args")
    p.add_argument("--data_seed", type=int, default=42, help="ztrain's data seed (Sophia's sampled labels)")
    p.add_argument("--dump_grads", help="write step 0's accumulated, pre-clip gradients (safetensors F32)")
    p.add_argument("--save_dir", help="save the trained model as an HF folder (F32)")
    p.add_argument("--autocast", choices=["", "bf16"], default="",
                   help="bf16: forward under torch.autocast('cpu', torch.bfloat16), PyTorch's mixed precision")
    return p.parse_args()


if __name__ == "__main__":
    ARGS = parse_args()
    # numpy and torch both load the system OpenBLAS (pthreads build), which sizes
    # its thread pool from the environment at load time and ignores
    # torch.set_num_threads, so pin it before either is imported.
    os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
    os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfmodels  # noqa: E402
import ref_optimizers  # noqa: E402


def batch_for(tokens, first_window, B, T, n_windows):
    """Inputs/targets (B, T) int64 for B consecutive windows starting at first_window."""
    xs, ys = [], []
    for j in range(B):
        w = (first_window + j) % n_windows
        chunk = tokens[w * T: w * T + T + 1]
        xs.append(chunk[:-1])
        ys.append(chunk[1:])
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def curvature_pass(model, opt, params, clip, tokens, step, B, G, T, n_windows, data_seed):
    """Sophia's Gauss-Newton-Bartlett pass on the step's micro-batches, as ztrain draws its labels."""
    opt.zero_grad()
    for micro in range(G):
        x, _ = batch_for(tokens, step * B * G + micro * B, B, T, n_windows)
        logits, _ = model(x)
        y = ref_optimizers.sampled_labels(logits.detach(), data_seed, step, 0, micro + 1)
        (hfmodels.lm_loss(logits, y) / G).backward()
    torch.nn.utils.clip_grad_norm_(params, clip)
    opt.update_hessian()


def main(a):
    torch.set_num_threads(a.threads)
    B, G, T = a.per_device_train_batch_size, a.gradient_accumulation_steps, a.model_max_length

    model, config = hfmodels.load_model(a.model)
    model.train()
    tokens = np.fromfile(a.train_file, dtype="<u2").astype(np.int64)
    n_windows = (len(tokens) - 1) // T
    if n_windows < 1:
        sys.exit(f"{a.train_file}: {len(tokens)} tokens is less than one window of {T}+1")
    vocab = model.config["vocab_size"]
    if tokens.max() >= vocab:
        sys.exit(f"{a.train_file}: token id {tokens.max()} >= vocab_size {vocab}")

    if a.optim == "adamw_torch":
        opt = torch.optim.AdamW(hfmodels.param_groups(model, a.weight_decay), lr=a.learning_rate,
                                betas=(a.adam_beta1, a.adam_beta2), eps=a.adam_epsilon)
    else:
        opt = ref_optimizers.make(a.optim, model, a)
    sophia = isinstance(opt, ref_optimizers.Sophia)
    params = [p_ for p_ in model.parameters()]
    # max_norm=inf still returns the norm and multiplies by a clamped coefficient of 1.
    clip = a.max_grad_norm if a.max_grad_norm > 0 else float("inf")

    losses, grad_norms = [], []
    for step in range(a.max_steps):
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for micro in range(G):
            x, y = batch_for(tokens, step * B * G + micro * B, B, T, n_windows)
            if a.autocast == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    _, loss = model(x, y)
                loss = loss.float()
            else:
                _, loss = model(x, y)
            (loss / G).backward()
            step_loss += loss.item() / G
        if step == 0 and a.dump_grads:
            grads = {n: p_.grad if p_.grad is not None else torch.zeros_like(p_)
                     for n, p_ in model.named_parameters()}
            hfmodels.write_safetensors(a.dump_grads, grads)
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        if sophia:
            opt.step(a.learning_rate, bs=B * G * T)
            if step % opt.interval == opt.interval - 1:
                curvature_pass(model, opt, params, clip, tokens, step, B, G, T, n_windows, a.data_seed)
        elif isinstance(opt, ref_optimizers.Base):
            opt.step(a.learning_rate)
        else:
            opt.step()
        losses.append(float(step_loss))
        grad_norms.append(float(norm))

    if a.save_dir:
        hfmodels.save_model(a.save_dir, model, config)
    json.dump({"losses": losses, "grad_norms": grad_norms}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(ARGS)
