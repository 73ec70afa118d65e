"""Reference optimizers for the parity oracle (torch_train.py --optim), written from each one's
definition: torch.optim for AdamW and SGD; Hugging Face's Adafactor; bitsandbytes' 8-bit
blockwise AdamW (its pure-PyTorch reference path: dequantize, update in fp32, requantize to the
nearest code of the dynamic map, blocks of 256, tensors under 4,096 elements in fp32); Lion
(bitsandbytes' / the paper's rule); SophiaG (Liuhong99/Sophia's sophia.py, with the
sampled-label curvature pass of its training script); Muon (torch.optim.Muon's arithmetic with
Moonlight's match_rms_adamw scaling, AdamW for everything but hidden matrices).

Every optimizer takes HF-style parameter groups: tensors of rank >= 2 decay, the rest do not.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "optim"))
import dynamic_map  # noqa: E402  (bitsandbytes' maps, as tests/optim/dynamic_map.py computes them)


def _groups(model, wd):
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for _, p in model.named_parameters() if p.dim() < 2]
    return [(decay, wd), (rest, 0.0)]


class Base:
    def __init__(self, model, a):
        self.model, self.a, self.t = model, a, 0
        self.groups = _groups(model, a.weight_decay)
        self.state = {}

    def params(self):
        for ps, wd in self.groups:
            for p in ps:
                yield p, wd

    def zero_grad(self, set_to_none=True):
        for p, _ in self.params():
            p.grad = None


class AdamW(Base):
    def __init__(self, model, a):
        super().__init__(model, a)
        self.opt = torch.optim.AdamW([{"params": ps, "weight_decay": wd} for ps, wd in self.groups],
                                     lr=a.learning_rate, betas=(a.adam_beta1, a.adam_beta2), eps=a.adam_epsilon)

    def step(self, lr):
        self.opt.step()


class Sgd(Base):
    def __init__(self, model, a, momentum=0.0, dampening=0.0, nesterov=False):
        super().__init__(model, a)
        self.opt = torch.optim.SGD([{"params": ps, "weight_decay": wd} for ps, wd in self.groups],
                                   lr=a.learning_rate, momentum=momentum, dampening=dampening, nesterov=nesterov)

    def step(self, lr):
        self.opt.step()


class Lion(Base):
    @torch.no_grad()
    def step(self, lr):
        b1, b2 = self.a.adam_beta1, self.a.adam_beta2
        for p, wd in self.params():
            m = self.state.setdefault(p, torch.zeros_like(p))
            p.mul_(1 - lr * wd)
            p.add_(torch.sign(m * b1 + p.grad * (1 - b1)), alpha=-lr)
            m.mul_(b2).add_(p.grad, alpha=1 - b2)


class Adafactor(Base):
    """transformers.optimization.Adafactor with HF Trainer's scale_parameter=False, relative_step=False
    unless optim_args say otherwise."""

    def __init__(self, model, a, scale_parameter=False, relative_step=False, warmup_init=False, beta1=None,
                 clip_threshold=1.0, decay_rate=-0.8, eps1=1e-30, eps2=1e-3):
        super().__init__(model, a)
        self.c = dict(scale_parameter=scale_parameter, relative_step=relative_step, warmup_init=warmup_init,
                      beta1=beta1, clip_threshold=clip_threshold, decay_rate=decay_rate, eps=(eps1, eps2))

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @torch.no_grad()
    def step(self, lr):
        c = self.c
        self.t += 1
        for p, wd in self.params():
            g = p.grad
            st = self.state.setdefault(p, {})
            factored = g.dim() >= 2
            if not st:
                if factored:
                    st["row"] = torch.zeros(g.shape[:-1])
                    st["col"] = torch.zeros(g.shape[:-2] + g.shape[-1:])
                else:
                    st["sq"] = torch.zeros_like(g)
                if c["beta1"] is not None:
                    st["m"] = torch.zeros_like(g)
            rms = self._rms(p)
            rel = lr
            if c["relative_step"]:
                rel = min(1e-6 * self.t if c["warmup_init"] else 1e-2, 1.0 / math.sqrt(self.t))
            step = (max(c["eps"][1], rms) if c["scale_parameter"] else 1.0) * rel
            beta2t = 1.0 - math.pow(self.t, c["decay_rate"])
            upd = g ** 2 + c["eps"][0]
            if factored:
                st["row"].mul_(beta2t).add_(upd.mean(dim=-1), alpha=1.0 - beta2t)
                st["col"].mul_(beta2t).add_(upd.mean(dim=-2), alpha=1.0 - beta2t)
                r = (st["row"] / st["row"].mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                upd = torch.mul(r, st["col"].unsqueeze(-2).rsqrt()) * g
            else:
                st["sq"].mul_(beta2t).add_(upd, alpha=1.0 - beta2t)
                upd = st["sq"].rsqrt() * g
            upd.div_((self._rms(upd) / c["clip_threshold"]).clamp_(min=1.0))
            upd.mul_(step)
            if c["beta1"] is not None:
                st["m"].mul_(c["beta1"]).add_(upd, alpha=1 - c["beta1"])
                upd = st["m"]
            if wd != 0:
                p.add_(p, alpha=-wd * step)
            p.add_(-upd)


class AdamW8bit(Base):
    """bitsandbytes' AdamW8bit through its pure-PyTorch blockwise reference algorithm."""
    BLOCK, MIN_SIZE = 256, 4096

    def __init__(self, model, a):
        super().__init__(model, a)
        self.signed = torch.tensor(dynamic_map.dynamic_map(True))
        self.unsigned = torch.tensor(dynamic_map.dynamic_map(False))

    def _quant(self, x, code):
        n = x.numel()
        nb = (n + self.BLOCK - 1) // self.BLOCK
        flat = torch.nn.functional.pad(x.flatten(), (0, nb * self.BLOCK - n)).reshape(nb, self.BLOCK)
        absmax = flat.abs().max(dim=1, keepdim=True)[0]
        absmax[absmax == 0] = 1.0
        idx = torch.argmin((flat / absmax).unsqueeze(2).sub(code).abs(), dim=2)
        return (code[idx] * absmax).flatten()[:n].reshape(x.shape)

    @torch.no_grad()
    def step(self, lr):
        a = self.a
        self.t += 1
        b1, b2 = a.adam_beta1, a.adam_beta2
        for p, wd in self.params():
            st = self.state.setdefault(p, [torch.zeros_like(p), torch.zeros_like(p)])
            m, v = st
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** self.t)).add_(a.adam_epsilon)
            p.mul_(1 - lr * wd)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** self.t))
            if p.numel() >= self.MIN_SIZE:  # the moments live quantized between steps
                st[0] = self._quant(m, self.signed)
                st[1] = self._quant(v, self.unsigned)


class Sophia(Base):
    def __init__(self, model, a, rho=0.04, hessian_interval=10):
        super().__init__(model, a)
        self.rho, self.interval = rho, int(hessian_interval)

    @torch.no_grad()
    def step(self, lr, bs):
        b1 = self.a.adam_beta1
        for p, wd in self.params():
            m, _ = self.state.setdefault(p, [torch.zeros_like(p), torch.zeros_like(p)])
            h = self.state[p][1]
            p.mul_(1 - lr * wd)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            ratio = (m.abs() / (self.rho * bs * h + 1e-15)).clamp(None, 1)
            p.addcmul_(m.sign(), ratio, value=-lr)

    @torch.no_grad()
    def update_hessian(self):
        b2 = self.a.adam_beta2
        for p, _ in self.params():
            self.state.setdefault(p, [torch.zeros_like(p), torch.zeros_like(p)])[1].mul_(b2).addcmul_(
                p.grad, p.grad, value=1 - b2)


class Muon(Base):
    def __init__(self, model, a, momentum=0.95, nesterov=True, ns_steps=5, adjust_lr_fn="match_rms_adamw",
                 ns_dtype="fp32"):
        super().__init__(model, a)
        self.mu, self.nesterov, self.ns_steps, self.fn = float(momentum), nesterov, int(ns_steps), adjust_lr_fn
        hidden_names = ("layers.", "transformer.h.")
        self.hidden = {p for n, p in model.named_parameters() if p.dim() == 2 and any(h in n for h in hidden_names)}

    def _ns(self, g):
        a, b, c = 3.4445, -4.7750, 2.0315
        x = g.clone()
        tall = x.size(0) > x.size(1)
        if tall:
            x = x.T
        x = x / x.norm().clamp(min=1e-7)
        for _ in range(self.ns_steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        return x.T if tall else x

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        a = self.a
        for p, wd in self.params():
            g = p.grad
            if p in self.hidden:
                buf = self.state.setdefault(p, torch.zeros_like(p))
                buf.lerp_(g, 1 - self.mu)
                upd = g.lerp(buf, self.mu) if self.nesterov else buf
                o = self._ns(upd)
                A, B = p.shape
                scale = 0.2 * math.sqrt(max(A, B)) if self.fn == "match_rms_adamw" else math.sqrt(max(1, A / B))
                p.mul_(1 - lr * wd)
                p.add_(o, alpha=-lr * scale)
                continue
            m, v = self.state.setdefault(p, [torch.zeros_like(p), torch.zeros_like(p)])
            b1, b2 = a.adam_beta1, a.adam_beta2
            p.mul_(1 - lr * wd)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(1 - b2 ** self.t)).add_(a.adam_epsilon)
            p.addcdiv_(m, denom, value=-lr / (1 - b1 ** self.t))


def _value(text):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(text)
    except ValueError:
        return text


def make(name, model, a):
    """The reference for ztrain's --optim name with its --optim_args."""
    kw = {}
    for item in filter(None, (s.strip() for s in (a.optim_args or "").split(","))):
        k, v = item.split("=", 1)
        kw[k.strip()] = _value(v.strip())
    table = {"adamw_torch": AdamW, "adamw": AdamW, "sgd": Sgd, "lion_32bit": Lion, "lion": Lion,
             "adafactor": Adafactor, "adamw_8bit": AdamW8bit, "adamw_bnb_8bit": AdamW8bit, "sophia": Sophia,
             "sophiag": Sophia, "muon": Muon}
    return table[name](model, a, **kw)


MASK = (1 << 64) - 1


def _splitmix(x):
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & MASK
    return x ^ (x >> 31)


def sampled_labels(logits, data_seed, step, rank, micro):
    """The labels ztrain's Sophia pass draws (kernels/cross_entropy.cpp sample_label): for the
    micro-th LM head pass (from 1) of the pass at `step`, row r draws the first label whose running
    softmax sum passes u * sum, u from splitmix64 of (pass seed + r * golden)."""
    seed = ((((data_seed * 1000003 + step) & MASK) << 20) + rank + 1) & MASK
    pass_seed = seed ^ ((micro * 0xD1B54A32D192ED03) & MASK)
    z = logits.reshape(-1, logits.size(-1)).double()
    p = torch.exp(z - z.max(dim=1, keepdim=True)[0])
    cum = torch.cumsum(p, dim=1)
    out = []
    for r in range(z.size(0)):
        u = (_splitmix((pass_seed + r * 0x9E3779B97F4A7C15) & MASK) >> 11) * 2.0 ** -53
        out.append(int(torch.searchsorted(cum[r], u * float(cum[r, -1]), right=True)))
    return torch.tensor(out).reshape(logits.shape[:-1])
