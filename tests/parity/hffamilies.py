"""The families whose blocks differ from Llama's beyond its options, as transformers computes
them: OLMo-2 (Olmo2DecoderLayer) and Phi-3 (Phi3DecoderLayer: fused qkv_proj / gate_up_proj,
longrope). Kept apart from hfmodels.py (which builds them through
build_model) to keep each file readable; the shared pieces (rope, attention, MLP) come from it.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import hfmodels


class Olmo2RMSNorm(nn.Module):
    """transformers' RMSNorm: statistics in float32, the weight applied to the input's dtype."""

    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        dt = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


class Olmo2Attention(nn.Module):
    """Olmo2Attention: q_norm / k_norm over the whole q and k projections (not per head), before
    the heads are split and RoPE turns them."""

    def __init__(self, c):
        super().__init__()
        C, hs = c["hidden_size"], c["head_dim"]
        self.n_head, self.n_kv_head, self.hs = c["num_attention_heads"], c["num_key_value_heads"], hs
        bias = c["_qkv_bias"]
        self.q_proj = nn.Linear(C, self.n_head * hs, bias=bias)
        self.k_proj = nn.Linear(C, self.n_kv_head * hs, bias=bias)
        self.v_proj = nn.Linear(C, self.n_kv_head * hs, bias=bias)
        self.o_proj = nn.Linear(self.n_head * hs, C, bias=c["_o_bias"])
        self.q_norm = Olmo2RMSNorm(self.n_head * hs, c["rms_norm_eps"])
        self.k_norm = Olmo2RMSNorm(self.n_kv_head * hs, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x)).view(B, T, self.n_head, self.hs).transpose(1, 2)
        k = self.k_norm(self.k_proj(x)).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos + hfmodels.rotate_half(q) * sin
        k = k * cos + hfmodels.rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = hfmodels.causal_attention(q, k, v).transpose(1, 2).reshape(B, T, self.n_head * self.hs)
        return self.o_proj(y)


class Olmo2Layer(nn.Module):
    """Olmo2DecoderLayer: no norm before attention or the MLP; each output is normalized
    (post_attention_layernorm, post_feedforward_layernorm) before the residual add."""

    def __init__(self, c):
        super().__init__()
        C, eps = c["hidden_size"], c["rms_norm_eps"]
        self.self_attn = Olmo2Attention(c)
        self.mlp = hfmodels.LlamaMLP(C, c["intermediate_size"], False)
        self.post_attention_layernorm = Olmo2RMSNorm(C, eps)
        self.post_feedforward_layernorm = Olmo2RMSNorm(C, eps)

    def forward(self, x, cos, sin):
        x = x + self.post_attention_layernorm(self.self_attn(x, cos, sin))
        return x + self.post_feedforward_layernorm(self.mlp(x))


def longrope_inv_freq(c, seq_len):
    """_compute_longrope_parameters with the longrope_frequency_update choice: long_factor when
    the batch's largest position id + 1 (seq_len) passes original_max_position_embeddings."""
    rs, dim, base = c["rope_scaling"], c["head_dim"], c["rope_theta"]
    orig = c.get("original_max_position_embeddings")
    if orig:
        factor = c["max_position_embeddings"] / orig
    else:
        orig, factor = c["max_position_embeddings"], rs["factor"]
    att = rs.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = torch.tensor(rs["long_factor"] if seq_len and seq_len > orig else rs["short_factor"], dtype=torch.float32)
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext * base ** shape), att


class Phi3Attention(nn.Module):
    """Phi3Attention: q, k and v from one qkv_proj (stacked in that order)."""

    def __init__(self, c):
        super().__init__()
        C, hs = c["hidden_size"], c["head_dim"]
        self.n_head, self.n_kv_head, self.hs, self.window = c["num_attention_heads"], c["num_key_value_heads"], hs, \
            c["_window"]
        self.o_proj = nn.Linear(self.n_head * hs, C, bias=False)
        self.qkv_proj = nn.Linear(C, (self.n_head + 2 * self.n_kv_head) * hs, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qkv = self.qkv_proj(x)
        qp, kp = self.n_head * self.hs, self.n_kv_head * self.hs
        q = qkv[..., :qp].reshape(B, T, self.n_head, self.hs).transpose(1, 2)
        k = qkv[..., qp:qp + kp].reshape(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        v = qkv[..., qp + kp:].reshape(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos + hfmodels.rotate_half(q) * sin
        k = k * cos + hfmodels.rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        window = self.window if 0 < self.window < T else 0
        y = hfmodels.causal_attention(q, k, v, window).transpose(1, 2).reshape(B, T, self.n_head * self.hs)
        return self.o_proj(y)


class Phi3MLP(nn.Module):
    """Phi3MLP: gate and up from one gate_up_proj (gate first)."""

    def __init__(self, C, F_):
        super().__init__()
        self.gate_up_proj = nn.Linear(C, 2 * F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * F.silu(gate))


class Phi3Layer(nn.Module):
    """Phi3DecoderLayer: Llama's pre-norm block over the fused projections."""

    def __init__(self, c):
        super().__init__()
        C, eps = c["hidden_size"], c["rms_norm_eps"]
        self.self_attn = Phi3Attention(c)
        self.mlp = Phi3MLP(C, c["intermediate_size"])
        self.input_layernorm = Olmo2RMSNorm(C, eps)
        self.post_attention_layernorm = Olmo2RMSNorm(C, eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


# model_type -> (layer class, final norm class) for hfmodels.Llama.
LAYERS = {"olmo2": (Olmo2Layer, Olmo2RMSNorm), "phi3": (Phi3Layer, Olmo2RMSNorm)}
