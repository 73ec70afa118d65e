#!/usr/bin/env python3
"""train_moe_ep_test.py: expert parallelism (--expert-model-parallel-size) equals one process (tier 3).

A tiny Mixtral (4 experts, top 2, the load-balancing loss on) and a tiny Qwen2-MoE (4 experts, top 2,
the gated shared expert), random init and tokens, --no_shuffle, fp32, 20 steps (6 in the sanitizer
pass). The reference is one process with batch 2 x accumulation 4; the runs have 4 ranks (data
parallelism filling them) with EP 1, 2 and 4, and EP 2 with ZeRO-3. Checks:
  - every per-step loss within 1e-5 relative of the reference (dropless routing);
  - the all-to-all row bytes per step (train_results.json's expert_parallel report) equal the routed
    tokens x hidden size x 4 bytes x 2 (dispatch + combine) x 2 (forward + backward) within 2%;
  - bad input: EP not dividing the experts, EP on a dense model: one error line each.
usage: train_moe_ep_test.py ZTRAIN MPIRUN
"""
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import (bad_input_args, check, check_errors, failures, mpi, rel, sanitizer_cases,  # noqa: E402
                      step_history, steps_and_save, train)

ZT, MPIRUN = sys.argv[1], sys.argv[2]
STEPS, _ = steps_and_save()
B, T, ACC = 2, 32, 4
BASE = {"vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "output_router_logits": True, "router_aux_loss_coef": 0.05}
MODELS = {
    "mixtral": dict(BASE, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(BASE, model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                      shared_expert_intermediate_size=64, norm_topk_prob=False),
}
CASES = sanitizer_cases([("ep1", 1, []), ("ep2", 2, []), ("ep4", 4, []), ("ep2_zero3", 2, ["--zero_stage", "3"])],
                        {"ep2", "ep4"})


def main():
    work = tempfile.mkdtemp(prefix="zt_moe_ep_")
    random.seed(5)
    with open(os.path.join(work, "train.bin"), "wb") as f:
        f.write(bytes(b for _ in range(40000) for b in random.randrange(512).to_bytes(2, "little")))
    for name, cfg in MODELS.items():
        path = os.path.join(work, name + ".json")
        json.dump(cfg, open(path, "w"))
        model = ["--model_config_path", path]
        ref_out = os.path.join(work, name + "_ref")
        p = train(ZT, MPIRUN, 1, model, os.path.join(work, "train.bin"), ref_out, STEPS, B, T, ACC, [])
        if p.returncode != 0:
            check(False, f"{name} reference: exit {p.returncode}\n{p.stderr[-2000:]}")
            continue
        ref, _, _ = step_history(ref_out)
        for case, ep, extra in CASES:
            out = os.path.join(work, f"{name}_{case}")
            p = train(ZT, MPIRUN, 4, model, os.path.join(work, "train.bin"), out, STEPS, B, T, ACC // 4,
                      ["--expert-model-parallel-size", str(ep)] + extra)
            if p.returncode != 0:
                check(False, f"{name} {case}: exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
                continue
            hist, _, res = step_history(out)
            worst = max(rel(h["loss"], r["loss"]) for h, r in zip(hist, ref))
            check(len(hist) == STEPS and worst <= 1e-5,
                  f"{name} 4 ranks EP {ep} {' '.join(extra)}: {len(hist)} steps, worst loss difference {worst:.2e} "
                  "(bound 1e-5)")
            if ep > 1:
                rep = res.get("data_parallel", {}).get("expert_parallel", {})
                got, want = rep.get("all_to_all_bytes_per_step", 0), rep.get("formula_bytes_per_step", 1)
                check(abs(got - want) <= 0.02 * want,
                      f"{name} EP {ep}: all-to-all bytes per step {got:.0f}, routed tokens x C x 4 x 2 x 2 = "
                      f"{want:.0f}")
    dense = {k: v for k, v in BASE.items() if k not in ("output_router_logits", "router_aux_loss_coef")}
    json.dump(dict(dense, model_type="llama"), open(os.path.join(work, "dense.json"), "w"))
    check_errors([
        ("EP not dividing the experts", mpi(MPIRUN, 3) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "mixtral.json"), "--expert-model-parallel-size", "3"],
         "does not divide the model's 4 experts"),
        ("EP on a dense model", mpi(MPIRUN, 2) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "dense.json"), "--expert-model-parallel-size", "2"],
         "applies to mixture-of-experts models"),
    ])
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
