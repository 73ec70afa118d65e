#!/usr/bin/env python3
"""doc_flags.py ZTRAIN: every `--flag` README.md and docs/*.md name exists (issue 22 item 6).

A flag in the docs is one of:
  - a flag of some ztrain command: the union of `ztrain <command> --help` over the commands that
    `ztrain --help` lists (so a command missing from that list fails here too);
  - a Hugging Face TrainingArguments name that ztrain refuses by name (apps/hf_training_args.h):
    docs/flags.md describes those refusals;
  - a flag of one of the repository's own scripts (bench/, scripts/), checked against the script's
    source, or of an outside tool (mpirun, TensorBoard, CMake, ...), listed below with the tool.
Anything else is a doc claim the code does not back: the test names the file, line and flag.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?<![\w-])--([A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9])")

# Flags of the repository's scripts: each must appear in that script's source.
SCRIPT_FLAGS = {
    "calibrate": "bench/bench_planner.sh",
    "kills": "bench/chaos.py",
    "ranks": "bench/chaos.py",
    "flash": "bench/chaos.py",
    "signals": "bench/preempt.py",
    "gap": "bench/startup_after_pressure.sh",
    "precisions": "bench/bench_recipes.py",
    "timing": "bench/bench_optimizers.py",
    "recompute": "bench/bench_recipes.py",
    "steps": "bench/bench_pipeline.sh",
    "tag": "scripts/tb_check.py",
    "jobs": "tests/parity/run_parity.py",
    "only": "tests/before_after/compare.py",
    "tol": "tests/before_after/compare.py",
    "repeats": "bench/before_after_speed.py",
}
# Flags of tools outside the repository, and notation that is not a flag.
OUTSIDE = {
    "map-by": "mpirun",
    "logdir": "tensorboard",
    "build": "cmake",
    "target": "cmake",
    "install": "cmake",
    "gtest_filter": "GoogleTest",
    "output_format": "spm_encode (Debian's sentencepiece)",
    "exit-signal-handler": "Megatron-LM (the signal it reacts to)",
    "exit": "an arrow label in docs/fault-tolerance.md's state diagram",
    "fewer": "an arrow label in docs/fault-tolerance.md's state diagram",
    "fails": "an arrow label in docs/fault-tolerance.md's state diagram",
    "no": "an arrow label in docs/fault-tolerance.md's state diagram",
    "name": "README's notation for any flag",
}


def commands(ztrain):
    text = subprocess.run([ztrain, "--help"], capture_output=True, text=True).stdout
    block = text.split("commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", block, re.M) if m.group(1) != "help"]


def ztrain_flags(ztrain):
    flags = set()
    for cmd in commands(ztrain):
        r = subprocess.run([ztrain, cmd, "--help"], capture_output=True, text=True)
        flags |= {m.group(1) for m in FLAG.finditer(r.stdout + r.stderr)}
    header = (ROOT / "apps/hf_training_args.h").read_text()
    body = header.split("kHfTrainingArguments[]", 1)[1].split("};", 1)[0]
    flags |= set(re.findall(r'"([a-z0-9_]+)"', body))
    return flags | {"help", "version"}  # every command's --help; `ztrain --version`


def main():
    known = ztrain_flags(sys.argv[1])
    bad = []
    for flag, script in SCRIPT_FLAGS.items():
        src = ROOT / script
        if not src.exists() or f"--{flag}" not in src.read_text() and f'"{flag}"' not in src.read_text():
            bad.append(f"{script}: has no --{flag}, which this check says it has")
    docs = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    checked = 0
    for doc in docs:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in FLAG.finditer(line):
                flag = m.group(1)
                checked += 1
                if flag not in known and flag not in SCRIPT_FLAGS and flag not in OUTSIDE:
                    bad.append(f"{doc.relative_to(ROOT)}:{n}: --{flag} is no flag of any ztrain command")
    for b in bad:
        print("doc_flags:", b)
    print(f"doc_flags: {checked} flag mentions in {len(docs)} pages, {len(known)} names known, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
