#!/usr/bin/env python3
"""IA3 and DoRA parity: ztrain against PyTorch transcriptions of PEFT's IA3 and DoRA layers.

PEFT's IA3 (IA3Config): each target module's output is multiplied by a learned vector ia3_l
(out, 1), bias included; a feedforward module's input is multiplied instead (ia3_l (1, in)).
For a tiny GPT-2 (Conv1D; PEFT's defaults c_attn + mlp.c_proj, mlp.c_proj feedforward) and a tiny
Llama with grouped-query attention (PEFT's defaults k_proj, v_proj, down_proj, down_proj
feedforward), from one random HF folder, one initial adapter folder (vectors 1 + noise, so every
gradient and scale is live) and one token file:
  - 5 AdamW steps (accumulation 2, clipping, weight decay): losses and gradient norms within 1e-4;
  - ztrain trained from flags alone writes PEFT's key names, shapes and IA3Config fields;
  - the trained vectors equal PyTorch's; `ztrain merge-adapter` logits equal the applied model's
    within 1e-5 relative; `ztrain eval --adapter_name_or_path` gives the applied model's loss;
  - trainable parameters equal PEFT's count.

DoRA (LoraConfig use_dora): y = base(x) + (c - 1)(base(x) - b) + c s B A x, c = m / ||W + s B A||_row
with the norm detached, on a tiny GPT-2 (c_attn, attn.c_proj, c_fc) and the GQA Llama (q, v, up as
parts of fused Linears, down): the same checks, the magnitude saved as lora_magnitude_vector (out,).

usage: ia3_dora_parity.py --ztrain build/ztrain [--work DIR]
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hfmodels  # noqa: E402
import lora_parity as lp  # noqa: E402  (the shared harness: batches, training loop, commands)
import numpy as np  # noqa: E402
import torch  # noqa: E402

# name, make_model args, the block modules adapted, the feedforward ones
CASES = [
    ("gpt2_ia3", ["--arch", "gpt2", "--vocab_size", "300", "--n_embd", "64", "--n_layer", "2", "--n_head", "4"],
     ["attn.c_attn", "mlp.c_proj"], ["mlp.c_proj"]),
    ("llama_gqa_ia3", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2",
                       "--n_head", "4", "--n_kv_head", "2", "--ffn", "176"],
     ["self_attn.k_proj", "self_attn.v_proj", "mlp.down_proj"], ["mlp.down_proj"]),
]
CONFIG_FIELDS = {"auto_mapping", "base_model_name_or_path", "fan_in_fan_out", "feedforward_modules",
                 "inference_mode", "init_ia3_weights", "modules_to_save", "peft_type", "revision",
                 "target_modules", "task_type"}


class Ia3Wrap(torch.nn.Module):
    """PEFT's IA3 Linear: base(x) * l, or base(x * l) for a feedforward module; the base frozen."""

    def __init__(self, base, vec, feedforward):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.ia3_l = torch.nn.Parameter(vec.clone())
        self.feedforward = feedforward

    def forward(self, x):
        if self.feedforward:
            return self.base(x * self.ia3_l.flatten())
        return self.base(x) * self.ia3_l.flatten()


def apply_ia3(model, vectors, ff_paths):
    for path, vec in vectors.items():
        parent, name = path.rsplit(".", 1)
        setattr(model.get_submodule(parent), name, Ia3Wrap(model.get_submodule(path), vec, path in ff_paths))


def key(p):
    return f"base_model.model.{p}.ia3_l"


def case(name, make_args, modules, ff_modules, work, ztrain):
    fails, S = 0, lp.Setup(name, make_args, modules, work)
    d, model_dir, tokens_file, init, base, arch, paths = S.d, S.model_dir, S.tokens_file, S.init, S.base, S.arch, \
        S.paths
    ff_paths = {p for p in paths if any(p.endswith("." + m) for m in ff_modules)}
    want = {}
    for p in paths:
        n_in, n_out = lp.module_shape(base, p)
        want[key(p)] = (1, n_in) if p in ff_paths else (n_out, 1)
    g = torch.Generator().manual_seed(7)
    vectors = {p: 1 + 0.2 * torch.randn(*want[key(p)], generator=g) for p in paths}
    os.makedirs(init, exist_ok=True)
    hfmodels.write_safetensors(os.path.join(init, "adapter_model.safetensors"), {key(p): v for p, v in vectors.items()})
    targets = [m.split(".")[-1] if arch == "llama" else m.split(".")[-1] if m != "mlp.c_proj" else m for m in modules]
    json.dump({"peft_type": "IA3", "task_type": "CAUSAL_LM", "target_modules": targets,
               "feedforward_modules": [m.split(".")[-1] if arch == "llama" else m for m in ff_modules],
               "fan_in_fan_out": arch == "gpt2", "init_ia3_weights": True},
              open(os.path.join(init, "adapter_config.json"), "w"))
    tokens = np.fromfile(tokens_file, dtype="<u2").astype(np.int64)

    model, _ = hfmodels.load_model(model_dir)
    apply_ia3(model, vectors, ff_paths)
    model.train()
    params = [p for n, p in model.named_parameters() if "ia3_l" in n]
    ref_losses, ref_norms = lp.torch_train(model, tokens, params)

    out = os.path.join(d, "ztrain_out")
    common = ["--train_file", tokens_file, "--overwrite_output_dir", "--no_shuffle", "--lr_scheduler_type",
              "constant", "--logging_steps", "1", "--save_strategy", "no", "--per_device_train_batch_size",
              str(lp.B), "--gradient_accumulation_steps", str(lp.G), "--model_max_length", str(lp.T),
              "--max_steps", str(lp.STEPS)] + lp.HP
    log = lp.run([ztrain, "train", "--model_name_or_path", model_dir, "--adapter_name_or_path", init,
                  "--output_dir", out] + common)
    fails = lp.check_training(name, out, ref_losses, ref_norms, log, params, fails)
    saved = hfmodels.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    diff = max(float((saved[key(p)] - model.get_submodule(p).ia3_l.detach()).abs().max()) for p in paths)
    ok = diff < 5e-4
    print(f"{'':<22} saved vectors vs PyTorch's trained: max |diff| {diff:.2e} -> {'ok' if ok else 'FAIL'}")
    fails += not ok

    # From flags alone (PEFT's defaults for the family): PEFT's keys, shapes and config fields.
    fresh = os.path.join(d, "fresh")
    lp.run([ztrain, "train", "--model_name_or_path", model_dir, "--use_peft", "--peft_type", "ia3",
            "--output_dir", fresh] + common[:-len(lp.HP) - 2] + ["--max_steps", "1"])
    got = {k: tuple(v.shape) for k, v in hfmodels.read_safetensors(
        os.path.join(fresh, "adapter_model.safetensors")).items()}
    zcfg = json.load(open(os.path.join(fresh, "adapter_config.json")))
    ok = got == want and set(zcfg) == CONFIG_FIELDS and zcfg["peft_type"] == "IA3" and \
        zcfg["fan_in_fan_out"] == (arch == "gpt2")
    print(f"{'':<22} adapter folder from --peft_type ia3: {len(got)} tensors, keys/shapes "
          f"{'equal' if got == want else 'DIFFER'} to PEFT's, config fields "
          f"{'equal' if set(zcfg) == CONFIG_FIELDS else sorted(set(zcfg) ^ CONFIG_FIELDS)}, target_modules "
          f"{zcfg['target_modules']}, feedforward_modules {zcfg['feedforward_modules']} -> {'ok' if ok else 'FAIL'}")
    fails += not ok

    fails = lp.check_merge_and_eval(ztrain, d, model_dir, out,
                                    lambda m: apply_ia3(m, {p: saved[key(p)] for p in paths}, ff_paths), tokens, fails)
    return fails


# DoRA: name, make_model args, PEFT target_modules, r, alpha, the block modules adapted
DORA_CASES = [
    ("gpt2_dora", ["--arch", "gpt2", "--vocab_size", "300", "--n_embd", "64", "--n_layer", "2", "--n_head", "4"],
     ["c_attn", "attn.c_proj", "c_fc"], 4, 8, ["attn.c_attn", "attn.c_proj", "mlp.c_fc"]),
    ("llama_gqa_dora", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2",
                        "--n_head", "4", "--n_kv_head", "2", "--ffn", "176"],
     ["q_proj", "v_proj", "up_proj", "down_proj"], 8, 16,
     ["self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj"]),
]


class DoraWrap(torch.nn.Module):
    """PEFT's DoRA Linear (no dropout): base(x) + (c - 1)(base(x) - b) + c s B A x with
    c = m / ||W + s B A||_row, the norm detached as PEFT's DoraLinearLayer does."""

    def __init__(self, base, A, Bm, mag, scale, conv1d):
        super().__init__()
        self.base, self.scale, self.conv1d = base, scale, conv1d
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_A = torch.nn.Parameter(A.clone())
        self.lora_B = torch.nn.Parameter(Bm.clone())
        self.lora_magnitude_vector = torch.nn.Parameter(mag.clone())

    def forward(self, x):
        W = self.base.weight.t() if self.conv1d else self.base.weight  # (out, in)
        norm = (W + self.scale * (self.lora_B @ self.lora_A)).norm(dim=1).detach()
        c = self.lora_magnitude_vector / norm
        y = self.base(x)
        y_nb = y - self.base.bias if self.base.bias is not None else y
        return y + (c - 1) * y_nb + c * ((x @ self.lora_A.t()) @ self.lora_B.t()) * self.scale


def apply_dora(model, tensors, paths, scale):
    for path in paths:
        parent, name = path.rsplit(".", 1)
        mod = model.get_submodule(path)
        k = f"base_model.model.{path}."
        setattr(model.get_submodule(parent), name,
                DoraWrap(mod, tensors[k + "lora_A.weight"], tensors[k + "lora_B.weight"],
                         tensors[k + "lora_magnitude_vector"], scale, type(mod).__name__ == "Conv1D"))


def dora_case(name, make_args, targets, r, alpha, modules, work, ztrain):
    fails, S = 0, lp.Setup(name, make_args, modules, work)
    d, model_dir, tokens_file, init, base, arch, paths = S.d, S.model_dir, S.tokens_file, S.init, S.base, S.arch, \
        S.paths
    scale = alpha / r
    # A as PEFT draws it, B random (PEFT: zero), m = the row norms of W + s B A (PEFT's initial
    # magnitude for that B) moved by noise, so every gradient and the scale are live.
    g = torch.Generator().manual_seed(7)
    tensors, want = {}, {}
    for p in paths:
        n_in, n_out = lp.module_shape(base, p)
        mod = base.get_submodule(p)
        W = mod.weight.detach().t() if type(mod).__name__ == "Conv1D" else mod.weight.detach()
        A = (torch.rand(r, n_in, generator=g) * 2 - 1) / n_in ** 0.5
        Bm = torch.randn(n_out, r, generator=g) * 0.05
        mag = (W + scale * Bm @ A).norm(dim=1) * (1 + 0.1 * torch.randn(n_out, generator=g))
        k = f"base_model.model.{p}."
        tensors.update({k + "lora_A.weight": A, k + "lora_B.weight": Bm, k + "lora_magnitude_vector": mag})
        want.update({k + "lora_A.weight": (r, n_in), k + "lora_B.weight": (n_out, r),
                     k + "lora_magnitude_vector": (n_out,)})
    os.makedirs(init, exist_ok=True)
    hfmodels.write_safetensors(os.path.join(init, "adapter_model.safetensors"), tensors)
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
               "target_modules": targets, "use_dora": True, "bias": "none", "fan_in_fan_out": arch == "gpt2"},
              open(os.path.join(init, "adapter_config.json"), "w"))
    tokens = np.fromfile(tokens_file, dtype="<u2").astype(np.int64)
    model, _ = hfmodels.load_model(model_dir)
    apply_dora(model, tensors, paths, scale)
    model.train()
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    ref_losses, ref_norms = lp.torch_train(model, tokens, params)
    out = os.path.join(d, "ztrain_out")
    common = ["--train_file", tokens_file, "--overwrite_output_dir", "--no_shuffle", "--lr_scheduler_type",
              "constant", "--logging_steps", "1", "--save_strategy", "no", "--per_device_train_batch_size",
              str(lp.B), "--gradient_accumulation_steps", str(lp.G), "--model_max_length", str(lp.T),
              "--lora_dropout", "0"]
    log = lp.run([ztrain, "train", "--model_name_or_path", model_dir, "--adapter_name_or_path", init,
                  "--output_dir", out, "--max_steps", str(lp.STEPS)] + common + lp.HP)
    fails = lp.check_training(name, out, ref_losses, ref_norms, log, params, fails)
    # The dropout form (y += (c - 1)(x' W^T + s x' A^T B^T), its own backward) at a rate that keeps
    # every element: the same function, so the same losses.
    lp.run([ztrain, "train", "--model_name_or_path", model_dir, "--adapter_name_or_path", init, "--output_dir",
            out + "_drop", "--max_steps", str(lp.STEPS)] + common[:-1] + ["1e-12"] + lp.HP)
    hist_d = [e for e in json.load(open(os.path.join(out + "_drop", "trainer_state.json")))["log_history"]
              if "loss" in e]
    wd = max(lp.rel(h["loss"], x) for h, x in zip(hist_d, ref_losses))
    wdn = max(lp.rel(h["grad_norm"], x) for h, x in zip(hist_d, ref_norms))
    ok = len(hist_d) == lp.STEPS and wd <= 1e-4 and wdn <= 1e-4
    print(f"{'':<22} dropout form (--lora_dropout 1e-12): loss {wd:.2e}, grad_norm {wdn:.2e} -> "
          f"{'ok' if ok else 'FAIL'}")
    fails += not ok
    saved = hfmodels.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
    trained = {f"base_model.model.{p}.{n}": t.detach() for p in paths
               for n, t in model.get_submodule(p).named_parameters() if n.startswith("lora_")}
    trained = {k.replace("lora_A", "lora_A.weight").replace("lora_B", "lora_B.weight"): v for k, v in trained.items()}
    diff = max(float((saved[k] - trained[k]).abs().max()) for k in want)
    ok = diff < 5e-4 and {k: tuple(v.shape) for k, v in saved.items()} == want
    print(f"{'':<22} saved tensors: PEFT's keys and shapes, vs PyTorch's trained max |diff| {diff:.2e} -> "
          f"{'ok' if ok else 'FAIL'}")
    fails += not ok
    fresh = os.path.join(d, "fresh")
    lp.run([ztrain, "train", "--model_name_or_path", model_dir, "--use_peft", "--use_dora", "--lora_r", str(r),
            "--lora_target_modules", ",".join(targets), "--output_dir", fresh, "--max_steps", "1"] + common)
    zcfg = json.load(open(os.path.join(fresh, "adapter_config.json")))
    got = {k: tuple(v.shape) for k, v in hfmodels.read_safetensors(
        os.path.join(fresh, "adapter_model.safetensors")).items()}
    ok = got == want and zcfg["use_dora"] is True and set(zcfg) == lp.CONFIG_FIELDS
    print(f"{'':<22} folder from --use_dora: keys/shapes {'equal' if got == want else 'DIFFER'} to PEFT's, use_dora "
          f"{zcfg['use_dora']} -> {'ok' if ok else 'FAIL'}")
    fails += not ok
    fails = lp.check_merge_and_eval(ztrain, d, model_dir, out, lambda m: apply_dora(m, saved, paths, scale), tokens,
                                    fails)
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    torch.set_num_threads(2)
    work = a.work or tempfile.mkdtemp(prefix="zt_ia3_dora_")
    fails = sum(case(*c, work, a.ztrain) for c in CASES)
    fails += sum(dora_case(*c, work, a.ztrain) for c in DORA_CASES)
    print("ok" if not fails else f"{fails} FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
