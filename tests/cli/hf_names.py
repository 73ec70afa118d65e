#!/usr/bin/env python3
"""hf_names.py: every Hugging Face TrainingArguments name (apps/hf_training_args.h) is either a flag
of `ztrain train` (honoured: listed by --help, documented in docs/flags.md or README.md, and its help
does not call it a no-op) or refused when given: exit 1 and one line "ztrain: error: ..." that names
it. A name that is parsed and ignored fails the sweep, as does one that would be taken for a typo
("unknown flag; did you mean"). Flags taken only with one value (--label_smoothing_factor 0,
--dataloader_num_workers 0) are also given another value, which must be refused by name.
usage: hf_names.py path/to/ztrain
"""
import os
import re
import subprocess
import sys

ZTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# Taken with the value that asks for nothing; any other value is refused (apps/hf_compat.cpp).
ONLY_DEFAULT = {"label_smoothing_factor": "0.1", "dataloader_num_workers": "2"}
# Help texts that would describe a flag parsed and ignored.
NO_OP = re.compile(r"changes nothing|\bignored\b|no effect|accepted \(HF\)\s*$")


def hf_names():
    text = open(os.path.join(ROOT, "apps", "hf_training_args.h")).read()
    body = text[text.index("kHfTrainingArguments"):]
    return re.findall(r'"([A-Za-z0-9_]+)"', body)


def train_flags():
    """{name: help} from `ztrain train --help` (lines "  --name   help")."""
    out = subprocess.run([ZTRAIN, "train", "--help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for line in out.splitlines():
        m = re.match(r"  --(\S+)\s+(.*)$", line)
        if m:
            flags[m.group(1)] = m.group(2)
    return flags


def refused(name, value=None):
    """'' if `ztrain train --name [value]` is refused by name on one error line, else what went wrong."""
    args = [ZTRAIN, "train", f"--{name}"] + ([value] if value is not None else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "hung (the flag was not refused at parse time)"
    lines = p.stderr.strip().splitlines()
    if p.returncode != 1:
        return f"exit {p.returncode}: {p.stderr.strip()[:200]}"
    if len(lines) != 1 or not lines[0].startswith("ztrain: error:"):
        return f"not one error line: {p.stderr.strip()[:300]}"
    if f"--{name}" not in lines[0]:
        return f"the error does not name --{name}: {lines[0]}"
    if "unknown flag" in lines[0] or "did you mean" in lines[0]:
        return f"taken for a typo: {lines[0]}"
    return ""


def main():
    names = hf_names()
    flags = train_flags()
    docs = open(os.path.join(ROOT, "docs", "flags.md")).read() + open(os.path.join(ROOT, "README.md")).read()
    fails, honoured, refusals = [], 0, 0
    assert len(names) > 100, f"read only {len(names)} names from apps/hf_training_args.h"
    for n in names:
        if n in flags:
            honoured += 1
            if f"--{n}" not in docs:
                fails.append(f"--{n}: a flag of ztrain train, but neither docs/flags.md nor README.md describes it")
            if NO_OP.search(flags[n]):
                fails.append(f"--{n}: its help says it does nothing: {flags[n]}")
            if n in ONLY_DEFAULT and (why := refused(n, ONLY_DEFAULT[n])):
                fails.append(f"--{n} {ONLY_DEFAULT[n]}: {why}")
        else:
            refusals += 1
            if why := refused(n):
                fails.append(f"--{n}: {why}")
    for f in fails:
        print("FAIL:", f)
    print(f"hf_names: {len(names)} names, {honoured} flags of ztrain train, {refusals} refused by name, "
          f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
