#!/usr/bin/env python3
"""compare.py: two ztrain binaries, bit for bit (the foundation refactor's guard).

Runs the same tiny trainings with OLD and NEW and compares, exactly, every logged loss
(trainer_state.json log_history, full precision) and the final model the run saves in --output_dir
(model.safetensors or its model-*.safetensors shards: every tensor's name, dtype, shape, bytes):
  - one process: tiny GPT-2 (tied head) and tiny Llama (GQA, untied), with and without
    --packing, the PyTorch-parity shape (a bigger GPT-2), --bf16 and --fp16;
  - under mpirun: DDP, ZeRO-1/2/3 at N=2, ZeRO-3 hybrid (G=2 of N=4), --overlap_comm false,
    bf16 / fp16 under ZeRO, local SGD (two groups of one rank);
  - model parallelism: TP 2 (+ sequence parallel), CP 2, PP 2 (1F1B; interleaved on 4-layer
    models), TP 2 x PP 2, ZeRO-3 x TP 2;
  - checkpoints across binaries: OLD saves checkpoint-4 of an 8-step run and NEW resumes from it,
    and the reverse; steps 5-8 and the final model must equal OLD's uninterrupted run.
Every run keeps 8 sequences of 32 tokens per step (accumulation = 4 / data-parallel ranks).
Prints one line per case (bit-identical, or the worst relative difference: per loss, and per
model tensor against its largest element) and exits 1 if a case differs by more than --tol
(default 0: bit-identical). Runs are niced: the guard runs beside builds on small machines.
usage: compare.py OLD_ZTRAIN NEW_ZTRAIN [--tol 1e-6] [--mpirun mpirun] [--only SUBSTRING]
"""
import argparse
import glob
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("old")
ap.add_argument("new")
ap.add_argument("--tol", type=float, default=0.0)
ap.add_argument("--mpirun", default="mpirun")
ap.add_argument("--only", default="", help="run only the cases whose name contains this substring")
args = ap.parse_args()
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", ZT_COMM_TIMEOUT_S="60")
LLAMA = {"model_type": "llama", "vocab_size": 512, "max_position_embeddings": 64, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "tie_word_embeddings": False, "eos_token_id": 0}
GPT2 = {"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4,
        "eos_token_id": 0}
MODELS = {
    "gpt2": GPT2, "llama": LLAMA,
    "gpt2big": {"model_type": "gpt2", "vocab_size": 512, "n_positions": 128, "n_embd": 128, "n_layer": 4,
                "n_head": 4},
    # Interleaved pipelines need more than one chunk of layers per stage: 4 layers = 2 stages x 2 chunks.
    "gpt2_4l": dict(GPT2, n_layer=4), "llama_4l": dict(LLAMA, num_hidden_layers=4),
}
TP2, PP2, CP2 = ["--tensor-model-parallel-size", "2"], ["--pipeline-model-parallel-size", "2"], \
    ["--context-parallel-size", "2"]
SAVE4 = ["--save_strategy", "steps", "--save_steps", "4"]


def data_parallel(np, extra):
    """The data-parallel ranks: np over the model-parallel ones (tp x pp x cp)."""
    mp = 1
    for flag in (TP2[0], PP2[0], CP2[0]):
        if flag in extra:
            mp *= int(extra[extra.index(flag) + 1])
    return np // mp


def train(zt, out, model, np=1, steps=12, extra=()):
    """Trains in out (a fresh folder) and returns [(step, loss)] from its trainer_state.json."""
    acc = 4 // data_parallel(np, extra)
    cmd = [zt, "train", "--model_config_path", os.path.join(WORK, model + ".json"), "--train_file",
           os.path.join(WORK, "train.bin"), "--max_steps", str(steps), "--save_strategy", "no", "--no_shuffle",
           "--model_max_length", "32", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
           str(acc), "--learning_rate", "1e-3", "--weight_decay", "0.1", "--max_grad_norm", "1.0",
           "--report_to", "none", "--logging_steps", "1", "--threads", "1", "--output_dir", out] + list(extra)
    if np > 1:
        cmd = [args.mpirun, "-np", str(np), "--oversubscribe", "--bind-to", "none"] + cmd
    # nice: the guard runs beside builds and editors on small machines; it only needs exactness.
    p = subprocess.run(["nice", "-n", "10"] + cmd, env=ENV, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"{out} ({zt}): exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    return [(h["step"], h["loss"]) for h in state["log_history"] if "loss" in h and "train_loss" not in h]


def tensors(out):
    """name -> (dtype, shape, raw bytes) over the saved model's files (one file or shards)."""
    files = sorted(glob.glob(os.path.join(out, "model*.safetensors")))
    if not files:
        raise SystemExit(f"{out}: no model*.safetensors written")
    res = {}
    for path in files:
        with open(path, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            data = f.read()
        for k, v in header.items():
            if k != "__metadata__":
                a, b = v["data_offsets"]
                res[k] = (v["dtype"], tuple(v["shape"]), data[a:b])
    return res


def model_diff(out_a, out_b):
    """(bit-identical, worst difference of an F32 tensor relative to its largest element) of the
    two saved models (per tensor: elements crossing zero would make per-element ratios meaningless);
    inf where the names, shapes or dtypes differ, or a non-F32 tensor does."""
    ta, tb = tensors(out_a), tensors(out_b)
    if ta.keys() != tb.keys():
        return False, float("inf")
    same, worst = True, 0.0
    for k, (dt, shape, raw) in ta.items():
        if (dt, shape, raw) == tb[k]:
            continue
        same = False
        if (dt, shape) != tb[k][:2] or dt != "F32":
            return False, float("inf")
        n = len(raw) // 4
        x, y = struct.unpack(f"<{n}f", raw), struct.unpack(f"<{n}f", tb[k][2])
        diff = max(abs(u - v) if u == u and v == v else float("inf") for u, v in zip(x, y))
        worst = max(worst, diff / max(max(map(abs, x)), 1e-30))
    return same, worst


def compare(name, a, b, out_a, out_b):
    """One summary line for the case: losses (step by step) and the saved models."""
    if [s for s, _ in a] != [s for s, _ in b]:
        print(f"{name:46s} DIFFERENT STEPS {len(a)} vs {len(b)}")
        return False
    la, lb = [x for _, x in a], [x for _, x in b]
    worst = max((abs(x - y) / max(abs(x), 1e-30) for x, y in zip(la, lb)), default=0.0)
    msame, mworst = model_diff(out_a, out_b)
    loss_msg = "bit-identical" if la == lb else f"worst relative difference {worst:.3e}"
    model_msg = "model bit-identical" if msame else f"MODEL worst difference {mworst:.3e} (of max |w|)"
    print(f"{name:46s} {len(a):3d} steps  {loss_msg}, {model_msg}", flush=True)
    # At --tol 0 only identical bytes pass (-0.0 vs 0.0 compares equal but is a different bit).
    return worst <= args.tol and (msame or (args.tol > 0 and mworst <= args.tol))


def cases():
    """(name, model, ranks, flags); each trains 12 steps with OLD and with NEW."""
    c = [("serial gpt2", "gpt2", 1, []), ("serial llama", "llama", 1, []),
         ("serial gpt2 --packing", "gpt2", 1, ["--packing"]), ("serial llama --packing", "llama", 1, ["--packing"]),
         ("serial gpt2big (parity shape)", "gpt2big", 1, [])]
    for prec in ("--bf16", "--fp16"):  # non-native bf16 GEMMs where the CPU lacks AVX512-BF16
        c += [(f"serial gpt2 {prec}", "gpt2", 1, [prec]), (f"serial llama {prec}", "llama", 1, [prec])]
    for st in (0, 1, 2, 3):
        for m in ("gpt2", "llama"):
            c.append((f"np2 zero_stage {st} {m}", m, 2, ["--zero_stage", str(st)]))
    c += [("np4 zero3 hybrid G=2 llama", "llama", 4, ["--zero_stage", "3", "--zero_hpz_partition_size", "2"]),
          ("np2 ddp --overlap_comm false", "gpt2", 2, ["--overlap_comm", "false"]),
          ("np2 zero_stage 3 --bf16 llama", "llama", 2, ["--zero_stage", "3", "--bf16"]),
          ("np2 zero_stage 2 --fp16 gpt2", "gpt2", 2, ["--zero_stage", "2", "--fp16"]),
          # Two groups of one rank: each trains alone and they average (outer Nesterov) every 4 steps.
          ("np2 local_sgd H=4 groups of 1 gpt2", "gpt2", 2,
           ["--local_sgd_steps", "4", "--local_sgd_group_size", "1"])]
    for m in ("gpt2", "llama"):
        c += [(f"np2 tp2 {m}", m, 2, TP2), (f"np2 tp2 +sp {m}", m, 2, TP2 + ["--sequence-parallel"]),
              (f"np2 cp2 {m}", m, 2, CP2),  # T=32 splits into 2 x 2 chunks; CP refuses --packing
              (f"np2 pp2 1f1b {m}", m, 2, PP2),
              (f"np2 pp2 interleaved {m}_4l", m + "_4l", 2, PP2 + ["--num-layers-per-virtual-pipeline-stage", "1"]),
              (f"np4 tp2 x pp2 {m}", m, 4, TP2 + PP2)]
    c.append(("np4 zero3 x tp2 llama", "llama", 4, TP2 + ["--zero_stage", "3"]))
    return c


def resume_case(name, model, np, extra):
    """Checkpoints across binaries: each binary saves checkpoint-4 of 8 steps and the other
    resumes from a copy of it (in a fresh folder, so only the checkpoint carries over)."""
    ok, full, tag = True, {}, name.replace(" ", "_")
    for who, zt in (("old", args.old), ("new", args.new)):
        full[who] = os.path.join(WORK, f"{who}_save_{tag}")
        full[who + "_hist"] = train(zt, full[who], model, np, steps=8, extra=SAVE4 + extra)
    ok &= compare(f"resume {name} saving run", full["old_hist"], full["new_hist"], full["old"], full["new"])
    for saver, zt, resumer in (("old", args.new, "new"), ("new", args.old, "old")):
        out = os.path.join(WORK, f"{resumer}_resume_{saver}_{tag}")
        os.makedirs(out)
        shutil.copytree(os.path.join(full[saver], "checkpoint-4"), os.path.join(out, "checkpoint-4"))
        hist = train(zt, out, model, np, steps=8,
                     extra=["--resume_from_checkpoint", os.path.join(out, "checkpoint-4")] + extra)
        # Steps 5-8 of the resumed run against OLD's uninterrupted 8 steps (the saving run).
        ok &= compare(f"resume {name} {saver}->{resumer} (vs old)", [h for h in full["old_hist"] if h[0] > 4],
                      [h for h in hist if h[0] > 4], full["old"], out)
    return ok


def main():
    global WORK
    WORK = tempfile.mkdtemp(prefix="zt-before-after-")
    for k, v in MODELS.items():
        json.dump(v, open(os.path.join(WORK, k + ".json"), "w"))
    rnd = random.Random(7)
    with open(os.path.join(WORK, "train.bin"), "wb") as f:
        f.write(struct.pack(f"<{60000}H", *[rnd.randrange(512) for _ in range(60000)]))
    ok, ran = True, 0
    for name, m, np, extra in cases():
        if args.only not in name:
            continue
        tag = name.replace(" ", "_").replace("=", "")
        a, b = (os.path.join(WORK, who + "_" + tag) for who in ("old", "new"))
        ok &= compare(name, train(args.old, a, m, np, extra=extra), train(args.new, b, m, np, extra=extra), a, b)
        ran += 1
    for name, m, np, extra in (("serial gpt2", "gpt2", 1, []), ("np2 zero3 llama", "llama", 2, ["--zero_stage", "3"]),
                               ("np2 tp2 llama", "llama", 2, TP2)):
        if args.only in "resume " + name:
            ok &= resume_case(name, m, np, extra)
            ran += 1
    shutil.rmtree(WORK, ignore_errors=True)
    if not ran:
        print(f"no case matches --only {args.only!r}")
        return 1
    print("all cases within tolerance" if ok else "SOME CASES DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
