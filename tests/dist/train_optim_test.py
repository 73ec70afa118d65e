#!/usr/bin/env python3
"""train_optim_test.py: the optimizer zoo under data parallelism equals one process (tier 3).

A tiny Llama (GQA, untied head), random tokens, --no_shuffle, fp32, 20 steps (6 in the sanitizer
pass). For Adafactor (factored moments, beta1), Muon (Newton-Schulz in fp32), Lion and 8-bit AdamW:
DDP on 2 ranks, ZeRO-1 and ZeRO-3 on 2 ranks (the shards cut matrices mid-row: Adafactor's row and
column sums and Muon's matrices are assembled over the shard group), ZeRO-2 on 4, each at the
reference's global batch; per-step losses within 1e-5 relative of the one-process run. 8-bit
AdamW's blocks start at each shard's first element (bitsandbytes' at the tensor's), so under ZeRO
its quantization differs slightly: within 1e-3 there. Then checkpoints: Adafactor and 8-bit AdamW
saved at step 10 by ZeRO-3 on 2 ranks resume in one process with steps 11-20 equal to the reference;
Sophia (curvature every 3 steps) resumed at step 10 continues bit for bit.
usage: train_optim_test.py ZTRAIN MPIRUN
"""
import json
import os
import random
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import check, failures, rel, sanitizer_cases, step_history, steps_and_save, train  # noqa: E402

ZT, MPIRUN = sys.argv[1], sys.argv[2]
STEPS, SAVE = steps_and_save()
ACC = 4
LLAMA = {"model_type": "llama", "vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "tie_word_embeddings": False}
OPTIMS = [("adafactor", ["--optim", "adafactor", "--optim_args", "beta1=0.9,scale_parameter=true"]),
          ("muon", ["--optim", "muon", "--optim_args", "ns_dtype=fp32"]),
          ("lion", ["--optim", "lion_32bit"]),
          ("adamw_8bit", ["--optim", "adamw_8bit"])]


def losses(work, name, np, extra):
    out = os.path.join(work, name)
    p = train(ZT, MPIRUN, np, ["--model_config_path", os.path.join(work, "llama.json")],
              os.path.join(work, "train.bin"), out, STEPS, 2, 32, ACC // np, extra)
    if p.returncode != 0:
        failures.append(f"{name}: exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
        print(f"FAIL {name}: exit {p.returncode}: {(p.stdout + p.stderr).strip().splitlines()[-1:]}")
        return None
    return [h["loss"] for h in step_history(out)[0]]


def main():
    with tempfile.TemporaryDirectory() as work:
        rng = random.Random(1)
        with open(os.path.join(work, "train.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 60000, *[rng.randrange(512) for _ in range(60000)]))
        json.dump(LLAMA, open(os.path.join(work, "llama.json"), "w"))
        layouts = sanitizer_cases([("np2_z0", 2, ["--zero_stage", "0"]), ("np2_z1", 2, ["--zero_stage", "1"]),
                                   ("np2_z3", 2, ["--zero_stage", "3"]), ("np4_z2", 4, ["--zero_stage", "2"])],
                                  {"np2_z3", "np4_z2"})
        refs = {}
        for opt, args in OPTIMS:
            ref = refs[opt] = losses(work, f"{opt}_ref", 1, args)
            if ref is None:
                continue
            for name, np, extra in layouts:
                got = losses(work, f"{opt}_{name}", np, args + extra)
                if got is None:
                    continue
                worst = max(rel(a, b) for a, b in zip(got, ref))
                tol = 1e-3 if opt == "adamw_8bit" and "z0" not in name else 1e-5
                check(len(got) == STEPS and worst <= tol,
                      f"{opt} {name}: worst per-step loss rel diff {worst:.2e} vs one process (<= {tol:g})")
        # Checkpoints of per-tensor state written by ZeRO-3 shards, resumed by one process.
        for opt, args in OPTIMS[:1] + OPTIMS[3:]:
            ref = refs.get(opt)
            saved = os.path.join(work, f"{opt}_save")
            if ref is None or losses(work, f"{opt}_save", 2, args + ["--zero_stage", "3", "--save_strategy", "steps",
                                                                     "--save_steps", str(SAVE)]) is None:
                continue
            resumed = os.path.join(work, f"{opt}_resume")
            os.makedirs(resumed)
            shutil.copytree(os.path.join(saved, f"checkpoint-{SAVE}"), os.path.join(resumed, f"checkpoint-{SAVE}"))
            got = losses(work, f"{opt}_resume", 1, args + ["--resume_from_checkpoint", "latest"])
            if got is None:
                continue
            worst = max(rel(a, b) for a, b in zip(got[SAVE:], ref[SAVE:]))
            tol = 1e-3 if opt == "adamw_8bit" else 1e-5
            check(len(got) == STEPS and worst <= tol,
                  f"{opt}: ZeRO-3 x 2 checkpoint resumed by one process, steps {SAVE + 1}-{STEPS} worst rel "
                  f"diff {worst:.2e} (<= {tol:g})")
        # Sophia's curvature passes draw their labels from (seed, step, rank): a resumed run draws the
        # same, so it continues bit for bit (hessian_interval 3: passes before and after the save).
        sophia = ["--optim", "sophia", "--optim_args", "hessian_interval=3"]
        ref = losses(work, "sophia_ref", 1, sophia)
        if ref and losses(work, "sophia_save", 1, sophia + ["--save_strategy", "steps", "--save_steps", str(SAVE)]):
            os.makedirs(os.path.join(work, "sophia_resume"))
            shutil.copytree(os.path.join(work, "sophia_save", f"checkpoint-{SAVE}"),
                            os.path.join(work, "sophia_resume", f"checkpoint-{SAVE}"))
            got = losses(work, "sophia_resume", 1, sophia + ["--resume_from_checkpoint", "latest"])
            check(got is not None and got[SAVE:] == ref[SAVE:],
                  f"sophia resumed at step {SAVE}: steps {SAVE + 1}-{STEPS} bit-identical to the uninterrupted run")
    if failures:
        print(f"{len(failures)} failure(s)")
        for f in failures:
            print("  " + f.splitlines()[0])
        sys.exit(1)
    print("all optimizer data-parallel checks passed")


main()
