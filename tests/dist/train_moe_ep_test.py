#!/usr/bin/env python3
"""train_moe_ep_test.py: expert parallelism (--expert-model-parallel-size) equals one process (tier 3).

A tiny Mixtral (4 experts, top 2, the load-balancing loss on) and a tiny Qwen2-MoE (4 experts, top 2,
the gated shared expert), random init and tokens, --no_shuffle, fp32, 20 steps (6 in the sanitizer
pass). The reference is one process with batch 2 x accumulation 4; the runs have 4 ranks (data
parallelism filling them) with EP 1, 2 and 4, EP 2 with ZeRO-1 and ZeRO-3, and EP 2 with bf16 and full
recomputation (against one process with bf16 and full recomputation). Checks:
  - every per-step loss within 1e-5 relative of the reference (dropless routing);
  - the experts are sharded: a rank of EP P holds the dense parameters and E / P of the experts (its
    parameter bytes in train_results.json), and the exported folder equals the reference's;
  - checkpoints reshard: EP 2's checkpoint at step 10 resumes under EP 4 and in one process, TP 2 x EP 2's
    under EP 2, steps 11-20 within 1e-5 of the reference;
  - the all-to-all row bytes per step (train_results.json's expert_parallel report) equal the routed
    tokens x hidden size x 4 bytes x 2 (dispatch + combine) x 2 (forward + backward; 3 with full
    recomputation, which reruns the forward) within 2%;
  - tensor parallelism (TP 2 x DP 2, with and without sequence parallelism): each TP rank computes
    half the experts for every token; losses within 1e-5, the exported folder equal;
  - TP 2 x EP 2 (the expert group of each TP rank splits its half of the experts: one expert per
    rank), with sequence parallelism and ZeRO-1 too: losses within 1e-5, a rank's experts, the export
    and the all-to-all bytes (the TP ranks' summed) as above;
  - pipeline parallelism (PP 2 x DP 2, and PP 2 with EP 2 and ZeRO-1; a 4-layer Mixtral on an
    interleaved PP 2 with 2 chunks per stage): losses within 1e-5, the router statistics of every
    layer and the aux loss as one process's;
  - context parallelism (CP 2 x DP 2, and CP 2 with EP 2: the expert group is the CP pair): the
    auxiliary losses sum the routing over the group; losses within 1e-5;
  - evaluation under EP 2, PP 2 x EP 2, TP 2 and CP 2 gives one process's eval_loss;
  - every axis at once: a Mixtral on 8 ranks, TP 2 x PP 2 x EP 2 (DP 2), losses within 1e-5;
  - under ZT_TEST_SUBSET=sanitizers: 6 steps, Mixtral's layouts of the subset below (EP 2, TP 2 x EP 2
    + SP + ZeRO-1, PP 2 x EP 2 + ZeRO-1, CP 2 x EP 2: every exchange path), Qwen2-MoE's EP 2 and TP 2 x
    EP 2 (+SP, ZeRO-1) only, the reshards for Mixtral, not the 8-rank run;
  - bad input: EP not dividing the experts, EP on a dense model, TP x EP not dividing them, EP with
    hybrid sharding: one error line each.
usage: train_moe_ep_test.py ZTRAIN MPIRUN
"""
import json
import os
import random
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import (SANITIZER_SUBSET, bad_input_args, check, check_errors, failures, mpi,  # noqa: E402
                      read_safetensors, rel, sanitizer_cases, step_history, steps_and_save, train)

ZT, MPIRUN = sys.argv[1], sys.argv[2]
B, T, ACC = 2, 32, 4
BASE = {"vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "output_router_logits": True, "router_aux_loss_coef": 0.05}
MODELS = {
    "mixtral": dict(BASE, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(BASE, model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                      shared_expert_intermediate_size=64, norm_topk_prob=False),
}
# (name, EP, layout flags, precision flags: the reference one process runs with them too)
BF16_FULL = ["--bf16", "--gradient_checkpointing"]
# Losses: fp32 within 1e-5 (the issue's bound); under bf16 the ranks' gradient sums differ from one
# process's in the last fp32 bits, which can move a weight's bf16 copy by one rounding step, so bf16
# runs are held to 1e-4 (measured 1.1e-5 and 1.3e-5 over 20 steps).
FP32_TOL, BF16_TOL = 1e-5, 1e-4
CASES = sanitizer_cases([("ep1", 1, [], []), ("ep2", 2, [], []), ("ep4", 4, [], []),
                         ("ep2_zero1", 2, ["--zero_stage", "1"], []), ("ep2_zero3", 2, ["--zero_stage", "3"], []),
                         ("ep2_bf16_full", 2, [], BF16_FULL), ("tp2", 1, ["--tensor-model-parallel-size", "2"], []),
                         ("tp2_sp", 1, ["--tensor-model-parallel-size", "2", "--sequence-parallel"], []),
                         ("tp2_ep2", 2, ["--tensor-model-parallel-size", "2"], []),
                         ("tp2_sp_ep2_zero1", 2,
                          ["--tensor-model-parallel-size", "2", "--sequence-parallel", "--zero_stage", "1"], []),
                         ("pp2", 1, ["--pipeline-model-parallel-size", "2"], []),
                         ("pp2_ep2_zero1", 2, ["--pipeline-model-parallel-size", "2", "--zero_stage", "1"], []),
                         ("cp2", 1, ["--context-parallel-size", "2"], []),
                         ("cp2_ep2", 2, ["--context-parallel-size", "2"], [])],
                        {"ep2", "tp2_sp_ep2_zero1", "pp2_ep2_zero1", "cp2_ep2"})
STEPS, SAVE = steps_and_save()


def expert_params(cfg):
    """Every routed expert's parameters (gate, up, down) over the layers."""
    E = cfg.get("num_local_experts", cfg.get("num_experts"))
    F = cfg.get("moe_intermediate_size", cfg["intermediate_size"])
    return cfg["num_hidden_layers"] * E * 3 * F * cfg["hidden_size"]


def check_sharding(name, cfg, case, ep, res, ref_res, out, ref_out, tol):
    """A rank holds the dense parameters and 1 / ep of the experts; the export equals one process's."""
    if tol == FP32_TOL:  # fp32 (bf16's compute copy counts with the parameters)
        whole = ref_res["data_parallel"]["model_state_bytes"]["parameters"] // 4
        held = res["data_parallel"]["model_state_bytes"]["parameters"] // 4
        if case.endswith("zero3"):  # the engine's bytes are a shard
            held = res["data_parallel"]["expert_parallel"]["params_per_rank"]
        experts = expert_params(cfg)
        check(held == whole - experts + experts // ep,
              f"{name} {case}: a rank holds {held} parameters = {whole} - {experts} experts + {experts // ep} of them")
    check_export(name, case, out, ref_out, tol)


def check_export(name, case, out, ref_out, tol):
    """The run's exported folder holds the reference's tensors and values."""
    got, want = read_safetensors(out), read_safetensors(ref_out)
    worst = max(max(abs(a - b) for a, b in zip(got[k], want[k])) for k in want)
    check(sorted(got) == sorted(want) and worst <= 100 * tol,
          f"{name} {case}: exported folder has the reference's {len(want)} tensors, largest difference {worst:.1e} "
          f"(bound {100 * tol:g})")


def data_ranks(layout, np=4):
    """The data-parallel ranks of np under the layout flags (tensor and pipeline parallelism take theirs)."""
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"):
        if flag in layout:
            np //= int(layout[layout.index(flag) + 1])
    return np


def run_case(name, cfg, model, work, case, reference):
    """One layout on 4 ranks against one process with the same precision flags: losses, sharding, bytes."""
    label, ep, layout, prec = case
    ref_out, ref, _, ref_res = reference
    out = os.path.join(work, f"{name}_{label}")
    p = train(ZT, MPIRUN, 4, model, os.path.join(work, "train.bin"), out, STEPS, B, T, ACC // data_ranks(layout),
              ["--expert-model-parallel-size", str(ep)] + layout + prec)
    if p.returncode != 0:
        check(False, f"{name} {label}: exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
        return
    hist, _, res = step_history(out)
    worst = max(rel(h["loss"], r["loss"]) for h, r in zip(hist, ref))
    tol = BF16_TOL if prec else FP32_TOL
    check(len(hist) == STEPS and worst <= tol,
          f"{name} 4 ranks EP {ep} {' '.join(layout + prec)}: {len(hist)} steps, worst loss difference {worst:.2e} "
          f"(bound {tol:g})")
    pp = int(layout[layout.index("--pipeline-model-parallel-size") + 1]) if "--pipeline-model-parallel-size" in layout else 1
    tp = int(layout[layout.index("--tensor-model-parallel-size") + 1]) if "--tensor-model-parallel-size" in layout else 1
    rep = res.get("data_parallel", {}).get("expert_parallel", {})
    if ep > 1 and tp > 1:  # a rank's experts: E / (tp ep) of them
        held, experts = rep.get("expert_params_per_rank"), expert_params(cfg)
        check(held == experts // (tp * ep), f"{name} {label}: a rank holds {held} expert parameters = "
              f"{experts} / (tp {tp} x ep {ep})")
    if ep == 1 or pp > 1 or tp > 1:  # TP: a rank's experts, the shared expert cut; PP: a stage's layers; CP
        if layout:
            check_export(name, label, out, ref_out, tol)
        if ep == 1:
            return
    else:
        check_sharding(name, cfg, label, ep, res, ref_res, out, ref_out, tol)
    got, want = rep.get("all_to_all_bytes_per_step", 0), rep.get("formula_bytes_per_step", 1)
    passes = 3 if prec == BF16_FULL else 2  # a fully recomputed layer reruns its forward's exchanges
    layers = cfg["num_hidden_layers"] // pp  # a stage's expert group moves its layers' rows
    cp = int(layout[layout.index("--context-parallel-size") + 1]) if "--context-parallel-size" in layout else 1
    exact = B * T // cp * ACC // data_ranks(layout) * 2 * layers * cfg["hidden_size"] * 4 * 2 * passes
    check(abs(got - want) <= 0.02 * want and want == exact,
          f"{name} {label}: all-to-all bytes per step {got:.0f}, routed tokens x K x C x 4 x 2 x {passes} passes "
          f"x layers = {want:.0f}")


def check_interleaved(work):
    """A 4-layer Mixtral on an interleaved pipeline (2 stages x 2 chunks of one layer, 2 ranks): the
    routing totals and the auxiliary losses' gradients travel with every chunk's messages."""
    path = os.path.join(work, "mixtral4.json")
    json.dump(dict(MODELS["mixtral"], num_hidden_layers=4), open(path, "w"))
    model, data = ["--model_config_path", path], os.path.join(work, "train.bin")
    ref_out, out = os.path.join(work, "mixtral4_ref"), os.path.join(work, "mixtral4_pp2_interleaved")
    p = train(ZT, MPIRUN, 1, model, data, ref_out, STEPS, B, T, ACC, [])
    q = train(ZT, MPIRUN, 2, model, data, out, STEPS, B, T, ACC,
              ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"])
    if p.returncode != 0 or q.returncode != 0:
        check(False, f"mixtral 4 layers, interleaved pipeline: exit {p.returncode} / {q.returncode}\n"
              f"{(p.stderr + q.stderr)[-1500:]}")
        return
    ref, got = step_history(ref_out)[0], step_history(out)[0]
    worst = max(rel(h["loss"], r["loss"]) for h, r in zip(got, ref))
    check(len(got) == STEPS and worst <= FP32_TOL,
          f"mixtral 4 layers, PP 2 interleaved (2 chunks per stage): worst loss difference {worst:.2e} (bound 1e-5)")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in line]
    ref_rows = [json.loads(line) for line in open(os.path.join(ref_out, "metrics.jsonl")) if '"loss"' in line]
    check(rows[-1]["moe_tokens_per_expert"] == ref_rows[-1]["moe_tokens_per_expert"]
          and rel(rows[-1]["aux_loss"], ref_rows[-1]["aux_loss"]) <= 1e-5,
          f"mixtral 4 layers, PP 2 interleaved: every layer's tokens per expert and the aux loss as one process's "
          f"({rows[-1]['aux_loss']:.6f})")


def check_eight_ranks(work, ref_out):
    """Every axis at once: a Mixtral on 8 ranks, TP 2 x PP 2 x EP 2 (DP 2), against one process."""
    model = ["--model_config_path", os.path.join(work, "mixtral.json")]
    out = os.path.join(work, "mixtral_tp2_pp2_ep2")
    p = train(ZT, MPIRUN, 8, model, os.path.join(work, "train.bin"), out, STEPS, B, T, ACC // 2,
              ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
               "--expert-model-parallel-size", "2"])
    if p.returncode != 0:
        check(False, f"mixtral TP 2 x PP 2 x EP 2 on 8 ranks: exit {p.returncode}\n{p.stderr[-1500:]}")
        return
    got, ref = step_history(out)[0], step_history(ref_out)[0]
    worst = max(rel(h["loss"], r["loss"]) for h, r in zip(got, ref))
    check(len(got) == STEPS and worst <= FP32_TOL,
          f"mixtral 8 ranks TP 2 x PP 2 x EP 2: {len(got)} steps, worst loss difference {worst:.2e} (bound 1e-5)")


def check_eval(work):
    """Evaluation (a collective forward under EP, TP and CP; the first stage's ranks under a pipeline)
    gives one process's eval_loss."""
    model, data = ["--model_config_path", os.path.join(work, "mixtral.json")], os.path.join(work, "train.bin")
    evals = ["--validation_file", data, "--per_device_eval_batch_size", "2"]

    def eval_loss(out, np, flags):
        p = train(ZT, MPIRUN, np, model, data, out, 4, B, T, ACC // data_ranks(flags, np), flags + evals)
        check(p.returncode == 0, f"mixtral evaluation {' '.join(flags)}: exit {p.returncode}" +
              ("" if p.returncode == 0 else "\n" + p.stderr[-1500:]))
        state = json.load(open(os.path.join(out, "trainer_state.json"))) if p.returncode == 0 else {}
        return [h["eval_loss"] for h in state.get("log_history", []) if "eval_loss" in h]

    ref = eval_loss(os.path.join(work, "eval_ref"), 1, [])
    for label, flags in (("EP 2", ["--expert-model-parallel-size", "2"]),
                         ("PP 2 x EP 2", ["--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "2"]),
                         ("TP 2", ["--tensor-model-parallel-size", "2"]), ("CP 2", ["--context-parallel-size", "2"])):
        got = eval_loss(os.path.join(work, "eval_" + label.replace(" ", "")), 4, flags)
        check(bool(ref) and len(got) == len(ref) and rel(got[-1], ref[-1]) <= FP32_TOL,
              f"mixtral {label}: eval_loss {got[-1:]} vs one process's {ref[-1:]} (bound 1e-5)")


RESHARDS = [("EP 2", ["--expert-model-parallel-size", "2"],
             [("EP 4 on 4 ranks", 4, ["--expert-model-parallel-size", "4"]), ("one process", 1, [])]),
            ("TP 2 x EP 2", ["--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "2"],
             [("EP 2 on 4 ranks", 4, ["--expert-model-parallel-size", "2"])])]


def check_reshard(name, model, work, ref):
    """A checkpoint at step SAVE of one layout resumes under others: EP 2's under EP 4 (4 ranks) and in
    one process, TP 2 x EP 2's under EP 2."""
    for saved_label, saved_flags, targets in RESHARDS:
        saved = os.path.join(work, f"{name}_save_{saved_label.replace(' ', '')}")
        p = train(ZT, MPIRUN, 4, model, os.path.join(work, "train.bin"), saved, STEPS, B, T,
                  ACC // data_ranks(saved_flags), saved_flags + ["--save_strategy", "steps", "--save_steps", str(SAVE)])
        if p.returncode != 0:
            check(False, f"{name} {saved_label} save: exit {p.returncode}\n{p.stderr[-1500:]}")
            continue
        for label, np, flags in targets:
            out = saved + "_resume_" + label.replace(" ", "")
            os.makedirs(out)
            shutil.copytree(os.path.join(saved, f"checkpoint-{SAVE}"), os.path.join(out, f"checkpoint-{SAVE}"))
            p = train(ZT, MPIRUN, np, model, os.path.join(work, "train.bin"), out, STEPS, B, T, ACC // np,
                      flags + ["--resume_from_checkpoint", "latest"])
            if p.returncode != 0:
                check(False, f"{name} resume ({label}): exit {p.returncode}\n{p.stderr[-1500:]}")
                continue
            hist, _, _ = step_history(out)
            got = [h["loss"] for h in hist if h["step"] > SAVE]
            worst = max(rel(a, r["loss"]) for a, r in zip(got, ref[SAVE:]))
            check(len(got) == STEPS - SAVE and worst <= 1e-5,
                  f"{name}: {saved_label}'s checkpoint-{SAVE} resumed by {label}, steps {SAVE + 1}-{STEPS} worst "
                  f"loss difference {worst:.2e} (bound 1e-5)")


def main():
    work = tempfile.mkdtemp(prefix="zt_moe_ep_")
    random.seed(5)
    with open(os.path.join(work, "train.bin"), "wb") as f:
        f.write(bytes(b for _ in range(40000) for b in random.randrange(512).to_bytes(2, "little")))
    for name, cfg in MODELS.items():
        path = os.path.join(work, name + ".json")
        json.dump(cfg, open(path, "w"))
        model = ["--model_config_path", path]
        refs = {}
        for prec in sorted({tuple(c[3]) for c in CASES}):
            ref_out = os.path.join(work, f"{name}_ref{'_'.join(prec)}")
            p = train(ZT, MPIRUN, 1, model, os.path.join(work, "train.bin"), ref_out, STEPS, B, T, ACC, list(prec))
            check(p.returncode == 0, f"{name} reference {' '.join(prec)}: exit {p.returncode}" +
                  ("" if p.returncode == 0 else "\n" + p.stderr[-2000:]))
            if p.returncode == 0:
                refs[prec] = (ref_out,) + step_history(ref_out)
        # The sanitizer pass runs Qwen2-MoE's shared expert under two layouts only (Mixtral runs them all).
        cases = CASES if name == "mixtral" else sanitizer_cases(CASES, {"ep2", "tp2_sp_ep2_zero1"})
        for case in cases:
            if tuple(case[3]) in refs:
                run_case(name, cfg, model, work, case, refs[tuple(case[3])])
        if () not in refs or (name != "mixtral" and len(cases) < len(CASES)):
            continue
        ref = refs[()][1]
        check_reshard(name, model, work, ref)
        if name == "mixtral" and not SANITIZER_SUBSET:  # the plain pass (8 instrumented ranks are heavy)
            check_eight_ranks(work, refs[()][0])
    check_interleaved(work)
    check_eval(work)
    dense = {k: v for k, v in BASE.items() if k not in ("output_router_logits", "router_aux_loss_coef")}
    json.dump(dict(dense, model_type="llama"), open(os.path.join(work, "dense.json"), "w"))
    json.dump(dict(MODELS["mixtral"], num_local_experts=6), open(os.path.join(work, "mixtral6.json"), "w"))
    check_errors([
        ("EP not dividing the experts", mpi(MPIRUN, 3) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "mixtral.json"), "--expert-model-parallel-size", "3"],
         "does not divide the model's 4 experts"),
        ("EP on a dense model", mpi(MPIRUN, 2) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "dense.json"), "--expert-model-parallel-size", "2"],
         "applies to mixture-of-experts models"),
        ("TP x EP not dividing the experts", mpi(MPIRUN, 4) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "mixtral6.json"), "--tensor-model-parallel-size", "2",
            "--expert-model-parallel-size", "2"],
         "--expert-model-parallel-size 2 x --tensor-model-parallel-size 2 does not divide the model's 6 experts"),
        ("EP with hybrid sharding", mpi(MPIRUN, 4) + bad_input_args(ZT, work, B) + [
            "--model_config_path", os.path.join(work, "mixtral.json"), "--expert-model-parallel-size", "2",
            "--zero_stage", "1", "--zero_hpz_partition_size", "2"],
         "does not compose with offload to disk, --local_sgd_steps or --zero_hpz_partition_size"),
    ])
    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
