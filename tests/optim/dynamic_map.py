"""bitsandbytes' dynamic 8-bit quantization maps (create_dynamic_map(signed) with its defaults:
max_exponent_bits=7, total_bits=8), computed the way its functional.py does in PyTorch float32.
Prints them as C++ hex-float tables (--cpp) or checks ztrain's (--check FILE: the table header)."""
import re
import sys

import torch


def dynamic_map(signed):
    data = []
    non_sign_bits, max_exp = 7, 7
    for i in range(max_exp):
        n = int(2 ** (i + non_sign_bits - max_exp) + 1 if signed else 2 ** (i + non_sign_bits - max_exp + 1) + 1)
        edges = torch.linspace(0.1, 1, n, dtype=torch.float32)
        mid = (edges[:-1] + edges[1:]) / 2.0
        data += ((10 ** (-(max_exp - 1) + i)) * mid).tolist()
        if signed:
            data += (-(10 ** (-(max_exp - 1) + i)) * mid).tolist()
    data += [0, 1.0]
    assert len(data) == 256
    data.sort()
    return torch.tensor(data, dtype=torch.float32).tolist()


def main():
    tables = {"kDynamicSigned": dynamic_map(True), "kDynamicUnsigned": dynamic_map(False)}
    if sys.argv[1:2] == ["--cpp"]:
        for name, t in tables.items():
            print(f"constexpr float {name}[256] = {{")
            for i in range(0, 256, 4):
                print("    " + ", ".join(float.hex(v) + "f" for v in t[i:i + 4]) + ",")
            print("};")
        return 0
    text = open(sys.argv[2]).read()
    bad = 0
    for name, t in tables.items():
        body = re.search(name + r"\[256\] = \{(.*?)\};", text, re.S).group(1)
        got = [float.fromhex(x.strip().rstrip("f")) for x in body.split(",") if x.strip()]
        ok = got == t
        bad += not ok
        print(f"{name}: {'equal to bitsandbytes create_dynamic_map' if ok else 'DIFFERS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
