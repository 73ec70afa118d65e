#!/usr/bin/env python3
"""Multiple-choice scoring and probes (`ztrain eval --tasks/--probes`) against a brute-force PyTorch
oracle on the same model (tests/parity/hfmodels.py, in float64).

The oracle does what lm-evaluation-harness does, written out here: _encode_pair (trailing spaces of
the context move to the continuation; the continuation is encode(context + continuation) past
len(encode(context)); an empty context is the prefix token), the left truncation
(context + continuation)[-(max_length + 1):][:-1], one forward per request, the continuation's
summed log-probabilities, acc = argmax(loglik) == gold, acc_norm = argmax(loglik / len(choice)) ==
gold, stderr = sample stddev / sqrt(n) (mean_stderr). Probes: the answer's log-probability and the
rank of its first token among the logits (1 + how many are strictly larger).

The tokenizer is GPT-2's byte-level BPE with a few merges (encoder.json + vocab.bpe), so the
whole-sequence encode matters ("the " + "mat" merges across the seam differently than apart); the
oracle encodes with its own few-line BPE (ASCII text: the pre-tokenizer regex needs no \\p{L}).
Checked at two lengths: 24 (a long context loses its start) and the model's 64 (nothing cut).
usage: task_parity.py --ztrain build/ztrain [--work DIR]
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hfmodels  # noqa: E402

PY = sys.executable
FIX = os.path.join(HERE, "..", "fixtures", "tasks")
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n", "e r", "a n", "o n", "Ġ c", "Ġ P", "a r", "i s", "Ġ s", "Ġ w",
          "a t", "Ġ m", "o r", "e n", "Ġ o", "Ġ i"]
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
LOGLIK_TOL = 2e-4  # fp32 forward against float64, summed over a few tokens


def byte_table():
    keep = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


class Bpe:
    def __init__(self):
        self.bytes = byte_table()
        self.enc = {self.bytes[b]: b for b in range(256)}
        for i, m in enumerate(MERGES):
            self.enc[m.replace(" ", "")] = 256 + i
        self.eos = len(self.enc)
        self.enc["<|endoftext|>"] = self.eos
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(MERGES)}

    def word(self, w):
        parts = [self.bytes[b] for b in w.encode("utf-8")]
        while len(parts) > 1:
            r, i = min((self.ranks.get((parts[i], parts[i + 1]), math.inf), i) for i in range(len(parts) - 1))
            if r == math.inf:
                break
            a, b = parts[i], parts[i + 1]
            out, j = [], 0
            while j < len(parts):
                if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(parts[j])
                    j += 1
            parts = out
        return [self.enc[p] for p in parts]

    def encode(self, text):
        return [t for w in PAT.findall(text) for t in self.word(w)]

    def save(self, folder):
        json.dump(self.enc, open(os.path.join(folder, "encoder.json"), "w"))
        open(os.path.join(folder, "vocab.bpe"), "w").write("#version: 0.2\n" + "\n".join(MERGES) + "\n")


def encode_pair(tok, context, continuation):
    if context == "":
        return [tok.eos], tok.encode(continuation)
    n = len(context) - len(context.rstrip())
    if n > 0:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    return ctx, whole[len(ctx):]


def score(model, ctx, cont, max_length):
    inp = (ctx + cont)[-(max_length + 1):][:-1]
    with torch.no_grad():
        logits, _ = model(torch.tensor([inp]))
    logp = torch.log_softmax(logits[0].double(), dim=-1)
    first = len(inp) - len(cont)
    ll = sum(float(logp[first + i, t]) for i, t in enumerate(cont))
    row = logits[0, first].double()
    rank = int((row > row[cont[0]]).sum()) + 1
    return ll, rank


def oracle(model, tok, max_length):
    tasks = [json.loads(l) for l in open(os.path.join(FIX, "mc_tasks.jsonl")) if l.strip()]
    probes = [json.loads(l) for l in open(os.path.join(FIX, "probes.jsonl")) if l.strip()]
    out = {"questions": [], "probes": []}
    accs, norms = [], []
    for q in tasks:
        lls = [score(model, *encode_pair(tok, q["context"], c), max_length)[0] for c in q["choices"]]
        normed = [ll / len(c) for ll, c in zip(lls, q["choices"])]
        pred, pred_norm = lls.index(max(lls)), normed.index(max(normed))
        accs.append(float(pred == q["gold"]))
        norms.append(float(pred_norm == q["gold"]))
        out["questions"].append({"logliks": lls, "pred": pred, "pred_norm": pred_norm})
    n = len(tasks)
    out["tasks/acc"], out["tasks/acc_norm"] = sum(accs) / n, sum(norms) / n
    out["tasks/acc_stderr"] = statistics.stdev(accs) / math.sqrt(n)
    out["tasks/acc_norm_stderr"] = statistics.stdev(norms) / math.sqrt(n)
    for p in probes:
        ll, rank = score(model, *encode_pair(tok, p["prompt"], p["answer"]), max_length)
        out["probes"].append({"logprob": ll, "prob": math.exp(ll), "rank": rank})
    return out


def compare(z, o, label):
    lines, fails = [], 0
    diffs = [abs(a - b) for zq, oq in zip(z["questions"], o["questions"]) for a, b in zip(zq["logliks"], oq["logliks"])]
    ok = len(z["questions"]) == len(o["questions"]) and max(diffs) <= LOGLIK_TOL
    ok = ok and all(zq["pred"] == oq["pred"] and zq["pred_norm"] == oq["pred_norm"]
                    for zq, oq in zip(z["questions"], o["questions"]))
    for k in ("tasks/acc", "tasks/acc_norm", "tasks/acc_stderr", "tasks/acc_norm_stderr"):
        ok = ok and abs(z[k] - o[k]) <= 1e-12
    lines.append(f"{label}: {len(diffs)} choice logliks, max |ztrain - torch| {max(diffs):.2e}; acc {z['tasks/acc']} "
                 f"(torch {o['tasks/acc']}), acc_norm {z['tasks/acc_norm']} (torch {o['tasks/acc_norm']}), "
                 f"acc_stderr {z['tasks/acc_stderr']:.6f} (torch {o['tasks/acc_stderr']:.6f}) -> "
                 f"{'ok' if ok else 'FAIL'}")
    fails += not ok
    pd = max(abs(a["logprob"] - b["logprob"]) for a, b in zip(z["probes"], o["probes"]))
    ok = len(z["probes"]) == len(o["probes"]) and pd <= LOGLIK_TOL
    ok = ok and all(a["rank"] == b["rank"] for a, b in zip(z["probes"], o["probes"]))
    lines.append(f"{label}: {len(o['probes'])} probes, max |logprob diff| {pd:.2e}, ranks ztrain "
                 f"{[a['rank'] for a in z['probes']]} torch {[b['rank'] for b in o['probes']]} -> "
                 f"{'ok' if ok else 'FAIL'}")
    fails += not ok
    return fails, lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--work")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="zt-task-parity-")
    model_dir = os.path.join(work, "model")
    tok = Bpe()
    V = tok.eos + 1
    subprocess.run([PY, os.path.join(HERE, "make_model.py"), "--arch", "gpt2", "--out", model_dir, "--seed", "5",
                    "--vocab_size", str(V), "--n_embd", "64", "--n_layer", "2", "--n_head", "4", "--max_pos", "64"],
                   check=True, capture_output=True)
    model, cfg = hfmodels.load_model(model_dir)
    with torch.no_grad():  # sharper than the 0.02 initialisation, so the choices differ by more than rounding
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    hfmodels.save_model(model_dir, model, cfg)
    tok.save(model_dir)
    model, _ = hfmodels.load_model(model_dir)
    model = model.double()
    model.eval()
    fails, lines = 0, []
    for T in (24, 64):
        out = os.path.join(work, f"results_{T}.json")
        r = subprocess.run([a.ztrain, "eval", "--model_name_or_path", model_dir, "--tasks",
                            os.path.join(FIX, "mc_tasks.jsonl"), "--probes", os.path.join(FIX, "probes.jsonl"),
                            "--model_max_length", str(T), "--per_device_eval_batch_size", "4", "--output_path", out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ztrain eval failed:\n{r.stdout}\n{r.stderr}")
        f, l = compare(json.load(open(out)), oracle(model, tok, T), f"max_length {T}")
        fails += f
        lines += l
    print("\n".join(lines))
    if not a.work:
        shutil.rmtree(work)
    print(f"task parity: {'all checks passed' if fails == 0 else f'{fails} FAILED'}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
