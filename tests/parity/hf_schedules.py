#!/usr/bin/env python3
"""The expected LR multipliers of tests/test_schedule.cpp, from HF's formulas.

A transcription of the lr_lambda functions of transformers/optimization.py (commit 005edacb6b5d:
cosine, cosine_with_min_lr, warmup_stable_decay, cosine_with_restarts, polynomial, inverse_sqrt) in plain Python floats, since transformers is not
installed here. LambdaLR gives optimizer step s (0-based) the LR base_lr * lambda(s).
Run it to regenerate the tables: python3 tests/parity/hf_schedules.py
"""
import math


def cosine(s, w, total, num_cycles=0.5, min_lr_rate=0.0):
    # get_cosine_schedule_with_warmup / get_cosine_with_min_lr_schedule_with_warmup
    if s < w:
        return float(s) / float(max(1, w))
    progress = float(s - w) / float(max(1, total - w))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def wsd(s, w, stable, decay, warmup_type="linear", decay_type="cosine", min_lr_ratio=0.0, num_cycles=0.5):
    # get_wsd_schedule
    if s < w:
        progress = float(s) / float(max(1, w))
        if warmup_type == "linear":
            factor = progress
        elif warmup_type == "cosine":
            factor = 0.5 * (1.0 - math.cos(math.pi * progress))
        else:  # 1-sqrt
            factor = 1.0 - math.sqrt(1.0 - progress)
        factor = factor * (1.0 - min_lr_ratio) + min_lr_ratio
        return max(0.0, factor)
    if s < w + stable:
        return 1.0
    if s < w + stable + decay:
        progress = float(s - w - stable) / float(max(1, decay))
        if decay_type == "linear":
            factor = 1.0 - progress
        elif decay_type == "cosine":
            factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
        else:  # 1-sqrt
            factor = 1.0 - math.sqrt(progress)
        factor = factor * (1.0 - min_lr_ratio) + min_lr_ratio
        return max(0.0, factor)
    return min_lr_ratio


def warmup(s, w):
    return float(s) / float(max(1, w))


def restarts(s, w, total, num_cycles=1):
    # get_cosine_with_hard_restarts_schedule_with_warmup
    if s < w:
        return warmup(s, w)
    progress = float(s - w) / float(max(1, total - w))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def polynomial(s, w, total, lr_init, lr_end=1e-7, power=1.0):
    # get_polynomial_decay_schedule_with_warmup: an absolute LR divided by lr_init
    if s < w:
        return warmup(s, w)
    if s > total:
        return lr_end / lr_init
    pct_remaining = 1 - (s - w) / (total - w)
    return ((lr_init - lr_end) * pct_remaining**power + lr_end) / lr_init


def inverse_sqrt(s, w, timescale=None):
    # get_inverse_sqrt_schedule (timescale None: the warmup, or 10_000 without one)
    if timescale is None:
        timescale = w or 10_000
    if s < w:
        return warmup(s, w)
    return 1.0 / math.sqrt((s + timescale - w) / timescale)


def table(name, values):
    print(f"const double {name}[] = {{" + ", ".join(repr(float(v)) for v in values) + "};")


if __name__ == "__main__":
    table("kCosineMinLr", [cosine(s, 3, 13, 0.5, 0.1) for s in range(16)])
    table("kCosineFullWave", [cosine(s, 2, 10, 1.0) for s in range(12)])
    for wt in ("linear", "cosine", "1-sqrt"):
        for dt in ("linear", "cosine", "1-sqrt"):
            n = "kWsd_" + wt.replace("1-sqrt", "sqrt") + "_" + dt.replace("1-sqrt", "sqrt")
            table(n, [wsd(s, 4, 3, 5, wt, dt, 0.2) for s in range(14)])
    # num_stable_steps absent: total 20 - warmup 4 - decay 6 = 10.
    table("kWsdDerived", [wsd(s, 4, 20 - 4 - 6, 6) for s in range(22)])
    # cosine decay with num_cycles 1 (down and up again), no warmup.
    table("kRestarts1", [restarts(s, 2, 12) for s in range(14)])
    table("kRestarts3", [restarts(s, 0, 12, 3) for s in range(14)])
    table("kRestartsHalf", [restarts(s, 1, 9, 1.5) for s in range(11)])
    table("kPolyDefault", [polynomial(s, 2, 10, 1.0) for s in range(13)])
    table("kPolySquare", [polynomial(s, 3, 11, 2e-3, 1e-4, 2.0) for s in range(13)])
    table("kInvSqrtWarmup", [inverse_sqrt(s, 4) for s in range(12)])
    table("kInvSqrtTimescale", [inverse_sqrt(s, 3, 7) for s in range(12)])
    table("kInvSqrtNoWarmup", [inverse_sqrt(s, 0) for s in (0, 1, 100, 10000, 30000)])
    table("kWsdCycles", [wsd(s, 0, 2, 8, "linear", "cosine", 0.0, 1.0) for s in range(12)])
