#!/usr/bin/env python3
"""Tier-2 parity: ztrain against the PyTorch reference (tests/parity/hfmodels.py).

For GPT-2 and for Llama with grouped-query attention (fp32 weights), a tied Llama
stored in BF16, and each Llama-shaped family from its published config.json (Llama 3.2
with llama3 RoPE, Mistral with a sliding window shorter than the sequence, Qwen2.5's
q/k/v biases, Qwen3's q/k norms, OLMo-2's output norms and whole-projection q/k norms,
Phi-3's fused projections and longrope, Gemma 3's sliding and global layers, Gemma 2's soft-capping,
Llama biases with
linear / yarn / dynamic RoPE):
build one random HF folder and one token file, train 5 AdamW steps
(lr 1e-3, weight decay 0.1, clip 1.0, betas 0.9/0.95, eps 1e-8, constant lr, file
order, gradient accumulation 2) in both, and require every per-step loss and pre-clip
gradient norm within 1e-4 relative. Then load ztrain's saved folder with the reference
loader and require its parameters to equal PyTorch's trained ones closely (see the
tolerance's comment), which checks the saved names, layouts and config.json.

usage: run_parity.py --ztrain build/ztrain [--work DIR]
"""
import argparse
import json
import os
import concurrent.futures
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
HP = ["--learning_rate", "1e-3", "--weight_decay", "0.1", "--adam_beta1", "0.9", "--adam_beta2", "0.95",
      "--adam_epsilon", "1e-8", "--max_grad_norm", "1.0"]
CASES = [
    ("gpt2", ["--arch", "gpt2", "--vocab_size", "300", "--n_embd", "64", "--n_layer", "2", "--n_head", "4"]),
    ("llama_gqa", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2", "--n_head",
                   "4", "--n_kv_head", "2", "--ffn", "176"]),
    ("llama_tied_bf16", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2",
                         "--n_head", "8", "--n_kv_head", "2", "--ffn", "128", "--tie", "--dtype", "BF16"]),
]
# The families, from their published config.json (tests/fixtures/configs) shrunk to test size with
# every family key kept; biases and norm weights perturbed (--perturb) so that they act.
CONFIGS = os.path.join(HERE, "..", "fixtures", "configs")
FAMILY = ["--vocab_size", "300", "--hidden_size", "64", "--n_layer", "2", "--n_head", "4", "--n_kv_head", "2",
          "--ffn", "128", "--perturb"]
# longrope factors for head_dim 16 (8 frequencies): short near 1, long growing to 20.
PHI3_ROPE = json.dumps({"type": "longrope", "short_factor": [1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7],
                        "long_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 9.0, 20.0]})
CASES += [
    ("llama3.2_rope_llama3", ["--config", os.path.join(CONFIGS, "llama-3.2-1b.json"), "--head_dim", "16"] + FAMILY),
    ("mistral_window8", ["--config", os.path.join(CONFIGS, "mistral-7b-v0.1.json"), "--sliding_window", "8"] + FAMILY),
    ("qwen2.5_qkv_bias", ["--config", os.path.join(CONFIGS, "qwen2.5-0.5b.json")] + FAMILY),
    ("qwen3_qk_norm", ["--config", os.path.join(CONFIGS, "qwen3-0.6b.json"), "--head_dim", "24"] + FAMILY),
    ("llama_linear_biases", ["--config", os.path.join(CONFIGS, "llama-3.2-1b.json"), "--rope_scaling",
                             '{"type": "linear", "factor": 2.0}', "--set",
                             '{"attention_bias": true, "mlp_bias": true, "tie_word_embeddings": false}'] + FAMILY),
    ("llama_rope_yarn", ["--config", os.path.join(CONFIGS, "llama-3.2-1b.json"), "--rope_scaling",
                         '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}'] + FAMILY),
    # Llama 3's scaling leaves the frequencies that turn within 32 tokens alone; with an original
    # context of 16 it rescales most of them, so the test sees it.
    ("llama_rope_llama3_16", ["--config", os.path.join(CONFIGS, "llama-3.2-1b.json"), "--head_dim", "16",
                              "--rope_scaling", '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, '
                              '"high_freq_factor": 4.0, "original_max_position_embeddings": 16}'] + FAMILY),
    ("olmo2_post_norms", ["--config", os.path.join(CONFIGS, "olmo2-1b.json"), "--set",
                          '{"attention_bias": true}'] + FAMILY),
    # Phi-3: fused qkv_proj / gate_up_proj, a window shorter than the rows, longrope with its
    # attention factor; rows of 32 pass an original context of 16 (long_factor) but not one of 64.
    ("phi3_longrope_long", ["--config", os.path.join(CONFIGS, "phi3-mini-128k.json"), "--sliding_window", "8",
                            "--rope_scaling", PHI3_ROPE, "--set", '{"original_max_position_embeddings": 16}'] + FAMILY),
    ("phi3_longrope_short", ["--config", os.path.join(CONFIGS, "phi3-mini-128k.json"), "--rope_scaling", PHI3_ROPE,
                             "--set", '{"original_max_position_embeddings": 64}'] + FAMILY),
    # Gemma 3: a sliding layer (window 8, local RoPE base) then a global one (rope_theta with linear
    # scaling), the score scale 24^-1/2 (not head_dim's), attention biases, (1 + w) norms, GeGLU.
    ("gemma3_local_global", ["--config", os.path.join(CONFIGS, "gemma3-1b.json"), "--head_dim", "16",
                             "--sliding_window", "8", "--rope_scaling", '{"rope_type": "linear", "factor": 2.0}',
                             "--set", '{"query_pre_attn_scalar": 24, "sliding_window_pattern": 2, '
                             '"attention_bias": true}'] + FAMILY),
    # Gemma 2: layer 0 slides (window 8), layer 1 is global; scores capped at 1 and logits at 0.3 (far
    # below the published 50 / 30, so that the caps bend them at test size), no q/k norms.
    ("gemma2_softcap", ["--config", os.path.join(CONFIGS, "gemma2-2b.json"), "--head_dim", "16", "--sliding_window",
                        "8", "--set", '{"query_pre_attn_scalar": 24, "attention_bias": true, '
                        '"attn_logit_softcapping": 1.0, "final_logit_softcapping": 0.3}'] + FAMILY),
    ("llama_rope_dynamic", ["--config", os.path.join(CONFIGS, "llama-3.2-1b.json"), "--rope_scaling",
                            '{"rope_type": "dynamic", "factor": 2.0}'] + FAMILY),
]
# The mixture-of-experts families (tests/parity/hfmoe.py), the load-balancing loss in the loss
# (output_router_logits, a coefficient large enough to move it): Mixtral's renormalised top-2, Qwen2-MoE's
# shared expert with its sigmoid gate and unnormalised top-k, Qwen3-MoE's q/k norms and norm_topk_prob.
MOE_AUX = '"output_router_logits": true, "router_aux_loss_coef": 0.05'
CASES += [
    ("moe_mixtral_aux", ["--config", os.path.join(CONFIGS, "mixtral-8x7b-v0.1.json"), "--set",
                         '{"num_local_experts": 4, ' + MOE_AUX + '}'] + FAMILY[:-3] + ["--ffn", "48", "--perturb"]),
    ("moe_qwen2_shared_expert", ["--config", os.path.join(CONFIGS, "qwen1.5-moe-a2.7b.json"), "--set",
                                 '{"num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 32, '
                                 '"shared_expert_intermediate_size": 48, ' + MOE_AUX + '}'] + FAMILY),
    ("moe_qwen3_norm_topk", ["--config", os.path.join(CONFIGS, "qwen3-30b-a3b.json"), "--head_dim", "16", "--set",
                             '{"num_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 32, '
                             + MOE_AUX + '}'] + FAMILY),
]
# Mixed precision: ztrain --bf16 against PyTorch's bf16 autocast on the same folder and tokens.
# The two round in different places (autocast keeps every linear output in bf16, ztrain its
# GEMM outputs that backward reads), so the bound is the 1e-2 relative per-step loss;
# grad norms and trained parameters are looser for the same reason.
MIXED = {"gpt2": "gpt2_autocast_bf16", "llama_gqa": "llama_gqa_autocast_bf16",
         "olmo2_post_norms": "olmo2_autocast_bf16", "phi3_longrope_long": "phi3_autocast_bf16",
         "gemma3_local_global": "gemma3_autocast_bf16", "gemma2_softcap": "gemma2_autocast_bf16"}
CASES += [(MIXED[n], args) for n, args in CASES if n in MIXED]
# Head size 64: the bf16 attention kernel (AVX512-BF16 tile products) runs; below it falls back to fp32.
CASES += [("gpt2_hs64_autocast_bf16", ["--arch", "gpt2", "--vocab_size", "300", "--n_embd", "128", "--n_layer", "2",
                                       "--n_head", "2"]),
          ("llama_hs64_autocast_bf16", ["--arch", "llama", "--vocab_size", "300", "--hidden_size", "128", "--n_layer",
                                        "2", "--n_head", "2", "--n_kv_head", "1", "--ffn", "256"])]
B, G, T, STEPS = 4, 2, 32, 5


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def run_case(name, make_args, work, ztrain, env):
    """One case: (failures, the lines it prints)."""
    lines, failures = [], 0
    d = os.path.join(work, name)
    model, tokens = os.path.join(d, "model"), os.path.join(d, "train.bin")
    run([PY, os.path.join(HERE, "make_model.py"), "--out", model, "--seed", "3", "--tokens", tokens,
         "--num_tokens", "6000"] + make_args)
    common = ["--per_device_train_batch_size", str(B), "--gradient_accumulation_steps", str(G),
              "--model_max_length", str(T), "--max_steps", str(STEPS)] + HP
    torch_dir = os.path.join(d, "torch_out")
    bf16 = "autocast_bf16" in name
    ref = json.loads(run([PY, os.path.join(HERE, "torch_train.py"), "--model", model, "--train_file", tokens,
                          "--save_dir", torch_dir] + common + (["--autocast", "bf16"] if bf16 else []),
                         env=env).strip().splitlines()[-1])
    out = os.path.join(d, "ztrain_out")
    run([ztrain, "train", "--model_name_or_path", model, "--train_file", tokens, "--output_dir", out,
         "--overwrite_output_dir", "--no_shuffle", "--lr_scheduler_type", "constant", "--logging_steps", "1",
         "--save_strategy", "no", "--threads", env["OMP_NUM_THREADS"]] + common + (["--bf16"] if bf16 else []),
        env=env)
    hist = [e for e in json.load(open(os.path.join(out, "trainer_state.json")))["log_history"] if "loss" in e]
    worst_loss = max(rel(h["loss"], r) for h, r in zip(hist, ref["losses"]))
    worst_norm = max(rel(h["grad_norm"], r) for h, r in zip(hist, ref["grad_norms"]))
    loss_tol, norm_tol = (1e-2, 5e-2) if bf16 else (1e-4, 1e-4)
    ok = len(hist) == STEPS and worst_loss <= loss_tol and worst_norm <= norm_tol
    lines.append(f"{name:<22} losses ztrain {[round(h['loss'], 6) for h in hist]}")
    lines.append(f"{'':<22} losses torch  {[round(x, 6) for x in ref['losses']]}")
    lines.append(f"{'':<22} worst relative difference: loss {worst_loss:.2e}, grad_norm {worst_norm:.2e} "
                 f"-> {'ok' if ok else 'FAIL'}")
    failures += not ok
    # ztrain's saved folder read by the reference loader equals PyTorch's own result.
    cmp = run([PY, "-c", f"""
import sys; sys.path.insert(0, {HERE!r})
import hfmodels, torch
zm, _ = hfmodels.load_model({out!r}); tm, _ = hfmodels.load_model({torch_dir!r})
zs, ts = zm.state_dict(), tm.state_dict()
assert zs.keys() == ts.keys(), (sorted(zs.keys() ^ ts.keys()))
print(max(float((zs[k] - ts[k]).abs().max()) for k in zs))
"""], env=env)
    diff = float(cmp.strip().splitlines()[-1])
    # Adam turns tiny gradient differences on near-zero gradients into up to ~lr-sized
    # moves, so allow 10% of the 5 steps' largest possible travel (5 x lr = 5e-3); a
    # wrong name, layout or transpose would differ by the weights' own size (~2e-2).
    # bf16: the rounding differences flip the signs of Adam's steps on tiny gradients, so any
    # parameter may move up to 2 x 5 lr apart (1e-2); a layout bug still shows as ~1e-1.
    ok2 = diff < (1e-2 if bf16 else 5e-4)
    lines.append(f"{'':<22} saved model vs PyTorch's trained parameters: max |diff| {diff:.2e} -> "
                 f"{'ok' if ok2 else 'FAIL'}")
    failures += not ok2
    return failures, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--work", default="")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once, one thread each (2)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="zt_parity_")
    # Cases run two at a time with one thread each: most of a case is starting Python and importing
    # torch (single-threaded), so this halves the test's time on two cores. One thread or two
    # changes only the order of sums, far inside the tolerances.
    threads = "1" if a.jobs > 1 else "2"
    env = {**os.environ, "OMP_NUM_THREADS": threads}
    cases = [c for c in CASES if a.only in c[0]]
    failures = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [pool.submit(run_case, name, args, work, a.ztrain, env) for name, args in cases]
        for f in futures:  # in case order, each case's lines together
            n, lines = f.result()
            failures += n
            print("\n".join(lines), flush=True)
    print(f"{len(cases) * 2 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
