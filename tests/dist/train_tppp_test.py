#!/usr/bin/env python3
"""train_tppp_test.py: tensor x pipeline parallel `ztrain train` (dp x tp x pp) equals one process.

Tiny GPT-2 (tied head, vocabulary 509: padded under TP 2) and tiny Llama (GQA 4/2 heads, untied),
4 layers each (tests/fixtures/configs/tiny-*-tppp.json), random init and tokens, --no_shuffle,
fp32, 20 steps (6 in the sanitizer pass, disttest.py). The reference is one process at batch 2 x
accumulation 4; every run reaches the same tokens per step (a pipeline step's micro-batches are the
accumulation steps). Checks:
  - per-step losses within 1e-5 relative (gradient norms 1e-4) of the reference on 4 ranks,
    TP 2 x PP 2: 1F1B and interleaved (2 virtual stages), SP off and on, DDP, ZeRO-1 and ZeRO-2
    (one data-parallel rank); and on 8 ranks TP 2 + SP x PP 2 x DP 2 with ZeRO-3 (Llama);
  - the exported HF folder (stages' units, then TP slices, gathered) equals the reference's;
  - an evaluation under TP x PP (the first stage's TP group over the gathered units) equals one
    process's;
  - per stage, the tp group's bus bytes per step equal docs/parallelism-tp.md's formula for the
    stage's layers, and the pp group's point-to-point bytes one activation (its 1/tp slice under
    SP) per micro-batch per boundary, within 2%;
  - checkpoints: TP 2 x PP 2 resumes at DP 4 ZeRO-3 and at one process, DP 4 ZeRO-3's at TP 2 x PP 2,
    one process's at TP 2 + SP x PP 2, TP 2 x PP 2 x DP 2 ZeRO-1's (Llama, 8 files) at TP 2 x PP 2 interleaved: the first resumed step's loss within 1e-6 relative of the saving run's own
    next step, the rest within 1e-5 of the reference;
  - --bf16 under TP 2 + SP x PP 2 close to one bf16 process (2e-4);
  - bad grids: one clear error line each, naming the numbers.
usage: train_tppp_test.py ZTRAIN MPIRUN FIXTURES_DIR
"""
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import bad_input_args, check, check_errors, failures, mpi as mpi_prefix, read_safetensors, rel, sanitizer_cases, steps_and_save, step_history, train  # noqa: E402

ZT, MPIRUN, FIX = sys.argv[1], sys.argv[2], sys.argv[3]
MODELS = {"gpt2": "tiny-gpt2-tppp.json", "llama": "tiny-llama-gqa-tppp.json"}
B, T, ACC, V = 2, 32, 4, 509
STEPS, SAVE = steps_and_save()  # 20 steps, checkpoint at 10 (6 and 3 in the sanitizer pass: disttest.py)
TP2 = ["--tensor-model-parallel-size", "2"]
PP2 = ["--pipeline-model-parallel-size", "2"]
INTERLEAVED = PP2 + ["--num-layers-per-virtual-pipeline-stage", "1"]


def cfg_of(model):
    c = json.load(open(os.path.join(FIX, MODELS[model])))
    return c.get("n_layer", c.get("num_hidden_layers")), c.get("n_embd", c.get("hidden_size"))


def run(work, name, model, np, acc, extra, out=None, steps=STEPS):
    out = out or os.path.join(work, name)
    p = train(ZT, MPIRUN, np, ["--model_config_path", os.path.join(FIX, MODELS[model])],
              os.path.join(work, "train.bin"), out, steps, B, T, acc, extra,
              common=["--max_grad_norm", "1.0", "--save_dtype", "float32"])
    if p.returncode != 0:
        failures.append(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        print(f"FAIL {name}: exit {p.returncode}\n{p.stderr[-1500:]}")
        return None
    hist, state, res = step_history(out)
    cut = re.search(r"blocks per virtual stage (.*)", p.stdout)
    return {"losses": [h["loss"] for h in hist], "norms": [h["grad_norm"] for h in hist],
            "evals": [h["eval_loss"] for h in state["log_history"] if "eval_loss" in h], "results": res,
            "out": out, "cut": cut.group(1).strip() if cut else None}


def stage_layers(cut, P):
    """Blocks per stage from the printed cut ("0-0 | 1-1 | 2-2 | 3-3": virtual stage k on stage k % P)."""
    per = [0] * P
    for k, part in enumerate(cut.split("|")):
        a, b = (int(x) for x in part.strip().split("-"))
        per[k % P] += b - a + 1
    return per


def tp_bus_bytes(model, P, sp, acc, layers, first, last):
    """Bus bytes per rank per optimizer step on one stage's tp group (docs/parallelism-tp.md, per stage)."""
    L, C = cfg_of(model)
    N, ring = B * T, (P - 1) / P
    act = 4 * N * C
    # Per micro-batch: 4 regions per block of the stage (2 forward, 2 backward), the embedding's
    # forward on the first stage, the LM head input's backward and the loss on the last.
    regions = (4 * layers + first + last) * 2 * ring * act
    ce = 2 * ring * (4 * N + 4 * 2 * N) if last else 0
    # SP: the stage's norms' partial gradients, summed once per step; the norm's scalar.
    norm_elems = (4 * layers + 2 * last) * C if model == "gpt2" else (2 * layers + last) * C
    partial = 2 * ring * 4 * norm_elems if sp else 0
    return acc * (regions + ce) + partial + 2 * ring * 8


def equivalence(work, m, ref, name, np, acc, extra, tp=2, pp=2):
    r = run(work, f"{m}_{name}", m, np, acc, extra)
    if r is None or ref is None:
        return None
    worst = max(rel(a, b) for a, b in zip(r["losses"], ref["losses"]))
    check(len(r["losses"]) == STEPS and worst < 1e-5,
          f"{m} {name}: {len(r['losses'])} losses, worst relative difference {worst:.2e} (< 1e-5)")
    wn = max(rel(a, b) for a, b in zip(r["norms"], ref["norms"]))
    check(wn < 1e-4, f"{m} {name}: gradient norms, worst relative difference {wn:.2e} (< 1e-4)")
    w, rw = read_safetensors(r["out"]), read_safetensors(ref["out"])
    same = sorted(w) == sorted(rw) and all(len(w[k]) == len(rw[k]) for k in rw)
    diff = max((abs(a - b) for k in rw if k in w for a, b in zip(w[k], rw[k])), default=1.0)
    check(same and diff < 1e-4, f"{m} {name}: exported model has the reference's tensors ({same}), "
          f"max abs difference {diff:.2e} (< 1e-4)")
    if "--validation_file" in extra:
        we = max((rel(a, b) for a, b in zip(r["evals"], ref["evals"])), default=1.0)
        check(len(r["evals"]) == len(ref["evals"]) > 0 and we < 1e-5,
              f"{m} {name}: {len(r['evals'])} evaluations within 1e-5 of one process's ({we:.1e})")
        return r  # evaluation traffic is on the tp group too: bytes are checked on runs without it
    sp = "--sequence-parallel" in extra
    layers = stage_layers(r["cut"], pp)
    got = r["results"]["data_parallel"]["tensor_parallel"]["bus_bytes_per_step_per_stage"]
    want = [tp_bus_bytes(m, tp, sp, acc, layers[s], s == 0, s == pp - 1) for s in range(pp)]
    check(all(rel(g, x) < 0.02 for g, x in zip(got, want)),
          f"{m} {name}: tp bus bytes per step per stage {[round(g) for g in got]} = formula "
          f"{[round(x) for x in want]} (layers per stage {layers}, < 2%)")
    pipe = r["results"]["pipeline"]
    v = pipe["virtual_stages"]
    _, C = cfg_of(m)
    crossings = [sum((c * pp + s < pp * v - 1) + (c * pp + s > 0) for c in range(v)) for s in range(pp)]
    act = B * T * C * 4 / (tp if sp else 1)
    formula = [x * acc * act for x in crossings]
    for kind in ("send", "recv"):
        g = pipe[f"{kind}_bytes_per_step"]
        check(all(abs(a - b) <= 0.02 * b for a, b in zip(g, formula)) and pipe["formula_bytes_per_step"] == formula,
              f"{m} {name}: pp {kind} bytes per step per stage {g} = formula {formula} (micro-batches x B T C x 4"
              f"{' / tp' if sp else ''} per boundary)")
    return r


def resume(work, m, ref):
    """Layout-free checkpoints: TP 2 x PP 2 -> DP 4 ZeRO-3 and one process; one process -> TP 2 + SP x PP 2."""
    saves = {"tp2_pp2": (4, ACC, TP2 + PP2), "one": (1, ACC, []), "dp4_zero3": (4, ACC // 4, ["--zero_stage", "3"])}
    resumes = {"tp2_pp2": [("DP 4 ZeRO-3", 4, ACC // 4, ["--zero_stage", "3"]), ("one process", 1, ACC, [])],
               "one": [("TP 2 + SP x PP 2", 4, ACC, TP2 + PP2 + ["--sequence-parallel"])],
               "dp4_zero3": [("TP 2 x PP 2", 4, ACC, TP2 + PP2)],
               "tp2_pp2_dp2_zero1": [("TP 2 x PP 2 interleaved", 4, ACC, TP2 + INTERLEAVED)]}
    if m == "llama":  # 8 writers: (stage x shards + shard) x TP + tp rank
        saves["tp2_pp2_dp2_zero1"] = (8, ACC // 2, TP2 + PP2 + ["--zero_stage", "1"])
    # Sanitizer pass: each saving layout for one model (every resume layout still runs; disttest.py).
    saves = dict(sanitizer_cases(saves.items(), {"gpt2": {"tp2_pp2", "one"},
                                                 "llama": {"dp4_zero3", "tp2_pp2_dp2_zero1"}}[m]))
    for saved, (np, acc, extra) in saves.items():
        out = os.path.join(work, f"{m}_save_{saved}")
        full = run(work, f"{m}_save_{saved}", m, np, acc, extra + ["--save_strategy", "steps", "--save_steps", str(SAVE)],
                   out=out)
        if full is None:
            continue
        for name, np2, acc2, extra2 in resumes[saved]:
            d = out + "_" + re.sub(r"\W+", "_", name)
            subprocess.run(["cp", "-r", out, d], check=True)
            r = run(work, f"{m} resume {saved} -> {name}", m, np2, acc2,
                    extra2 + ["--resume_from_checkpoint", os.path.join(d, f"checkpoint-{SAVE}")], out=d)
            if r is None:
                continue
            # The resumed log carries the first run's SAVE steps (restored with the checkpoint).
            first = rel(r["losses"][SAVE], full["losses"][SAVE])
            worst = max(rel(a, b) for a, b in zip(r["losses"][SAVE:], ref["losses"][SAVE:]))
            check(len(r["losses"]) == STEPS and first < 1e-6 and worst < 1e-5,
                  f"{m} checkpoint of {saved} at step {SAVE} resumed at {name}: step {SAVE + 1} {first:.1e} from the "
                  f"saving run's (< 1e-6), steps {SAVE + 1}-{STEPS} worst {worst:.1e} from the reference (< 1e-5)")


def bf16(work, m):
    ref = run(work, f"{m}_bf16_ref", m, 1, ACC, ["--bf16"])
    r = run(work, f"{m}_bf16_tp2_sp_pp2", m, 4, ACC, ["--bf16"] + TP2 + PP2 + ["--sequence-parallel"])
    if ref and r:
        worst = max(rel(a, b) for a, b in zip(r["losses"], ref["losses"]))
        check(len(r["losses"]) == STEPS and worst < 2e-4,
              f"{m} bf16 TP 2 + SP x PP 2: worst relative loss difference {worst:.2e} (< 2e-4)")


def bad_input(work):
    """Bad grids under TP x PP: one clear error line (per rank) naming the numbers."""
    base = bad_input_args(ZT, work, B) + ["--model_max_length", str(T)]
    gpt2 = ["--model_config_path", os.path.join(FIX, MODELS["gpt2"])]
    two_layers = ["--model_config_path", os.path.join(FIX, "tiny-gpt2-tp.json")]
    mpi = lambda n: mpi_prefix(MPIRUN, n)
    cases = [
        ("grid not multiplying to the world", mpi(6) + base + gpt2 + TP2 + PP2,
         "--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 2 = 4 does not divide the 6 ranks"),
        ("TP not dividing the heads", mpi(6) + base + gpt2 + ["--tensor-model-parallel-size", "3"] + PP2,
         "--tensor-model-parallel-size 3 does not divide the model's 4 attention heads"),
        ("PP larger than the layers", mpi(6) + base + two_layers + TP2 + ["--pipeline-model-parallel-size", "3"],
         "--pipeline-model-parallel-size 3 exceeds the model's 2 layers"),
    ]
    check_errors(cases)


def main():
    with tempfile.TemporaryDirectory() as work:
        rng = random.Random(1)
        with open(os.path.join(work, "train.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 60000, *[rng.randrange(V) for _ in range(60000)]))
        val = ["--validation_file", os.path.join(work, "train.bin"), "--eval_strategy", "steps", "--eval_steps", str(SAVE),
               "--max_eval_samples", "8"]
        for m in MODELS:
            ref = run(work, f"{m}_ref", m, 1, ACC, val)
            if ref is None:
                continue
            cases = [("tp2_pp2_1f1b", 4, ACC, TP2 + PP2),
                     ("tp2_sp_pp2_1f1b_zero1", 4, ACC, TP2 + PP2 + ["--sequence-parallel", "--zero_stage", "1"]),
                     ("tp2_pp2_interleaved_zero1", 4, ACC, TP2 + INTERLEAVED + ["--zero_stage", "1"]),
                     ("tp2_pp2_1f1b_zero2", 4, ACC, TP2 + PP2 + ["--zero_stage", "2"]),
                     ("tp2_sp_pp2_interleaved", 4, ACC, TP2 + INTERLEAVED + ["--sequence-parallel"]),
                     ("tp2_sp_pp2_1f1b_eval", 4, ACC, TP2 + PP2 + ["--sequence-parallel"] + val)]
            if m == "llama":
                cases.append(("tp2_sp_pp2_dp2_zero3", 8, ACC // 2,
                              TP2 + PP2 + ["--sequence-parallel", "--zero_stage", "3"]))
            # Sanitizer pass: each case for one model (both keep 1F1B, interleaved and SP; disttest.py).
            cases = sanitizer_cases(cases, {"gpt2": {"tp2_pp2_1f1b", "tp2_pp2_interleaved_zero1", "tp2_sp_pp2_1f1b_eval"},
                                            "llama": {"tp2_sp_pp2_1f1b_zero1", "tp2_pp2_1f1b_zero2", "tp2_sp_pp2_interleaved",
                                                      "tp2_sp_pp2_dp2_zero3"}}[m])
            for name, np, acc, extra in cases:
                equivalence(work, m, ref, name, np, acc, extra)
            resume(work, m, ref)
            if m == "llama":
                bf16(work, m)
        bad_input(work)
    if failures:
        print(f"{len(failures)} failure(s)")
        for f in failures:
            print(f)
        sys.exit(1)
    print("all TP x PP checks passed")


if __name__ == "__main__":
    main()
