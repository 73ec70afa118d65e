#!/usr/bin/env python3
"""flag_sweep.py: every numeric flag of every ztrain command, tried with 0, -1, a huge value
(1e18), NaN and a non-number on top of an otherwise valid command line. Each run must end in
  - "error": one line "ztrain: error: ..." naming the flag, exit code 1..127, for a value outside
    the flag's declared range (read from --help, where FlagSet prints it), or
  - "ok": exit 0 for a value inside it (a documented meaning, e.g. 0 = all cores), or
  - "error*": one clean error line from a later check for a value inside the range (e.g. a
    length beyond the model's context).
Anything else fails the sweep: a crash (exit >= 128: 134 abort, 135 bus error, 139 segfault), a
hang, "internal error" or "what():" in the output, several lines, an out-of-range value
accepted, or a flag whose range is missing from docs/flags.md.
Prints a table (flag x value) and a summary.
usage: flag_sweep.py path/to/ztrain [path/to/ztrain-for-the-flag-list]
(the second binary, e.g. a newer build, supplies the flags and ranges: to sweep an older build
whose --help shows no ranges; the docs check is then skipped)
"""
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ZTRAIN = os.path.abspath(sys.argv[1])
LISTER = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else ZTRAIN
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "flags.md")
VALUES = ["0", "-1", "1e18", "nan", "abc"]
COMMANDS = ["train", "eval", "generate", "tokenize", "tokenizer-train", "launch", "bench-comm", "estimate-memory"]
# String flags that hold numbers, checked by their command rather than by FlagSet.
EXTRA = {"estimate-memory": {"num_ranks": "a comma-separated list of integers >= 1"}}


def make_inputs(w):
    """A byte-level GPT-2 tokenizer (256 bytes + EOS, no merges), a tiny model, tokens, text."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    enc = {m[b]: b for b in range(256)}
    enc["<|endoftext|>"] = 256
    cfg = {"model_type": "gpt2", "vocab_size": 257, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64,
           "eos_token_id": 256}
    json.dump(cfg, open(f"{w}/cfg.json", "w"))
    r = random.Random(1)
    open(f"{w}/tok.bin", "wb").write(b"".join(r.randrange(257).to_bytes(2, "little") for _ in range(8000)))
    open(f"{w}/text.txt", "w").write("hello world, a small text to tokenize.\n" * 20)
    subprocess.run([ZTRAIN, "train", "--model_config_path", f"{w}/cfg.json", "--train_file", f"{w}/tok.bin",
                    "--output_dir", f"{w}/model", "--per_device_train_batch_size", "2", "--model_max_length", "16",
                    "--max_steps", "1", "--report_to", "none"], check=True, capture_output=True)
    json.dump(enc, open(f"{w}/model/encoder.json", "w"))
    open(f"{w}/model/vocab.bpe", "w").write("#version: 0.2\n")


def base_args(cmd, w, tag):
    """A valid, quick command line for cmd; the swept flag comes after it and wins."""
    out = f"{w}/out_{tag}"
    return {
        "train": ["--model_config_path", f"{w}/cfg.json", "--train_file", f"{w}/tok.bin", "--output_dir", out,
                  "--per_device_train_batch_size", "2", "--model_max_length", "16", "--max_steps", "1",
                  "--report_to", "none", "--save_strategy", "no", "--threads", "1"],
        "eval": ["--model_name_or_path", f"{w}/model", "--validation_file", f"{w}/tok.bin", "--model_max_length", "16",
                 "--per_device_eval_batch_size", "2", "--max_eval_samples", "4", "--threads", "1"],
        "generate": ["--model_name_or_path", f"{w}/model", "--prompt", "ab", "--max_new_tokens", "4", "--threads",
                     "1"],
        "tokenize": ["--tokenizer_name_or_path", f"{w}/model", "--input", f"{w}/text.txt", "--output_dir", out,
                     "--threads", "1"],
        "tokenizer-train": ["--vocab_size", "300", "--input", f"{w}/text.txt", "--output", out, "--threads", "1"],
        "launch": ["--dry_run"],
        "bench-comm": ["--min_bytes", "8", "--max_bytes", "64", "--iters", "1", "--warmup", "0", "--collectives",
                       "all_reduce"],
        "estimate-memory": ["--model_config_path", f"{w}/cfg.json"],
    }[cmd]


def numeric_flags(cmd):
    """(flag, range description) of every numeric flag, from --help."""
    h = subprocess.run([LISTER, cmd, "--help"], capture_output=True, text=True).stdout
    flags = []
    for line in h.splitlines():
        m = re.match(r"^\s+--([\w-]+)\s.*\[((?:-?\d+ or )?(?:an integer|a number)[^\]]*\]?)\]$", line)
        if m:
            flags.append((m.group(1), m.group(2)))
    return flags + list(EXTRA.get(cmd, {}).items())


def in_range(desc, value):
    """Whether value (a string) lies in the range FlagSet describes; None when desc is free text."""
    try:
        v = float(value)
    except ValueError:
        return False
    if v != v:
        return False
    m = re.match(r"^(?:(-?\d+) or )?(an integer|a number) (?:in ([\[(])(\S+), (\S+)([\])])|(>=|>) (\S+))$", desc)
    if not m:
        return None
    special, kind, lb, lo, hi, hb, op, lo2 = m.groups()
    if special is not None and v == float(special):
        return True
    if kind == "an integer" and v != int(v):
        return False
    if lo2 is not None:
        return v >= float(lo2) if op == ">=" else v > float(lo2)
    ok_lo = v >= float(lo) if lb == "[" else v > float(lo)
    ok_hi = v <= float(hi) if hb == "]" else v < float(hi)
    return ok_lo and ok_hi


def run(cmd, flag, value, w, tag):
    args = [ZTRAIN, cmd] + base_args(cmd, w, tag) + ([f"--{flag}", value] if flag else [])
    if cmd == "launch":
        args += ["--", "train", "--help"]
    try:
        p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=120)
    except subprocess.TimeoutExpired:
        return None, "", "(no exit after 120 s)"
    return p.returncode, p.stdout, p.stderr


def classify(cmd, flag, desc, value, rc, out, err):
    """(short outcome, failure reason or None)."""
    if rc is None:
        return "HANG", "hangs"
    text = out + err
    lines = [l for l in err.splitlines() if l.strip()]
    if rc < 0 or rc >= 128:
        return f"CRASH{rc}", f"exit {rc}"
    if "internal error" in text or "what():" in text or "terminate called" in text:
        return "INTERNAL", "internal error: " + err.strip()[:200]
    expected = in_range(desc, value) if "integers >=" not in desc else None
    if rc == 0:
        if expected is False:
            return "ACCEPTED", "out-of-range value accepted"
        return "ok", None
    if len(lines) != 1 or not lines[0].startswith("ztrain: error: "):
        return "MESSY", f"not one error line ({len(lines)} lines): " + err.strip()[:200]
    if expected:
        return "error*", None  # in range, stopped by a later check with a clean message
    if f"--{flag}" not in lines[0]:
        return "UNNAMED", "the error does not name --" + flag + ": " + lines[0]
    return "error", None


def docs_ranges():
    """{(command, flag): row text} from docs/flags.md's per-command tables."""
    rows, cmd = {}, None
    for line in open(DOCS):
        m = re.match(r"^## `ztrain ([\w-]+)`", line)
        if m:
            cmd = m.group(1)
        m = re.match(r"^\| `--([\w-]+)` \|", line)
        if m and cmd:
            rows.setdefault((cmd, m.group(1)), line)  # the range table comes first; later tables name flags too
    return rows


def main():
    w = tempfile.mkdtemp(prefix="zt_sweep_")
    make_inputs(w)
    docs = docs_ranges()
    failures, counts, table = [], {}, []
    for cmd in COMMANDS:
        # The sweep proves something only if --help still lists the flags (a format change
        # would find none) and the base command line works alone (else every value "errors").
        flags = numeric_flags(cmd)
        if not flags:
            failures.append(f"{cmd}: no numeric flag found in --help (did its format change?)")
        rc, out, err = run(cmd, None, None, w, f"{cmd}_base")
        if rc != 0:
            failures.append(f"{cmd}: the base command line fails alone (exit {rc}): {(err or out).strip()[-300:]}")
        # The runs are independent processes (one thread each): as many at once as there are cores.
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            runs = {(flag, i): pool.submit(run, cmd, flag, value, w, f"{cmd}_{flag}_{i}")
                    for flag, _ in flags for i, value in enumerate(VALUES)}
        for flag, desc in flags:
            row = []
            for i, value in enumerate(VALUES):
                rc, out, err = runs[(flag, i)].result()
                short, why = classify(cmd, flag, desc, value, rc, out, err)
                counts[short] = counts.get(short, 0) + 1
                row.append(short)
                if why:
                    failures.append(f"{cmd} --{flag} {value}: {why}")
            doc = docs.get((cmd, flag))
            if LISTER == ZTRAIN and (doc is None or desc not in doc):
                failures.append(f"{cmd} --{flag}: docs/flags.md has no row with its range \"{desc}\"")
            table.append((cmd, flag, desc, row))
    wf = max(len(f"{c} --{f}") for c, f, _, _ in table)
    print(f"{'command --flag':<{wf}}  " + "".join(f"{v:<9}" for v in VALUES) + "range")
    for cmd, flag, desc, row in table:
        print(f"{cmd + ' --' + flag:<{wf}}  " + "".join(f"{s:<9}" for s in row) + desc)
    total = sum(counts.values())
    print(f"\n{len(table)} numeric flags x {len(VALUES)} values = {total} runs: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for f in failures:
        print("FAIL ", f)
    subprocess.run(["rm", "-rf", w])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
