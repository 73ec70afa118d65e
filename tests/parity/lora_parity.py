#!/usr/bin/env python3
"""LoRA parity: ztrain's adapters against a PyTorch transcription of PEFT's LoRA.

For a tiny GPT-2 (Conv1D, c_attn + c_proj, rank-stabilized), a tiny Llama with grouped-query
attention (all-linear), a tiny Phi-3 (fused qkv_proj / gate_up_proj, PEFT's default targets) and a
tiny Mixtral (attention adapted, experts and router frozen, aux loss on), from one random HF folder, one initial adapter folder (A uniform as PEFT
draws it, B random so that every gradient is live) and one token file:
  - train 5 AdamW steps (gradient accumulation 2, clipping, weight decay) in both: every per-step
    loss and pre-clip gradient norm within 1e-4 relative;
  - ztrain's adapter folder: exactly PEFT's key names and shapes (the expected list is written here
    from PEFT's naming rule) and adapter_config.json's fields; its tensors equal PyTorch's trained
    adapters closely;
  - `ztrain merge-adapter`: the merged folder's logits equal the adapter-applied model's within
    1e-5 relative (fp32);
  - `ztrain eval --adapter_name_or_path` gives the adapter-applied model's loss;
  - trainable parameters: ztrain's count equals PEFT's (sum of r (in + out) over the adapted
    modules), here and for the Llama 124M config with r = 8 on all linear layers.

usage: lora_parity.py --ztrain build/ztrain [--work DIR] [--only CASE] [--pack DIR]
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hfmodels  # noqa: E402

PY = "/usr/bin/python3"
PACK = None  # --pack DIR
B, G, T, STEPS, LR = 4, 2, 32, 5, 1e-3
HP = ["--learning_rate", str(LR), "--weight_decay", "0.1", "--adam_beta1", "0.9", "--adam_beta2", "0.95",
      "--adam_epsilon", "1e-8", "--max_grad_norm", "1.0"]
# name, make_model args, PEFT target_modules, r, alpha, use_rslora, the block modules adapted
CASES = [
    ("gpt2_rslora", ["--arch", "gpt2", "--vocab_size", "300", "--n_embd", "64", "--n_layer", "2", "--n_head", "4"],
     ["c_attn", "attn.c_proj"], 4, 8, True, ["attn.c_attn", "attn.c_proj"]),
    ("llama_gqa_all_linear", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2",
                              "--n_head", "4", "--n_kv_head", "2", "--ffn", "176"],
     "all-linear", 8, 16, False, ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]),
    # Phi-3: qkv_proj and gate_up_proj fused in HF as in ztrain; PEFT's default targets (none named).
    ("phi3_fused_defaults", ["--config", os.path.join(HERE, "..", "fixtures", "configs", "phi3-mini-128k.json"),
                             "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2", "--n_head", "4",
                             "--n_kv_head", "2", "--ffn", "128", "--rope_scaling",
                             json.dumps({"type": "longrope", "short_factor": [1.0 + 0.1 * i for i in range(8)],
                                         "long_factor": [1.0 + i for i in range(8)]})],
     None, 4, 8, False, ["self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"]),
    # Mixtral (4 experts, top 2, the load-balancing loss on): the attention modules adapted, the router
    # and experts frozen; the aux loss's gradient reaches the adapters through the residual stream.
    ("mixtral_attention", ["--config", os.path.join(HERE, "..", "fixtures", "configs", "mixtral-8x7b-v0.1.json"),
                           "--set", '{"num_local_experts": 4, "output_router_logits": true, '
                                    '"router_aux_loss_coef": 0.05}', "--vocab_size", "300", "--hidden_size", "64",
                           "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--ffn", "48", "--perturb"],
     ["q_proj", "k_proj", "v_proj", "o_proj"], 4, 8, False,
     ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"]),
    # PEFT's all-linear on a Mixtral (transformers 4.x's modules): attention, the router and each
    # expert's w1 / w3 / w2 adapted (ztrain runs the experts' adapters as grouped GEMMs).
    ("mixtral_all_linear", ["--config", os.path.join(HERE, "..", "fixtures", "configs", "mixtral-8x7b-v0.1.json"),
                            "--set", '{"num_local_experts": 4, "output_router_logits": true, '
                                     '"router_aux_loss_coef": 0.05}', "--vocab_size", "300", "--hidden_size", "64",
                            "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--ffn", "48", "--perturb"],
     "all-linear", 4, 8, False,
     ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "block_sparse_moe.gate"] +
     [f"block_sparse_moe.experts.{e}.{m}" for e in range(4) for m in ("w1", "w3", "w2")]),
    # Qwen2-MoE, named modules: the experts' up_proj and down_proj (not gate_proj: the adapted columns of
    # the fused [gate; up] GEMM), the shared expert's three and its gate.
    ("qwen2moe_experts", ["--config", os.path.join(HERE, "..", "fixtures", "configs", "qwen1.5-moe-a2.7b.json"),
                          "--set", '{"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, '
                                   '"shared_expert_intermediate_size": 48}', "--vocab_size", "300",
                          "--hidden_size", "64", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2", "--perturb"],
     ["up_proj", "down_proj", "shared_expert.gate_proj", "shared_expert_gate", "gate"], 4, 8, False,
     ["mlp.gate"] + [f"mlp.experts.{e}.{m}" for e in range(4) for m in ("up_proj", "down_proj")] +
     ["mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
      "mlp.shared_expert_gate"]),
]
# PEFT's LoraConfig fields as a saved adapter_config.json carries them.
CONFIG_FIELDS = {"alpha_pattern", "auto_mapping", "base_model_name_or_path", "bias", "fan_in_fan_out",
                 "inference_mode", "init_lora_weights", "layer_replication", "layers_pattern", "layers_to_transform",
                 "loftq_config", "lora_alpha", "lora_dropout", "megatron_config", "megatron_core", "modules_to_save",
                 "peft_type", "r", "rank_pattern", "revision", "target_modules", "task_type", "use_dora",
                 "use_rslora"}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


class LoraWrap(torch.nn.Module):
    """PEFT's LoRA layer: base(x) + scale * lora_B(lora_A(x)), the base frozen."""

    def __init__(self, base, A, Bm, scale):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_A = torch.nn.Parameter(A.clone())
        self.lora_B = torch.nn.Parameter(Bm.clone())
        self.scale = scale

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.lora_A.t()) @ self.lora_B.t())


def block_prefix(arch, layer):
    return f"transformer.h.{layer}" if arch == "gpt2" else f"model.layers.{layer}"


def module_shape(model, path):
    """(in, out) of a module: Conv1D stores its weight (in, out), nn.Linear (out, in)."""
    mod = model.get_submodule(path)
    w = mod.weight
    return (w.shape[0], w.shape[1]) if type(mod).__name__ == "Conv1D" else (w.shape[1], w.shape[0])


def apply_lora(model, adapters, modules, scale):
    """Wraps each adapted module with the adapter tensors {module path: (A, B)}."""
    for path in modules:
        parent, name = path.rsplit(".", 1)
        A, Bm = adapters[path]
        setattr(model.get_submodule(parent), name, LoraWrap(model.get_submodule(path), A, Bm, scale))


def batches(tokens, step, micro):
    n_windows = (len(tokens) - 1) // T
    xs, ys = [], []
    for j in range(B):
        w = (step * B * G + micro * B + j) % n_windows
        c = tokens[w * T: w * T + T + 1]
        xs.append(c[:-1])
        ys.append(c[1:])
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def torch_train(model, tokens, params):
    # ztrain decays tensors of 2 or more dimensions (DoRA's magnitude vectors are 1-D).
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=LR, betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(G):
            x, y = batches(tokens, step, micro)
            _, loss = model(x, y)
            (loss / G).backward()
            total += loss.item() / G
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))
        opt.step()
        losses.append(total)
    return losses, norms


def say(ok, text, fails):
    """Prints one indented check line; returns fails plus one when the check failed."""
    print(f"{'':<22} {text} -> {'ok' if ok else 'FAIL'}")
    return fails + (not ok)


def check_training(name, out, ref_losses, ref_norms, log, params, fails):
    """ztrain's per-step losses and gradient norms (trainer_state.json) against PyTorch's, and its
    trainable-parameter count against the reference's parameters."""
    hist = [e for e in json.load(open(os.path.join(out, "trainer_state.json")))["log_history"] if "loss" in e]
    wl = max(rel(h["loss"], x) for h, x in zip(hist, ref_losses))
    wn = max(rel(h["grad_norm"], x) for h, x in zip(hist, ref_norms))
    print(f"{name:<22} losses ztrain {[round(h['loss'], 6) for h in hist]}")
    print(f"{'':<22} losses torch  {[round(x, 6) for x in ref_losses]}")
    fails = say(len(hist) == STEPS and wl <= 1e-4 and wn <= 1e-4,
                f"worst relative difference: loss {wl:.2e}, grad_norm {wn:.2e}", fails)
    zcount = int(re.search(r"Number of trainable parameters = (\d+)", log).group(1))
    count = sum(p.numel() for p in params)
    return say(zcount == count, f"trainable parameters: ztrain {zcount}, PEFT {count}", fails)


def check_merge_and_eval(ztrain, d, model_dir, out, apply, tokens, fails):
    """`ztrain merge-adapter`'s logits against the adapter-applied reference (apply(model) wraps a
    fresh base with ztrain's saved adapter), and `ztrain eval --adapter_name_or_path` against its loss."""
    merged = os.path.join(d, "merged")
    run([ztrain, "merge-adapter", "--model_name_or_path", model_dir, "--adapter_name_or_path", out, "--output_dir",
         merged])
    applied, _ = hfmodels.load_model(model_dir)
    apply(applied)
    mm, _ = hfmodels.load_model(merged)
    x, y = batches(tokens, 0, 0)
    with torch.no_grad():
        la, loss_applied = applied(x, y)
        lm, _ = mm(x)
    mrel = float((la - lm).abs().max() / la.abs().max())
    fails = say(mrel <= 1e-5, f"merged vs adapter-applied logits: max relative {mrel:.2e}", fails)
    if PACK:  # for bench/gpu_peft_check.py: PEFT's PeftModel on this folder must give these logits
        dst = os.path.join(PACK, os.path.basename(d))
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(model_dir, os.path.join(dst, "model"))
        shutil.copytree(out, os.path.join(dst, "adapter"),
                        ignore=lambda _, names: [n for n in names if not n.startswith("adapter_")])
        np.savez(os.path.join(dst, "reference.npz"), input_ids=x.numpy(), logits=la.numpy())
    vfile = os.path.join(d, "val.bin")  # one batch of B windows, as the reference's (an MoE aux loss is per batch)
    tokens[: B * T + 1].astype("<u2").tofile(vfile)
    ev = run([ztrain, "eval", "--model_name_or_path", model_dir, "--adapter_name_or_path", out,
              "--validation_file", vfile, "--per_device_eval_batch_size", str(B), "--model_max_length", str(T)])
    zl, tl = float(re.search(r"eval_loss\s+=\s+([0-9.]+)", ev).group(1)), float(loss_applied)
    return say(rel(zl, tl) <= 1e-5, f"eval --adapter_name_or_path loss {zl:.6f} vs PyTorch {tl:.6f}", fails)


class Setup:
    """A case's random HF folder and tokens under work/name, its reference base model, and the
    adapted modules' paths in every layer."""

    def __init__(self, name, make_args, modules, work):
        self.d = os.path.join(work, name)
        self.model_dir, self.tokens_file = os.path.join(self.d, "model"), os.path.join(self.d, "train.bin")
        self.init = os.path.join(self.d, "init")
        run([PY, os.path.join(HERE, "make_model.py"), "--out", self.model_dir, "--seed", "3", "--tokens",
             self.tokens_file, "--num_tokens", "6000"] + make_args)
        self.base, config = hfmodels.load_model(self.model_dir)
        self.arch = "gpt2" if config["model_type"] == "gpt2" else "llama"
        L = config.get("n_layer", config.get("num_hidden_layers"))
        self.paths = [f"{block_prefix(self.arch, l)}.{m}" for l in range(L) for m in modules]
        os.makedirs(self.init, exist_ok=True)


def case(name, make_args, targets, r, alpha, rslora, modules, work, ztrain):
    fails, S = 0, Setup(name, make_args, modules, work)
    d, model_dir, tokens_file, init, base, arch, paths = S.d, S.model_dir, S.tokens_file, S.init, S.base, S.arch, \
        S.paths
    # The initial adapters: A as PEFT draws it (U(+-1/sqrt(in))), B random (PEFT starts it at zero,
    # which would leave A's first gradients zero and test less).
    g = torch.Generator().manual_seed(7)
    adapters, tensors = {}, {}
    for p in paths:
        n_in, n_out = module_shape(base, p)
        A = (torch.rand(r, n_in, generator=g) * 2 - 1) / math.sqrt(n_in)
        Bm = torch.randn(n_out, r, generator=g) * 0.05
        adapters[p] = (A, Bm)
        tensors[f"base_model.model.{p}.lora_A.weight"] = A
        tensors[f"base_model.model.{p}.lora_B.weight"] = Bm
    os.makedirs(init, exist_ok=True)
    hfmodels.write_safetensors(os.path.join(init, "adapter_model.safetensors"), tensors)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
           "target_modules": targets, "use_rslora": rslora, "bias": "none", "fan_in_fan_out": arch == "gpt2"}
    json.dump(cfg, open(os.path.join(init, "adapter_config.json"), "w"))
    scale = alpha / math.sqrt(r) if rslora else alpha / r
    tokens = np.fromfile(tokens_file, dtype="<u2").astype(np.int64)

    model, _ = hfmodels.load_model(model_dir)
    apply_lora(model, adapters, paths, scale)
    model.train()
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    ref_losses, ref_norms = torch_train(model, tokens, params)

    out = os.path.join(d, "ztrain_out")
    log = run([ztrain, "train", "--model_name_or_path", model_dir, "--adapter_name_or_path", init, "--lora_dropout",
               "0", "--train_file", tokens_file, "--output_dir", out, "--overwrite_output_dir", "--no_shuffle",
               "--lr_scheduler_type", "constant", "--logging_steps", "1", "--save_strategy", "no",
               "--per_device_train_batch_size", str(B), "--gradient_accumulation_steps", str(G),
               "--model_max_length", str(T), "--max_steps", str(STEPS)] + HP)
    fails = check_training(name, out, ref_losses, ref_norms, log, params, fails)

    # The folder: PEFT's keys and shapes, its config fields, and PyTorch's trained values.
    saved = hfmodels.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    want = {}
    for p in paths:
        n_in, n_out = module_shape(base, p)
        want[f"base_model.model.{p}.lora_A.weight"] = (r, n_in)
        want[f"base_model.model.{p}.lora_B.weight"] = (n_out, r)
    got = {k: tuple(v.shape) for k, v in saved.items()}
    zcfg = json.load(open(os.path.join(out, "adapter_config.json")))
    ok = got == want and set(zcfg) == CONFIG_FIELDS and zcfg["r"] == r and zcfg["lora_alpha"] == alpha and \
        zcfg["use_rslora"] == rslora and zcfg["peft_type"] == "LORA" and zcfg["fan_in_fan_out"] == (arch == "gpt2")
    print(f"{'':<22} adapter folder: {len(got)} tensors, keys/shapes {'equal' if got == want else 'DIFFER'} to "
          f"PEFT's, config fields {'equal' if set(zcfg) == CONFIG_FIELDS else sorted(set(zcfg) ^ CONFIG_FIELDS)}, "
          f"target_modules {zcfg['target_modules']} -> {'ok' if ok else 'FAIL'}")
    fails += not ok
    trained = {f"base_model.model.{p}.lora_A.weight": m.lora_A for p, m in
               ((p, model.get_submodule(p)) for p in paths)}
    trained.update({f"base_model.model.{p}.lora_B.weight": model.get_submodule(p).lora_B for p in paths})
    diff = max(float((saved[k] - trained[k].detach()).abs().max()) for k in want)
    ok = diff < 5e-4  # as run_parity.py: 10% of 5 steps' largest Adam travel
    print(f"{'':<22} saved adapters vs PyTorch's trained: max |diff| {diff:.2e} -> {'ok' if ok else 'FAIL'}")
    fails += not ok

    saved_pairs = {p: (saved[f"base_model.model.{p}.lora_A.weight"], saved[f"base_model.model.{p}.lora_B.weight"])
                   for p in paths}
    fails = check_merge_and_eval(ztrain, d, model_dir, out, lambda m: apply_lora(m, saved_pairs, paths, scale),
                                 tokens, fails)
    return fails


def llama124m_count(work, ztrain):
    """r = 8 on all linear layers of the Llama 124M config: ztrain's count against PEFT's formula."""
    cfg = json.load(open(os.path.join(HERE, "..", "..", "bench", "configs", "llama-124m.json")))
    C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hs = cfg.get("head_dim", C // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hs, cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hs
    shapes = [(C, q), (C, kv), (C, kv), (q, C), (C, F), (C, F), (F, C)]
    peft = L * sum(8 * (i + o) for i, o in shapes)
    tok = os.path.join(work, "t124.bin")
    np.random.default_rng(0).integers(0, 1000, 600).astype("<u2").tofile(tok)
    log = run([ztrain, "train", "--model_config_path", os.path.join(HERE, "..", "..", "bench", "configs",
                                                                     "llama-124m.json"),
               "--use_peft", "--lora_r", "8", "--lora_target_modules", "all-linear", "--train_file", tok,
               "--output_dir", os.path.join(work, "o124"), "--overwrite_output_dir", "--max_steps", "1",
               "--per_device_train_batch_size", "1", "--model_max_length", "64", "--save_strategy", "no"])
    z = int(re.search(r"Number of trainable parameters = (\d+)", log).group(1))
    line = re.search(r"trainable params: .*", log).group(0)
    ok = z == peft
    print(f"llama-124m r=8 all-linear: ztrain {z} ({line}), PEFT's formula {peft}, Adam state "
          f"{8 * z / 2**20:.2f} MiB -> {'ok' if ok else 'FAIL'}")
    return int(not ok)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--work", default="")
    ap.add_argument("--only", default="", help="run this case alone (and not the 124M count)")
    ap.add_argument("--pack", default="", help="also keep each case's model, ztrain's adapter folder and the "
                    "adapter-applied logits under DIR/case (bench/gpu_peft_check.py reads them)")
    a = ap.parse_args()
    global PACK
    PACK = os.path.abspath(a.pack) if a.pack else None
    torch.set_num_threads(2)
    work = a.work or tempfile.mkdtemp(prefix="zt_lora_")
    fails = sum(case(*c, work, a.ztrain) for c in CASES if not a.only or c[0] == a.only)
    if not a.only:
        fails += llama124m_count(work, a.ztrain)
    print("ok" if not fails else f"{fails} FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
