#!/usr/bin/env python3
"""train_pp_test.py: pipeline-parallel `ztrain train` under mpirun equals one process.

Tiny GPT-2 (tied head) and tiny Llama (GQA, untied), 4 layers each
(tests/fixtures/configs/tiny-*-4l.json), random init and tokens, --no_shuffle, fp32, 20 steps (6 in the
sanitizer pass, disttest.py).
The reference is one process at batch 2 x accumulation 4; every pipeline run reaches the same
tokens per step (the micro-batches of a pipeline step are the accumulation steps). Checks:
  - per-step losses within 1e-5 relative of the reference: PP 2 (1F1B) alone, and PP 2 x DP 2
    on 4 ranks with 1F1B + DDP, interleaved 1F1B (2 virtual stages) + ZeRO-1, 1F1B + ZeRO-2,
    interleaved + ZeRO-3 and 1F1B + ZeRO-3 (with an evaluation: the stages' shards gathered);
  - under ZeRO, the data-parallel bytes per step equal the engine's plan (2%) and the chief's
    stage holds the ZeRO paper's shares of the stage's parameters (5%);
  - --bf16 and --fp16 under PP 2 x DP 2 ZeRO-3 within 2e-4 of one process in the same precision;
  - the pp group's point-to-point bytes per step of every stage equal one B T C fp32
    activation (or gradient) per micro-batch per boundary crossed, within 2%;
  - the exported HF folder equals the reference's weights (1e-5);
  - a checkpoint saved under PP resumes at the same layout and on one process, and one saved under
    PP 2 x DP 2 ZeRO-3 on one process and at PP 2 x DP 2 ZeRO-2, with the next steps' losses equal;
  - bad combinations fail with one clear error line.
usage: train_pp_test.py ZTRAIN MPIRUN
"""
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import check, failures, read_safetensors, rel, steps_and_save, step_history, train  # noqa: E402

ZT, MPIRUN = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "fixtures", "configs")
MODELS = {"gpt2": "tiny-gpt2-4l.json", "llama": "tiny-llama-gqa-4l.json"}
B, T, GLOBAL_ACC, C = 2, 32, 4, 64
STEPS, SAVE = steps_and_save()  # 20 steps, checkpoint and evaluations every 10 (6 and 3 in the sanitizer pass)


def run(work, name, model, np, acc, extra, expect_fail=False, steps=STEPS):
    out = os.path.join(work, name)
    p = train(ZT, MPIRUN, np, ["--model_config_path", os.path.join(CONFIGS, MODELS[model])],
              os.path.join(work, "train.bin"), out, steps, B, T, acc, extra)
    if expect_fail:
        return p
    if p.returncode != 0:
        failures.append(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        print(f"FAIL {name}: exit {p.returncode}\n{p.stderr[-1500:]}")
        return None
    hist, state, res = step_history(out)
    losses = [h["loss"] for h in hist]
    evals = [h["eval_loss"] for h in state["log_history"] if "eval_loss" in h]
    return {"losses": losses, "evals": evals, "results": res, "out": out}


def same_losses(name, got, ref):
    if got is None or ref is None:
        return
    worst = max((rel(a, b) for a, b in zip(got["losses"], ref["losses"])), default=1.0)
    check(len(got["losses"]) == len(ref["losses"]) and worst <= 1e-5,
          f"{name}: {len(got['losses'])} per-step losses within 1e-5 relative of one process (worst {worst:.2e})")


def main():
    with tempfile.TemporaryDirectory() as work:
        rng = random.Random(1)
        with open(os.path.join(work, "train.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 60000, *[rng.randrange(512) for _ in range(60000)]))
        val = ["--validation_file", os.path.join(work, "train.bin"), "--eval_strategy", "steps", "--eval_steps", str(SAVE),
               "--max_eval_samples", "8"]
        refs = {m: run(work, f"{m}_ref", m, 1, GLOBAL_ACC, ["--save_dtype", "float32"] + val) for m in MODELS}
        runs = [
            ("gpt2", "pp2_1f1b", 2, GLOBAL_ACC, ["--pipeline-model-parallel-size", "2"] + val),
            ("gpt2", "pp2_dp2_1f1b_ddp", 4, GLOBAL_ACC // 2, ["--pipeline-model-parallel-size", "2"]),
            ("gpt2", "pp2_dp2_interleaved_zero1", 4, GLOBAL_ACC // 2,
             ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1", "--zero_stage", "1"]),
            ("gpt2", "pp2_dp2_1f1b_zero2", 4, GLOBAL_ACC // 2, ["--pipeline-model-parallel-size", "2", "--zero_stage", "2"]),
            ("gpt2", "pp2_dp2_interleaved_zero3", 4, GLOBAL_ACC // 2,
             ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1", "--zero_stage", "3"]),
            ("llama", "pp2_dp2_1f1b_ddp", 4, GLOBAL_ACC // 2, ["--pipeline-model-parallel-size", "2"]),
            ("llama", "pp2_dp2_1f1b_zero3_eval", 4, GLOBAL_ACC // 2,
             ["--pipeline-model-parallel-size", "2", "--zero_stage", "3"] + val),
            ("llama", "pp2_dp2_interleaved_zero2", 4, GLOBAL_ACC // 2,
             ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1", "--zero_stage", "2"]),
            ("llama", "pp2_dp2_interleaved_zero1", 4, GLOBAL_ACC // 2,
             ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1", "--zero_stage", "1"]),
        ]
        for m, name, np, acc, extra in runs:
            r = run(work, f"{m}_{name}", m, np, acc, extra + ["--save_dtype", "float32"])
            if r is None or refs[m] is None:
                continue
            same_losses(f"{m} {name}", r, refs[m])
            if "--validation_file" in extra:
                worst = max((rel(a, b) for a, b in zip(r["evals"], refs[m]["evals"])), default=1.0)
                check(len(r["evals"]) == 2 and worst <= 1e-5,
                      f"{m} {name}: evaluations (the stages' units gathered) equal one process's ({worst:.1e})")
            pipe = r["results"]["pipeline"]
            for kind in ("send", "recv"):
                got, want = pipe[f"{kind}_bytes_per_step"], pipe["formula_bytes_per_step"]
                check(all(abs(g - w) <= 0.02 * w for g, w in zip(got, want)),
                      f"{m} {name}: {kind} bytes per step per stage {got} = formula {want} "
                      f"(micro-batches x B T C x 4 per boundary)")
            if "--zero_stage" in extra:
                # The data-parallel engine over the stage's units: its measured bytes are its plan,
                # and what the chief's stage holds is the ZeRO paper's share of the stage's Psi.
                dp = r["results"]["data_parallel"]
                c = dp["communication"]
                # (an evaluation's gathers count too: checked on runs without one)
                check("--validation_file" in extra or
                      rel(c["bus_bytes_per_step"], c["planned_bus_bytes_per_step"]) <= 0.02,
                      f"{m} {name}: data-parallel bus bytes per step {c['bus_bytes_per_step']:.0f} = planned "
                      f"{c['planned_bus_bytes_per_step']:.0f}")
                held, zp = dp["model_state_bytes"], dp["zero_paper_model_state_bytes"]
                for k in ("parameters", "gradients", "optimizer_state"):
                    check(rel(held[k], zp[k]) <= 0.05, f"{m} {name}: stage 0 {k} held {held[k]} vs ZeRO paper {zp[k]:.0f}")
            a = read_safetensors(os.path.join(refs[m]["out"], "model.safetensors"))
            b = read_safetensors(os.path.join(r["out"], "model.safetensors"))
            worst = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a) if a.keys() == b.keys() else 1.0
            check(worst <= 1e-5, f"{m} {name}: exported HF weights equal one process's (max diff {worst:.1e})")

        # The final folder in several weight files (--max_shard_size 20KB: tensors leave table order,
        # the larger ones getting files of their own) streamed from PP 2 x DP 2 ZeRO-3's shards.
        r = run(work, "gpt2_pp2_dp2_zero3_shards", "gpt2", 4, GLOBAL_ACC // 2,
                ["--pipeline-model-parallel-size", "2", "--zero_stage", "3", "--max_shard_size", "20KB",
                 "--save_dtype", "float32"])
        if r is not None and refs["gpt2"] is not None:
            files = [f for f in os.listdir(r["out"]) if f.endswith(".safetensors")]
            a, b = read_safetensors(refs["gpt2"]["out"]), read_safetensors(r["out"])
            worst = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a) if a.keys() == b.keys() else 1.0
            check(len(files) > 2 and worst <= 1e-5,
                  f"gpt2 PP 2 x DP 2 ZeRO-3, --max_shard_size 20KB: {len(files)} weight files equal one process's "
                  f"weights (max diff {worst:.1e})")

        # Mixed precision: PP 2 x DP 2 ZeRO-3 under --bf16 and --fp16 (dynamic loss scale) against one
        # process in the same precision (bf16 gradients are reduced in bf16: DeepSpeed's default).
        for prec in ("--bf16", "--fp16"):
            ref = run(work, f"llama_ref{prec}", "llama", 1, GLOBAL_ACC, [prec])
            r = run(work, f"llama_pp2_dp2_zero3{prec}", "llama", 4, GLOBAL_ACC // 2,
                    [prec, "--pipeline-model-parallel-size", "2", "--zero_stage", "3"])
            if ref and r:
                worst = max((rel(a, b) for a, b in zip(r["losses"], ref["losses"])), default=1.0)
                check(len(r["losses"]) == STEPS and worst <= 2e-4,
                      f"llama PP 2 x DP 2 ZeRO-3 {prec}: per-step losses within 2e-4 of one {prec[2:]} process "
                      f"(worst {worst:.1e})")

        # Checkpoints: saved under PP 2, resumed at the same layout and on one process; saved under
        # PP 2 x DP 2 ZeRO-3 (a file per stage and shard), resumed on one process and at PP 2 x DP 2 ZeRO-2.
        pp2 = ["--pipeline-model-parallel-size", "2"]
        saves = [("PP 2", 2, GLOBAL_ACC, pp2, [("same layout", 2, GLOBAL_ACC, pp2), ("one process", 1, GLOBAL_ACC, [])]),
                 ("PP 2 x DP 2 ZeRO-3", 4, GLOBAL_ACC // 2, pp2 + ["--zero_stage", "3"],
                  [("one process", 1, GLOBAL_ACC, []), ("PP 2 x DP 2 ZeRO-2", 4, GLOBAL_ACC // 2, pp2 + ["--zero_stage", "2"])])]
        for k, (saved, np0, acc0, extra0, resumes) in enumerate(saves):
            ck = run(work, f"ck{k}", "gpt2", np0, acc0, extra0 + ["--save_strategy", "steps", "--save_steps", str(SAVE)])
            if ck is None:
                continue
            for name, np, acc, extra in resumes:
                d = os.path.join(work, f"ck{k}_" + name.replace(" ", "_"))
                subprocess.run(["cp", "-r", ck["out"], d], check=True)
                r = run(work, os.path.basename(d), "gpt2", np, acc,
                        extra + ["--resume_from_checkpoint", os.path.join(d, f"checkpoint-{SAVE}")])
                same_losses(f"{saved} checkpoint-{SAVE} resumed ({name})", r, refs["gpt2"])

        # Bad combinations: one clear line each.
        for np, acc, extra, want in (
            (2, 3, ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"],
             "multiple of the pipeline stages (2)"),
            (2, 4, ["--pipeline-model-parallel-size", "3"], "does not divide the 2 ranks"),
            (2, 4, ["--pipeline-model-parallel-size", "2", "--pipeline_layers", "3,2"], "adds up to 5 layers"),
            (1, 4, ["--pipeline_layers", "2,2"], "needs pipeline stages"),
            (2, 4, ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "3"],
             "does not divide the model's 4 layers"),
        ):
            p = run(work, "bad", "gpt2", np, acc, extra, expect_fail=True, steps=1)
            line = [ln for ln in p.stderr.splitlines() if want in ln][:1]
            check(p.returncode != 0 and line, f"{' '.join(extra)} (np {np}) fails with {line or p.stderr[-300:]}")
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all pipeline checks passed")


if __name__ == "__main__":
    main()
