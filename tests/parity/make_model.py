#!/usr/bin/env python3
"""Writes a tiny random Hugging Face model folder and/or random token data.

  make_model.py --arch gpt2|llama --out DIR [--dtype F32|BF16] [--seed S] [size flags]
  make_model.py --config real_config.json --out DIR [size flags] [--perturb]
  make_model.py --tokens train.bin --num_tokens N [--vocab_size V] [--seed S]

The folder holds config.json (shaped like what transformers' save_pretrained
writes) and model.safetensors. Token files are flat little-endian uint16 ids,
the nanoGPT train.bin layout. Both outputs can be made in one call; they use
independent seeded generators so adding one never changes the other.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hfmodels  # noqa: E402

TRANSFORMERS_VERSION = "4.40.0"  # cosmetic; HF configs always carry one


def gpt2_config(a):
    C = a.n_embd
    ffn = a.ffn if a.ffn is not None else 4 * C
    return {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.0,
        "bos_token_id": a.vocab_size - 1,
        "embd_pdrop": 0.0,
        "eos_token_id": a.vocab_size - 1,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2",
        "n_ctx": a.max_pos,
        "n_embd": C,
        "n_head": a.n_head,
        # HF writes null for the default 4*n_embd; keep that so both spellings get tested.
        "n_inner": None if ffn == 4 * C else ffn,
        "n_layer": a.n_layer,
        "n_positions": a.max_pos,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float32",
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": a.vocab_size,
    }


def llama_config(a):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": a.n_embd,
        "initializer_range": 0.02,
        "intermediate_size": a.ffn if a.ffn is not None else 176,
        "max_position_embeddings": a.max_pos,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": a.n_head,
        "num_hidden_layers": a.n_layer,
        "num_key_value_heads": a.n_kv_head if a.n_kv_head is not None else 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": a.rope_theta,
        "tie_word_embeddings": bool(a.tie),
        "torch_dtype": "float32",
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "vocab_size": a.vocab_size,
    }


def shrunk_config(a):
    """A published config.json (tests/fixtures/configs) at test size: every key stays, only
    the widths, depth, vocabulary and context shrink (and the sliding window, so it acts)."""
    with open(a.config) as f:
        c = json.load(f)
    if c["model_type"] == "gpt2":
        raise SystemExit("--config is for the Llama-shaped families")
    c.update({"vocab_size": a.vocab_size, "hidden_size": a.n_embd, "num_hidden_layers": a.n_layer,
              "num_attention_heads": a.n_head, "intermediate_size": a.ffn if a.ffn is not None else 176,
              "max_position_embeddings": a.max_pos, "torch_dtype": "float32"})
    if a.n_kv_head is not None:
        c["num_key_value_heads"] = a.n_kv_head
    if "head_dim" in c:
        c["head_dim"] = a.head_dim if a.head_dim is not None else a.n_embd // a.n_head
    if c.get("sliding_window") is not None and a.sliding_window is not None:
        c["sliding_window"] = a.sliding_window
    if a.rope_scaling is not None:
        c["rope_scaling"] = json.loads(a.rope_scaling)
    for k, v in (json.loads(a.set) if a.set else {}).items():
        c[k] = v
    return c


@torch.no_grad()
def perturb(model, gen):
    """Biases and norm weights away from their 0 / 1 init, and q/k projections 8x larger
    (sharper attention, so position encodings and windows move the loss), so a test sees
    each family's differences act."""
    for name, p in model.named_parameters():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            p.mul_(8.0)
        if name.endswith((".block_sparse_moe.gate.weight", ".mlp.gate.weight")):
            p.mul_(10.0)  # MoE routers: logits far apart, so no near-tie flips a top-k choice between the two sides
        if name.endswith("qkv_proj.weight"):  # Phi-3: q and k are its first rows
            c = model.config
            p[:(c["num_attention_heads"] + c["num_key_value_heads"]) * c["head_dim"]].mul_(8.0)
        if p.dim() == 1:
            zero_centred = getattr(model, "norm_zero_centred", False)  # Gemma: the norm scales by 1 + w
            base = 0.0 if name.endswith("bias") or zero_centred else 1.0
            if zero_centred and name.endswith(("q_norm.weight", "k_norm.weight")):
                base = 2.0  # q and k normalized, then x3: sharp enough that windows, bases and scale act
            p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["gpt2", "llama"])
    p.add_argument("--out", help="model folder to write")
    p.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab_size", type=int, default=256)
    p.add_argument("--n_embd", "--hidden", "--hidden_size", dest="n_embd", type=int, default=64)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_kv_head", type=int, default=None, help="llama only (default 2)")
    p.add_argument("--ffn", type=int, default=None, help="default 4*n_embd (gpt2) / 176 (llama)")
    p.add_argument("--max_pos", type=int, default=128)
    p.add_argument("--rope_theta", type=float, default=10000.0)
    p.add_argument("--tie", action="store_true",
                   help="llama: tie lm_head to embed_tokens (GPT-2 is always tied)")
    p.add_argument("--config", help="a published config.json to shrink (Llama-shaped families)")
    p.add_argument("--head_dim", type=int, default=None, help="--config: head_dim when the config has one")
    p.add_argument("--sliding_window", type=int, default=None, help="--config: a shorter window")
    p.add_argument("--rope_scaling", default=None, help="--config: a rope_scaling object (JSON)")
    p.add_argument("--set", default=None, help="--config: other keys to set (a JSON object)")
    p.add_argument("--perturb", action="store_true", help="random biases and norm weights")
    p.add_argument("--tokens", help="also write random uint16 tokens to this file")
    p.add_argument("--num_tokens", type=int, default=4096)
    a = p.parse_args()

    if not a.out and not a.tokens:
        p.error("nothing to do: give --out and/or --tokens")
    if a.out:
        if not a.arch and not a.config:
            p.error("--out needs --arch or --config")
        if a.arch == "gpt2" and a.n_kv_head not in (None, a.n_head):
            p.error("gpt2 has no grouped-query attention (--n_kv_head)")
        if a.config:
            config = shrunk_config(a)
        else:
            config = gpt2_config(a) if a.arch == "gpt2" else llama_config(a)
        model = hfmodels.build_model(config)
        gen = torch.Generator().manual_seed(a.seed)
        hfmodels.init_weights(model, a.n_layer, gen)
        if a.perturb:
            perturb(model, gen)
        hfmodels.save_model(a.out, model, config, dtype=a.dtype)

    if a.tokens:
        if not 0 < a.vocab_size <= 65536:
            p.error("uint16 tokens need vocab_size <= 65536")
        rng = np.random.default_rng(a.seed)
        toks = rng.integers(0, a.vocab_size, size=a.num_tokens, dtype=np.int64).astype("<u2")
        os.makedirs(os.path.dirname(os.path.abspath(a.tokens)), exist_ok=True)
        toks.tofile(a.tokens)


if __name__ == "__main__":
    main()
