#!/usr/bin/env python3
"""PyTorch peer for ztrain throughput benchmarks (fp32, CPU).

Run with OPENBLAS_CORETYPE=SkylakeX in the environment (the bench driver sets
it): Debian's torch calls the system OpenBLAS for GEMMs, and its runtime CPU
detection does not pick the AVX-512 kernels on every host, which would make the
peer look slower than PyTorch really is.

  OPENBLAS_CORETYPE=SkylakeX python3 bench/torch_peer.py --arch gpt2|llama \\
      [--preset NAME | --config config.json] --B 4 --T 1024 --steps 10 --warmup 2 --threads 2

Times full training steps (forward, mean cross-entropy, backward,
clip_grad_norm_(1.0), AdamW step, zero_grad) on random tokens and prints one
JSON line:

  {"tokens_per_s": ..., "step_ms": ..., "peak_rss_mb": ..., plus descriptive keys}

measured over the post-warmup steps (peak RSS is the whole process's maximum).
The model code is the parity oracle's (tests/parity/hfmodels.py), so the peer
computes exactly the math ztrain is checked against.
"""

import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity"))

PRESETS = {
    "gpt2-124m": {
        "model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
        "n_layer": 12, "n_head": 12, "n_inner": None, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
    },
    # A Llama with about GPT-2-small's parameter count (124.7M with the untied head, vs 124.4M).
    "llama-124m": {
        "model_type": "llama", "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
        "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    },
}
DEFAULT_PRESET = {"gpt2": "gpt2-124m", "llama": "llama-124m"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["gpt2", "llama"], help="selects the default preset")
    p.add_argument("--preset", choices=sorted(PRESETS))
    p.add_argument("--config", help="HF config.json to build instead of a preset")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autocast", choices=["", "bf16"], default="",
                   help="bf16: forward under torch.autocast('cpu', torch.bfloat16) (PyTorch's mixed precision)")
    a = p.parse_args()

    # OpenBLAS (pthreads build) sizes its own pool from these when it loads and
    # ignores torch.set_num_threads, so they must be set before importing torch.
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import hfmodels

    if a.config:
        with open(a.config) as f:
            config = json.load(f)
    else:
        name = a.preset or DEFAULT_PRESET.get(a.arch)
        if name is None:
            p.error("give --arch, --preset or --config")
        config = PRESETS[name]
    if a.arch and config["model_type"] != a.arch:
        p.error(f"--arch {a.arch} does not match model_type {config['model_type']}")
    if a.steps < 1:
        p.error("--steps must be >= 1")
    if "OPENBLAS_CORETYPE" not in os.environ:
        print("torch_peer: warning: OPENBLAS_CORETYPE is not set", file=sys.stderr)

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = hfmodels.build_model(config)
    n_layer = config.get("n_layer", config.get("num_hidden_layers"))
    hfmodels.init_weights(model, n_layer)
    model.train()
    n_params = sum(p_.numel() for p_ in model.parameters())

    # foreach=True: the multi-tensor AdamW path, the fastest CPU option in 1.13.
    opt = torch.optim.AdamW(hfmodels.param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95),
                            eps=1e-8, foreach=True)
    vocab = model.config["vocab_size"]
    data = torch.randint(0, vocab, (a.B, a.T + 1))
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        if a.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()  # .item() also syncs, so the step is fully done

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dt = time.perf_counter() - t0

    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is KiB on Linux
    print(json.dumps({
        "tokens_per_s": a.B * a.T * a.steps / dt,
        "step_ms": dt / a.steps * 1000.0,
        "peak_rss_mb": peak_rss_mb,
        "model_type": config["model_type"],
        "n_params": n_params,
        "B": a.B, "T": a.T, "steps": a.steps, "warmup": a.warmup, "threads": a.threads,
        "final_loss": loss,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
