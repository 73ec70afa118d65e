#!/usr/bin/env python3
"""shape.py: the size limits of src/ (issue 27, docs/architecture.md): no file over 700 lines and no
function over 80 lines (signature to closing brace). CUDA kernels (.cu) are listed, not failed:
they change only with a GPU run to check them. src/train/ stays under 2,500 lines.

A function is found the simple way the code is written (clang-format, one definition per block):
a line at indent 0 or 2 that opens a parameter list, not a control statement, whose block opens
with a line ending in '{' and closes at the same indent.
usage: shape.py path/to/src
"""
import os
import re
import sys

MAX_FILE, MAX_FUNCTION, MAX_TRAIN = 700, 80, 2500
START = re.compile(r"^(\s{0,2})[A-Za-z_][\w:<>,\s\*&~]*\(")
NOT_FUNCTION = ("if", "for", "while", "switch", "return", "}", "//", "namespace", "class", "struct", "else", "#")


def long_functions(lines):
    i = 0
    while i < len(lines):
        m = START.match(lines[i])
        if m and not lines[i].strip().startswith(NOT_FUNCTION):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith("{") and ";" not in lines[j]:
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{") and ";" not in lines[j]:
                close = re.compile("^" + m.group(1) + r"\}")
                k = j + 1
                while k < len(lines) and not close.match(lines[k]):
                    k += 1
                if k - i + 1 > MAX_FUNCTION:
                    yield i + 1, k - i + 1, lines[i].strip()[:60]
                i = k
        i += 1


def main():
    src = sys.argv[1]
    problems, train_lines = [], 0
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".cpp", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            lines = open(path, errors="replace").read().split("\n")
            n = len(lines) - (lines[-1] == "")
            if os.path.basename(root) == "train":
                train_lines += n
            if n > MAX_FILE:
                problems.append(f"{path}: {n} lines (over {MAX_FILE})")
            for line, length, what in long_functions(lines):
                msg = f"{path}:{line}: a function of {length} lines (over {MAX_FUNCTION}): {what}"
                if name.endswith((".cu", ".cuh")):
                    print("note (CUDA, not failed):", msg)
                else:
                    problems.append(msg)
    if train_lines >= MAX_TRAIN:
        problems.append(f"{src}/train: {train_lines} lines (the limit is under {MAX_TRAIN})")
    for p in problems:
        print("FAIL:", p)
    print(f"src/train {train_lines} lines; " + ("1 passed, 0 failed" if not problems else "0 passed, 1 failed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
