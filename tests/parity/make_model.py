#!/usr/bin/env python3
"""Writes a tiny random Hugging Face model folder and/or random token data.

  make_model.py --arch gpt2|llama --out DIR [--dtype F32|BF16] [--seed S] [size flags]
  make_model.py --tokens train.bin --num_tokens N [--vocab_size V] [--seed S]

The folder holds config.json (shaped like what transformers' save_pretrained
writes) and model.safetensors. Token files are flat little-endian uint16 ids,
the nanoGPT train.bin layout. Both outputs can be made in one call; they use
independent seeded generators so adding one never changes the other.
"""

import argparse
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
    p.add_argument("--tokens", help="also write random uint16 tokens to this file")
    p.add_argument("--num_tokens", type=int, default=4096)
    a = p.parse_args()

    if not a.out and not a.tokens:
        p.error("nothing to do: give --out and/or --tokens")
    if a.out:
        if not a.arch:
            p.error("--out needs --arch")
        if a.arch == "gpt2" and a.n_kv_head not in (None, a.n_head):
            p.error("gpt2 has no grouped-query attention (--n_kv_head)")
        config = gpt2_config(a) if a.arch == "gpt2" else llama_config(a)
        model = hfmodels.build_model(config)
        gen = torch.Generator().manual_seed(a.seed)
        hfmodels.init_weights(model, a.n_layer, gen)
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
