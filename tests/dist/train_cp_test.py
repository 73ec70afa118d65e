#!/usr/bin/env python3
"""train_cp_test.py: context-parallel `ztrain train` (ring attention) under mpirun equals one process.

Tiny GPT-2 (learned position embeddings, tied head) and tiny Llama (RoPE, GQA 4/2 heads, untied
head) from tests/fixtures/configs, random init, random tokens, --no_shuffle, fp32, 20 steps (6 in the
sanitizer pass, disttest.py), T = 32.
The reference is one process at batch 2 x accumulation 4; every run reaches the same tokens per
step. Checks:
  - per-step losses within 1e-5 relative of the reference for CP 2 (2 ranks), CP 2 x DP 2 with
    ZeRO-1 and with ZeRO-3 (4 ranks), CP 2 x TP 2 (GPT-2; Llama with SP), CP 2 x PP 2 (GPT-2 ZeRO-3
    sharded over the two cp ranks of each stage; Llama ZeRO-1), CP 2 x PP 2 interleaved on 4-layer
    models (GPT-2 ZeRO-1, Llama ZeRO-3) and (Llama) CP 4 (4 ranks: a ring of more than one step);
  - the gradient norm within 1e-4 relative, and the exported model equal to the reference's;
  - the cp group's bytes sent per step (train_results.json, the communicator's counters) equal
    the K / V-ring formula of docs/parallelism-cp.md within 2%;
  - checkpoints: CP 2 x DP 2 (ZeRO-1) and (Llama) CP 2 x TP 2 + SP at step 10 resume under one
    process, and one process's resumes under CP 2 x DP 2 (ZeRO-3), to the reference's losses;
  - evaluation (--validation_file) under CP 2 x DP 2: the eval losses equal one process's;
  - bad input: one clear error line naming the numbers.
usage: train_cp_test.py ZTRAIN MPIRUN FIXTURES_DIR
"""
import json
import os
import random
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import bad_input_args, check, check_errors, failures, mpi as mpi_prefix, read_safetensors, rel, sanitizer_cases, steps_and_save, step_history, train  # noqa: E402

ZT, MPIRUN, FIX = sys.argv[1], sys.argv[2], sys.argv[3]
MODELS = {"gpt2": "tiny-gpt2-tp.json", "llama": "tiny-llama-gqa-tp.json"}
# 4-layer variants: interleaved pipelines need 2 chunks of a layer on each of 2 stages.
CONFIGS = {**MODELS, "gpt2_4l": "tiny-gpt2-tppp.json", "llama_4l": "tiny-llama-gqa-tppp.json"}
B, T, ACC, V = 2, 32, 4, 509
STEPS, SAVE = steps_and_save()  # 20 steps, checkpoint at 10 (6 and 3 in the sanitizer pass: disttest.py)


def run(work, name, model, np, acc, extra, out=None):
    out = out or os.path.join(work, name)
    p = train(ZT, MPIRUN, np, ["--model_config_path", os.path.join(FIX, CONFIGS[model])],
              os.path.join(work, "train.bin"), out, STEPS, B, T, acc, extra,
              common=["--max_grad_norm", "1.0", "--save_dtype", "float32"])
    if p.returncode != 0:
        failures.append(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        print(f"FAIL {name}: exit {p.returncode}")
        return None
    hist, state, res = step_history(out)
    return {"losses": [h["loss"] for h in hist], "norms": [h["grad_norm"] for h in hist], "results": res,
            "weights": read_safetensors(out), "eval": [h["eval_loss"] for h in state["log_history"] if "eval_loss" in h]}


def ring_bytes(model, P, acc, tp=1):
    """Bytes one rank sends over the cp group per optimizer step (docs/parallelism-cp.md): per layer
    and micro-batch, 3 (P - 1) blocks of B (T / P) rows of K and V (2 KVH HS fp32 values; under
    tensor parallelism the rank's own KVH / TP heads)."""
    cfg = json.load(open(os.path.join(FIX, CONFIGS[model])))
    L = cfg.get("n_layer", cfg.get("num_hidden_layers"))
    C = cfg.get("n_embd", cfg.get("hidden_size"))
    NH = cfg.get("n_head", cfg.get("num_attention_heads"))
    KVH = cfg.get("num_key_value_heads", NH)
    HS = C // NH
    return acc * L * 3 * (P - 1) * B * (T // P) * 2 * max(1, KVH // tp) * HS * 4


def resume(work, m, ref):
    """CP changes no tensor layout: a CP 2 x DP 2 (ZeRO-1) checkpoint at step SAVE (10) resumes under one
    process, and one process's under CP 2 x DP 2 (ZeRO-3); the steps after it give the reference's losses."""
    cp = ["--context-parallel-size", "2"]
    plans = [("cp2_dp2", 4, ACC // 2, cp + ["--zero_stage", "1"], "one process", 1, ACC, []),
             ("one", 1, ACC, [], "CP 2 x DP 2 ZeRO-3", 4, ACC // 2, cp + ["--zero_stage", "3"])]
    if m == "llama":  # tensor-parallel slices stored in the global layout, as without CP
        plans.append(("cp2_tp2_sp", 4, ACC, cp + ["--tensor-model-parallel-size", "2", "--sequence-parallel"],
                      "one process", 1, ACC, []))
    # Sanitizer pass: GPT-2 saves at CP 2 x DP 2, Llama on one process and at CP 2 x TP 2 + SP (disttest.py).
    plans = sanitizer_cases(plans, {"gpt2": {"cp2_dp2"}, "llama": {"one", "cp2_tp2_sp"}}[m])
    for saved, np, acc, extra, name, np2, acc2, extra2 in plans:
        out = os.path.join(work, f"{m}_save_{saved}")
        if run(work, f"{m}_save_{saved}", m, np, acc, extra + ["--save_strategy", "steps", "--save_steps", str(SAVE)],
               out=out) is None:
            continue
        ck = os.path.join(out, f"checkpoint-{SAVE}")
        r = run(work, f"{m} resume {saved} -> {name}", m, np2, acc2, extra2 + ["--resume_from_checkpoint", ck], out=out)
        if r is None:
            continue
        worst = max(rel(a, b) for a, b in zip(r["losses"][SAVE:], ref["losses"][SAVE:]))
        check(len(r["losses"]) == STEPS and worst < 1e-5, f"{m} checkpoint of {saved} at step {SAVE} resumed at {name}: "
                                                          f"worst relative difference {worst:.2e} (< 1e-5)")


def evaluation(work):
    """--validation_file under CP 2 x DP 2 (ZeRO-1): every rank evaluates its chunks of each window and
    the loss sums are added over the cp group, so the eval losses (steps 5 and 10; 2 and 4 in the sanitizer
    pass) are one process's."""
    ev = ["--validation_file", os.path.join(work, "val.bin"), "--eval_strategy", "steps", "--eval_steps",
          str(SAVE // 2), "--max_steps", str(SAVE)]
    ref = run(work, "llama_eval_ref", "llama", 1, ACC, ev)
    r = run(work, "llama_eval_cp2_dp2", "llama", 4, ACC // 2, ev + ["--context-parallel-size", "2", "--zero_stage", "1"])
    if ref and r:
        worst = max((rel(a, b) for a, b in zip(r["eval"], ref["eval"])), default=1.0)
        check(len(r["eval"]) == len(ref["eval"]) >= 2 and worst < 1e-5,
              f"llama eval under CP 2 x DP 2: {len(r['eval'])} eval losses, worst relative difference {worst:.2e} (< 1e-5)")


def bad_input(work):
    """Bad combinations: one clear error line (per rank under mpirun) naming the numbers."""
    base = bad_input_args(ZT, work, B) + ["--model_config_path", os.path.join(FIX, MODELS["llama"])]
    mpi = lambda n: mpi_prefix(MPIRUN, n)
    cases = [
        ("sequence not divisible by 2 CP", mpi(2) + base + ["--context-parallel-size", "2", "--model_max_length", "30"],
         "--context-parallel-size 2 splits each sequence of 30 tokens into 2 x 2 = 4 equal chunks"),
        ("world not a multiple of CP", mpi(3) + base + ["--context-parallel-size", "2", "--model_max_length", "32"],
         "--context-parallel-size 2 does not divide the 3 ranks"),
        ("CP x PP with evaluation", mpi(4) + base + ["--context-parallel-size", "2", "--pipeline-model-parallel-size",
                                                     "2", "--validation_file", os.path.join(work, "train.bin"),
                                                     "--model_max_length", "32"],
         "with pipeline stages: evaluation (--validation_file) does not run there yet"),
        ("CP with packing", mpi(2) + base + ["--context-parallel-size", "2", "--packing", "--eos_token_id", "0",
                                             "--model_max_length", "32"],
         "does not support --packing yet"),
    ]
    check_errors(cases)


def interleaved(work):
    """CP 2 x PP 2 with the interleaved schedule (2 chunks of one layer per stage), 4-layer models:
    GPT-2 with ZeRO-1, Llama with ZeRO-3 (sharded over each stage's two cp ranks)."""
    pp = ["--context-parallel-size", "2", "--pipeline-model-parallel-size", "2",
          "--num-layers-per-virtual-pipeline-stage", "1"]
    for m, zero in (("gpt2_4l", "1"), ("llama_4l", "3")):
        ref = run(work, f"{m}_ref", m, 1, ACC, [])
        r = run(work, f"{m}_cp2_pp2_interleaved_zero{zero}", m, 4, ACC, pp + ["--zero_stage", zero])
        if r is None or ref is None:
            continue
        worst = max(rel(a, b) for a, b in zip(r["losses"], ref["losses"]))
        wn = max(rel(a, b) for a, b in zip(r["norms"], ref["norms"]))
        check(len(r["losses"]) == STEPS and worst < 1e-5 and wn < 1e-4,
              f"{m} CP 2 x PP 2 interleaved, ZeRO-{zero}: worst relative loss difference {worst:.2e} (< 1e-5), "
              f"gradient norm {wn:.2e} (< 1e-4)")
        got = r["results"].get("data_parallel", {}).get("context_parallel", {}).get("sent_bytes_per_step", 0)
        want = ring_bytes(m, 2, ACC) // 2  # the chief's stage holds 2 of the 4 layers
        check(rel(got, want) < 0.02, f"{m} CP 2 x PP 2 interleaved: cp bytes sent per step {got:.0f}, formula {want:.0f}")


def main():
    with tempfile.TemporaryDirectory() as work:
        rng = random.Random(1)
        with open(os.path.join(work, "train.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 60000, *[rng.randrange(V) for _ in range(60000)]))
        with open(os.path.join(work, "val.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 1000, *[rng.randrange(V) for _ in range(1000)]))
        for m in MODELS:
            ref = run(work, f"{m}_ref", m, 1, ACC, [])
            if ref is None:
                continue
            cp2 = ["--context-parallel-size", "2"]
            tp2 = ["--tensor-model-parallel-size", "2"]
            cases = [("cp2", 2, ACC, cp2, 2),
                     ("cp2_dp2_zero1", 4, ACC // 2, cp2 + ["--zero_stage", "1"], 2),
                     ("cp2_dp2_zero3", 4, ACC // 2, cp2 + ["--zero_stage", "3"], 2),
                     ("cp2_tp2" if m == "gpt2" else "cp2_tp2_sp", 4, ACC,
                      cp2 + tp2 + ([] if m == "gpt2" else ["--sequence-parallel"]), 2),
                     ("cp2_pp2_zero3" if m == "gpt2" else "cp2_pp2_zero1", 4, ACC,
                      cp2 + ["--pipeline-model-parallel-size", "2", "--zero_stage", "3" if m == "gpt2" else "1"], 2)]
            if m == "llama":  # a ring of 3 steps: K / V blocks and dK / dV pass through a middle rank
                cases.append(("cp4", 4, ACC, ["--context-parallel-size", "4"], 4))
            # Sanitizer pass: each case for one model (each model keeps its CP x TP and CP x PP; disttest.py).
            cases = sanitizer_cases(cases, {"gpt2": {"cp2", "cp2_dp2_zero3", "cp2_tp2", "cp2_pp2_zero3"},
                                            "llama": {"cp2_dp2_zero1", "cp2_tp2_sp", "cp2_pp2_zero1", "cp4"}}[m])
            for name, np, acc, extra, P in cases:
                r = run(work, f"{m}_{name}", m, np, acc, extra)
                if r is None:
                    continue
                worst = max(rel(a, b) for a, b in zip(r["losses"], ref["losses"]))
                check(len(r["losses"]) == STEPS and worst < 1e-5,
                      f"{m} {name}: {len(r['losses'])} losses, worst relative difference {worst:.2e} (< 1e-5)")
                wn = max(rel(a, b) for a, b in zip(r["norms"], ref["norms"]))
                check(wn < 1e-4, f"{m} {name}: gradient norms, worst relative difference {wn:.2e} (< 1e-4)")
                w, rw = r["weights"], ref["weights"]
                same = sorted(w) == sorted(rw) and all(len(w[k]) == len(rw[k]) for k in rw)
                diff = max((abs(a - b) for k in rw if k in w for a, b in zip(w[k], rw[k])), default=1.0)
                check(same and diff < 1e-4, f"{m} {name}: exported model max abs difference {diff:.2e} (< 1e-4)")
                cpr = r["results"].get("data_parallel", {}).get("context_parallel", {})
                # A pipeline stage's ring runs for its own layers: half of the 2 at PP 2 (the chief's stage).
                want = ring_bytes(m, P, acc, 2 if "tp2" in name else 1) // (2 if "pp2" in name else 1)
                got = cpr.get("sent_bytes_per_step", 0)
                check(rel(got, want) < 0.02 and cpr.get("received_bytes_per_step") == got,
                      f"{m} {name}: cp bytes sent per step {got:.0f}, formula {want:.0f} "
                      f"({100 * rel(got, want):.2f}% off, < 2%)")
            resume(work, m, ref)
        interleaved(work)
        evaluation(work)
        bad_input(work)
    if failures:
        print(f"{len(failures)} failure(s)")
        for f in failures:
            print(f)
        sys.exit(1)


if __name__ == "__main__":
    main()
