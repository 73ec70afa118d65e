#!/usr/bin/env python3
"""train_families_test.py: the families with blocks or stored names of their own (OLMo-2, Phi-3, Gemma 3, Gemma 2)
under tensor, pipeline and context parallelism equal one process.

Each family's published config.json (tests/fixtures/configs) shrunk to 4 layers of width 64 (4 query
heads, 2 KV heads, vocabulary 509: the last TP rank's slice padded), random init and tokens,
--no_shuffle, fp32, 6 steps of batch 2 x accumulation 4. Checks, per family:
  - per-step losses within 1e-5 relative of one process for TP 2, TP 2 + SP, TP 4 (each KV head
    replicated on 2 ranks: OLMo-2's k_norm spans the KV heads), PP 2 (1F1B), CP 2 and CP 2 x TP 2
    (ring attention: the windows masked by global positions, Gemma's score scale and soft-cap,
    Phi-3's longrope factors chosen by the whole row's 32 tokens, not a rank's 16). Phi-3's and the
    Gemmas' CP runs, and a one-process reference, start from the trained reference with sharpened
    attention (sharpened()), where those features move the loss by 3e-4 to 1e-2 (docs/parallelism-cp.md);
  - the HF folder TP 2 exports (within 1e-3: Adam's steps on near-zero gradients; gathered from the slices, transformers' names: Phi-3's fused
    qkv_proj / gate_up_proj) equals one process's;
  - Phi-3: checkpoint-3's model.safetensors holds the exported folder's names and shapes (fused
    qkv_proj / gate_up_proj, what transformers loads), and resuming from it gives the one-process
    losses of steps 4-6 exactly.
Phi-3 runs with a window of 8 and longrope past an original context of 16; Gemma 3 with sliding layers
(window 8, every other layer) and a score scale of 24^-1/2; Gemma 2 the same with soft-capped scores
(1) and logits (0.3): the vocabulary-parallel loss caps each rank's logits.
usage: train_families_test.py ZTRAIN MPIRUN FIXTURES_DIR
"""
import json
import os
import random
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from disttest import check, failures, read_safetensors, rel, step_history, train  # noqa: E402

ZT, MPIRUN, FIX = sys.argv[1], sys.argv[2], sys.argv[3]
FAMILIES = {"olmo2": "olmo2-1b.json", "phi3": "phi3-mini-128k.json", "gemma3": "gemma3-1b.json",
            "gemma2": "gemma2-2b.json"}
B, T, ACC, STEPS, V = 2, 32, 4, 6, 509


def shrunk(name, work):
    c = json.load(open(os.path.join(FIX, FAMILIES[name])))
    c.update({"vocab_size": V, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 64})
    if "head_dim" in c:
        c["head_dim"] = 16
    if (c.get("rope_scaling") or {}).get("type") == "longrope":  # 8 frequencies; rows of 32 pass 16
        c["rope_scaling"].update(short_factor=[1.0 + 0.05 * i for i in range(8)],
                                 long_factor=[1.0 + 0.3 * i * i for i in range(8)])
        c["original_max_position_embeddings"] = 16
    if c.get("sliding_window") is not None:
        c["sliding_window"] = 8
    if c["model_type"] == "gemma3_text":
        c.update(sliding_window_pattern=2, query_pre_attn_scalar=24)
    if c["model_type"] == "gemma2":  # caps that bend the scores and logits at this size
        c.update(query_pre_attn_scalar=24, attn_logit_softcapping=1.0, final_logit_softcapping=0.3)
    path = os.path.join(work, f"{name}.json")
    json.dump(c, open(path, "w"), indent=2)
    return path


def run(work, name, config, np, extra, out=None):
    """config: a config.json (random init) or a model folder to start from."""
    out = out or os.path.join(work, name)
    model = ["--model_name_or_path" if os.path.isdir(config) else "--model_config_path", config]
    p = train(ZT, MPIRUN, np, model, os.path.join(work, "train.bin"), out, STEPS, B, T, ACC,
              extra, common=["--max_grad_norm", "1.0", "--save_dtype", "float32"])
    if p.returncode != 0:
        failures.append(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        print(f"FAIL {name}: exit {p.returncode}\n{p.stderr[-2000:]}")
        return None
    hist, _, _ = step_history(out)
    return {"losses": [h["loss"] for h in hist], "weights": read_safetensors(out), "out": out}


def header(path):
    """name -> shape of a safetensors file's tensors (its header, as transformers' loader reads it)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v["shape"] for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}


def sharpened(work, fam, ref):
    """A model folder to start from whose attention is far from uniform: the trained reference's
    queries and keys scaled by 8, so that windows, the score scale and soft-cap and the RoPE factors
    move the loss well past the bound (at random init they barely do: Gemma 2 without its soft-cap is
    within 2.2e-6). Gemma 3 normalizes each q and k head, so its scores are already of order one:
    its q / k norm weights (stored as w of 1 + w) are doubled (more makes its training chaotic: TP 2
    and PP 2 then drift by 1e-3 too)."""
    src, dst = ref["out"], os.path.join(work, f"{fam}_sharp")
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    qk_rows = (NH + cfg["num_key_value_heads"]) * cfg.get("head_dim", C // NH)  # qkv_proj's q and k rows
    shapes, values = header(os.path.join(src, "model.safetensors")), ref["weights"]
    tensors = {}
    for k, v in values.items():
        v = list(v)
        if k.endswith("qkv_proj.weight"):
            v[:qk_rows * C] = [8 * x for x in v[:qk_rows * C]]
        elif k.endswith(("q_proj.weight", "k_proj.weight")) and fam != "gemma3":
            v = [8 * x for x in v]
        elif k.endswith(("q_norm.weight", "k_norm.weight")) and fam == "gemma3":  # stored as w of (1 + w)
            v = [2 * (1 + x) - 1 for x in v]
        tensors[k] = v
    head, off = {"__metadata__": {"format": "pt"}}, 0
    for k, v in tensors.items():
        head[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [off, off + 4 * len(v)]}
        off += 4 * len(v)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for v in tensors.values():
            f.write(struct.pack("<%df" % len(v), *v))
    return dst


def check_phi3_checkpoint(work, config, ref):
    """checkpoint-3 stores the exported folder's tensors (fused names) and resumes exactly."""
    out = os.path.join(work, "phi3_save")
    r = run(work, "phi3_save", config, 1, ["--save_strategy", "steps", "--save_steps", "3"], out=out)
    if r is None:
        return
    ck = os.path.join(out, "checkpoint-3")
    names, final = header(os.path.join(ck, "model.safetensors")), header(os.path.join(out, "model.safetensors"))
    fused = [k for k in names if k.endswith(("qkv_proj.weight", "gate_up_proj.weight"))]
    parts = [k for k in names if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                                             "up_proj.weight")) and "qkv" not in k and "gate_up" not in k]
    check(names == final and len(fused) == 8 and not parts,
          f"phi3 checkpoint-3/model.safetensors: the exported folder's names and shapes ({len(fused)} fused, "
          f"{len(parts)} parts, equal to the final folder's: {names == final})")
    res = run(work, "phi3 resume from checkpoint-3", config, 1, ["--resume_from_checkpoint", ck], out=out)
    if res is not None:
        check(res["losses"][-3:] == ref["losses"][-3:] and len(res["losses"]) == STEPS,
              f"phi3 resume from checkpoint-3: steps 4-6 equal one process's ({res['losses'][-3:]})")


def main():
    with tempfile.TemporaryDirectory() as work:
        rng = random.Random(1)
        with open(os.path.join(work, "train.bin"), "wb") as f:
            f.write(struct.pack("<%dH" % 20000, *[rng.randrange(V) for _ in range(20000)]))
        for fam in FAMILIES:
            config = shrunk(fam, work)
            ref = run(work, f"{fam}_ref", config, 1, [])
            if ref is None:
                continue
            layouts = [("tp2", 2, ["--tensor-model-parallel-size", "2"]),
                       ("tp2_sp", 2, ["--tensor-model-parallel-size", "2", "--sequence-parallel"]),
                       ("tp4_kv_replicated", 4, ["--tensor-model-parallel-size", "4"]),
                       ("pp2", 2, ["--pipeline-model-parallel-size", "2"]),
                       ("cp2", 2, ["--context-parallel-size", "2"]),
                       ("cp2_tp2", 4, ["--context-parallel-size", "2", "--tensor-model-parallel-size", "2"])]
            if fam == "phi3":
                check_phi3_checkpoint(work, config, ref)
            start, base = config, ref
            if fam != "olmo2":  # CP from a start where the family's attention matters (sharpened)
                sharp = sharpened(work, fam, ref)
                sharp_ref = run(work, f"{fam}_sharp_ref", sharp, 1, [])
                if sharp_ref is None:
                    continue
                layouts = [(n + "_sharp" if n.startswith("cp") else n, np, extra) for n, np, extra in layouts]
            for name, np, extra in layouts:
                if name.endswith("_sharp"):
                    start, base = sharp, sharp_ref
                r = run(work, f"{fam}_{name}", start, np, extra)
                if r is None:
                    continue
                worst = max(rel(a, b) for a, b in zip(r["losses"], base["losses"]))
                check(len(r["losses"]) == STEPS and worst <= 1e-5,
                      f"{fam} {name}: per-step losses within 1e-5 of one process (worst {worst:.1e}; per step "
                      + " ".join(f"{rel(a, b):.1e}" for a, b in zip(r["losses"], base["losses"])) + ")")
                if name == "tp2":
                    w, rw = r["weights"], ref["weights"]
                    diff = max(max(abs(x - y) for x, y in zip(w[k], rw[k])) for k in rw) if w.keys() == rw.keys() \
                        else float("inf")
                    # Adam turns last-digit differences of near-zero gradients into steps of a fraction of lr
                    # (OLMo-2's output norms make many gradients tiny: 3.7e-4 measured); a wrong name, slice
                    # or fusion would differ by the weights' own size (~2e-2).
                    check(diff < 1e-3, f"{fam} {name}: the exported folder equals one process's (max |diff| {diff:.1e})")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
