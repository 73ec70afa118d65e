"""Test vectors for ztrain's NF4 kernels (src/kernels/nf4.cpp), computed by a transcription of
bitsandbytes' 4-bit quantization (functional.py quantize_4bit / dequantize_4bit with
quant_type='nf4', compress_statistics=True for double quantization, and its CUDA kernels
kQuantizeBlockwise / kDequantizeBlockwise: dQuantizeNF4's decision tree, dQuantize<0>'s search
of the 8-bit dynamic map) in numpy float32, one IEEE operation at a time as the kernels do them.

Prints the constants and vectors that tests/test_nf4.cpp holds. Run: python3 tests/kernels/nf4_vectors.py
"""
import os
import sys
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))
import dynamic_map  # noqa: E402  (bitsandbytes' create_dynamic_map, as the 8-bit optimizers use it)

f32 = np.float32

# get_4bit_type('nf4') (functional.py) = csrc/kernels.cu's nf4_dequantization_lut.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=f32)



def f32_literal(text):
    """A C/CUDA float literal `text`f: the decimal rounded once, to the nearest float32 (ties to
    even). np.float32(float(text)) rounds twice (to double, then to float) and gets 4 of
    dQuantizeNF4's 15 constants wrong: their doubles are exact ties between two floats."""
    x = Fraction(text)
    f = f32(float(x))
    cands = [np.nextafter(f, f32(-np.inf)), f, np.nextafter(f, f32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(c.view(np.uint32)) & 1))


# dQuantizeNF4's constants, as the kernel's source spells them (float literals).
T = {k: f32_literal(v) for k, v in {
    "0": "0.03979014977812767", "1": "0.3893125355243683", "11": "0.6427869200706482",
    "111": "0.8614784181118011", "110": "0.5016634166240692", "10": "0.2035212516784668",
    "101": "0.2920137718319893", "100": "0.1202552504837513", "-0": "-0.33967943489551544",
    "01": "-0.13791173323988914", "011": "-0.045525018125772476", "010": "-0.23460740596055984",
    "00": "-0.6106329262256622", "001": "-0.4599952697753906", "000": "-0.8480964004993439"}.items()}


def dquantize_nf4(x):
    """csrc/kernels.cu dQuantizeNF4, branch for branch (a NaN fails every test: code 0)."""
    if x > T["0"]:
        if x > T["1"]:
            if x > T["11"]:
                return 0b1111 if x > T["111"] else 0b1110
            return 0b1101 if x > T["110"] else 0b1100
        if x > T["10"]:
            return 0b1011 if x > T["101"] else 0b1010
        return 0b1001 if x > T["100"] else 0b1000
    if x > T["-0"]:
        if x > T["01"]:
            return 0b0111 if x > T["011"] else 0b0110
        return 0b0101 if x > T["010"] else 0b0100
    if x > T["00"]:
        return 0b0011 if x > T["001"] else 0b0010
    return 0b0001 if x > T["000"] else 0b0000


def thresholds_sorted():
    return sorted(T.values())


def dquantize8(code, x):
    """csrc/kernels.cu dQuantize<0> (no stochastic rounding): the binary search of the sorted
    256-entry map from pivot 127, then the nearer of the last pivot and its bracket by the
    float32 midpoint."""
    pivot, upper_pivot, lower_pivot = 127, 255, 0
    lower, upper = f32(-1.0), f32(1.0)
    val = code[pivot]
    i = 64
    while i > 0:
        if x > val:
            lower_pivot, lower = pivot, val
            pivot += i
        else:
            upper_pivot, upper = pivot, val
            pivot -= i
        val = code[pivot]
        i >>= 1
    if upper_pivot == 255:
        upper = code[upper_pivot]
    if lower_pivot == 0:
        lower = code[lower_pivot]
    if x > val:
        return upper_pivot if x > (upper + val) * f32(0.5) else pivot
    return lower_pivot if x < (lower + val) * f32(0.5) else pivot


def blocks(n, bs):
    return [(b * bs, min(n, (b + 1) * bs)) for b in range((n + bs - 1) // bs)]


def recip(a):
    with np.errstate(divide="ignore"):
        return f32(1.0) / a  # 1/0 = inf, as on the GPU


def quantize_4bit(A, bs):
    """kQuantizeBlockwise<NF4>: absmax per block, scale by its float32 reciprocal, two codes a
    byte (first in the high nibble); an odd tail pads with 0 (scaled: code 7, or 0 when the
    block's absmax is 0 and 0 * inf is NaN)."""
    absmax, codes = [], []
    with np.errstate(invalid="ignore"):
        for lo, hi in blocks(len(A), bs):
            am = f32(np.max(np.abs(A[lo:hi])))
            r = recip(am)
            absmax.append(am)
            codes += [dquantize_nf4(f32(v) * r) for v in A[lo:hi]]
            if (hi - lo) % 2:
                codes.append(dquantize_nf4(f32(0.0) * r))
    packed = [(codes[2 * i] << 4) | codes[2 * i + 1] for i in range(len(codes) // 2)]
    return np.array(packed, dtype=np.uint8), np.array(absmax, dtype=f32)


def quantize_blockwise8(A, bs, code):
    """kQuantizeBlockwise<General8bit>: absmax per block, dQuantize<0> of x * (1 / absmax)."""
    absmax, q = [], []
    with np.errstate(invalid="ignore"):
        for lo, hi in blocks(len(A), bs):
            am = f32(np.max(np.abs(A[lo:hi])))
            r = recip(am)
            absmax.append(am)
            q += [dquantize8(code, f32(v) * r) for v in A[lo:hi]]
    return np.array(q, dtype=np.uint8), np.array(absmax, dtype=f32)


def double_quant(absmax, code):
    """quantize_4bit(compress_statistics=True): offset = absmax.mean(), then
    quantize_blockwise(absmax - offset, blocksize=256). The mean here is the float64 sum rounded
    once to float32 (torch's float32 reduction may differ from it in the last bit)."""
    offset = f32(np.mean(absmax.astype(np.float64)))
    q, scale = quantize_blockwise8((absmax - offset).astype(f32), 256, code)
    return q, scale, offset


def dequant_absmax(q, scale, offset, code):
    """dequantize_blockwise (code[q] * absmax, float32), then `absmax += offset`."""
    out = np.array([code[c] * scale[i // 256] for i, c in enumerate(q)], dtype=f32)
    return (out + offset).astype(f32)


def dequantize_4bit(packed, absmax, n, bs):
    c = np.empty(2 * len(packed), dtype=np.int64)
    c[0::2], c[1::2] = packed >> 4, packed & 15
    out = NF4[c[:n]] * np.repeat(absmax, bs)[:n]
    return out.astype(f32)


def gen(n, seed, bs=64, zero_block=-1):
    """The inputs the C++ test generates too (exact in float32): a sum of four 14-bit LCG draws,
    centred (roughly normal), times a per-block power-of-two-ish scale; block `zero_block` all 0."""
    s = seed
    out = np.empty(n, dtype=f32)
    for i in range(n):
        acc = 0
        for _ in range(4):
            s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
            acc += s >> 18
        b = i // bs
        scale = f32((8 + b % 9) / 8.0 * 2.0 ** -(15 + b % 6))
        out[i] = f32(0.0) if b == zero_block else f32(acc - 2 * 16383) * scale
    return out


def probes():
    """Block 0 of the small vector: absmax exactly 1, every threshold and its float neighbours."""
    v = [1.0, -1.0]
    for t in thresholds_sorted():
        v += [t, np.nextafter(t, f32(np.inf)), np.nextafter(t, f32(-np.inf))]
    v += [0.0, -0.0]
    return np.array(v, dtype=f32)


def fnv(data):
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def hexf(x):
    return float.hex(float(x)) + "f"


def report(name, A, bs, nested, code8):
    packed, absmax = quantize_4bit(A, bs)
    print(f"// {name}: n = {len(A)}, blocksize {bs}, double quant {nested}")
    print(f"//   input fnv {fnv(A.tobytes()):#018x}")
    print(f"//   codes ({len(packed)} bytes) fnv {fnv(packed.tobytes()):#018x}")
    if nested:
        q, scale, offset = double_quant(absmax, code8)
        absmax = dequant_absmax(q, scale, offset, code8)
        print(f"//   qabsmax ({len(q)}) fnv {fnv(q.tobytes()):#018x}; offset {hexf(offset)}; "
              f"scales {', '.join(hexf(s) for s in scale)}")
    print(f"//   absmax (decoded) fnv {fnv(absmax.tobytes()):#018x}")
    out = dequantize_4bit(packed, absmax, len(A), bs)
    print(f"//   dequantized fnv {fnv(out.tobytes()):#018x}")
    return packed, absmax


def main():
    code8 = np.array(dynamic_map.dynamic_map(True), dtype=f32)
    nf4_mid = [f32((NF4[i] + NF4[i + 1]) / f32(2)) for i in range(15)]
    differ = [i for i, (a, b) in enumerate(zip(nf4_mid, thresholds_sorted())) if a != b]
    one_ulp = all(np.nextafter(nf4_mid[i], thresholds_sorted()[i]) == thresholds_sorted()[i] for i in differ)
    print(f"// dQuantizeNF4's thresholds differ from the float32 midpoints of the table at {differ}"
          f"{' by one ulp each' if one_ulp else ' by MORE than one ulp'}")
    print("// thresholds: " + ", ".join(hexf(t) for t in thresholds_sorted()))
    tree_is_count = all(dquantize_nf4(x) == sum(x > t for t in thresholds_sorted())
                        for x in np.linspace(-1.2, 1.2, 20001, dtype=f32).tolist() + probes().tolist())
    print(f"// dQuantizeNF4 == number of thresholds below x: {tree_is_count}")

    # The small vector: block 0 the probes, then generated values, an odd tail.
    A = gen(203, 7)
    p = probes()
    A[:len(p)] = p
    packed, absmax = report("small", A, 64, False, code8)
    print("// codes: " + packed.tobytes().hex())
    print("// absmax: " + ", ".join(hexf(a) for a in absmax))

    report("nested", gen(64 * 300 + 37, 11, zero_block=5), 64, True, code8)
    report("bs128", gen(128 * 20 + 1, 3, bs=128), 128, False, code8)
    report("nested_bs32", gen(32 * 600, 5, bs=32, zero_block=2), 32, True, code8)

    # dQuantize<0> on every midpoint of the dynamic map and its neighbours.
    xs = []
    for i in range(255):
        m = (code8[i] + code8[i + 1]) * f32(0.5)
        xs += [m, np.nextafter(m, f32(np.inf)), np.nextafter(m, f32(-np.inf))]
    xs += [f32(-1.0), f32(1.0), f32(0.0), f32(-1.5), f32(1.5)]
    q = np.array([dquantize8(code8, f32(x)) for x in xs], dtype=np.uint8)
    nearest_low = np.array([int(np.argmin(np.abs(code8.astype(np.float64) - float(x)))) for x in xs])
    print(f"// dQuantize<0> on {len(xs)} midpoint probes: codes fnv {fnv(q.tobytes()):#018x}, "
          f"{int(np.sum(q != nearest_low))} differ from nearest-ties-to-lower")
    return 0 if one_ulp and tree_is_count else 1


if __name__ == "__main__":
    sys.exit(main())
