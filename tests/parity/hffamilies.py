"""The families whose blocks differ from Llama's beyond its options, as transformers computes
them: OLMo-2 (Olmo2DecoderLayer), Phi-3 (Phi3DecoderLayer: fused qkv_proj / gate_up_proj,
longrope), Gemma 2 and Gemma 3's text model (Gemma2ForCausalLM, Gemma3ForCausalLM: one model class
below). Kept apart from hfmodels.py (which builds them through
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


class GemmaRMSNorm(nn.Module):
    """Gemma3RMSNorm: zero-centred weight, output * (1 + w), all in float32, cast back at the end."""

    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(C))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


class Gemma3Attention(nn.Module):
    """Gemma3Attention: per-head q_norm / k_norm before RoPE, scores scaled by
    query_pre_attn_scalar ** -0.5, a sliding window on the sliding layers. Gemma2Attention: no
    q/k norms; the scores soft-capped (c tanh(s / c)) before the mask."""

    def __init__(self, c, sliding):
        super().__init__()
        C, hs = c["hidden_size"], c["head_dim"]
        self.n_head, self.n_kv_head, self.hs = c["num_attention_heads"], c["num_key_value_heads"], hs
        self.scaling = c["query_pre_attn_scalar"] ** -0.5
        self.window = c["sliding_window"] if sliding else 0
        bias = bool(c.get("attention_bias"))
        self.q_proj = nn.Linear(C, self.n_head * hs, bias=bias)
        self.k_proj = nn.Linear(C, self.n_kv_head * hs, bias=bias)
        self.v_proj = nn.Linear(C, self.n_kv_head * hs, bias=bias)
        self.o_proj = nn.Linear(self.n_head * hs, C, bias=bias)
        self.softcap = c.get("attn_logit_softcapping") if c["model_type"] == "gemma2" else None
        if c["model_type"] == "gemma3_text":
            self.q_norm = GemmaRMSNorm(hs, c["rms_norm_eps"])
            self.k_norm = GemmaRMSNorm(hs, c["rms_norm_eps"])
        else:
            self.q_norm = self.k_norm = nn.Identity()

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_head, self.hs)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_head, self.hs)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos + hfmodels.rotate_half(q) * sin
        k = k * cos + hfmodels.rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        window = self.window if 0 < self.window < T else 0
        q3, k3, v3 = (t.reshape(B * self.n_head, T, self.hs) for t in (q, k, v))
        mask = hfmodels.causal_mask(T, q.dtype, q.device, window).expand(B * self.n_head, T, T)
        if self.softcap:  # Gemma 2: capped, then masked
            att = torch.bmm(q3, k3.transpose(1, 2)) * self.scaling
            att = torch.softmax(torch.tanh(att / self.softcap) * self.softcap + mask, dim=-1)
        else:
            att = torch.softmax(torch.baddbmm(mask, q3, k3.transpose(1, 2), alpha=self.scaling), dim=-1)
        y = torch.bmm(att, v3).view(B, self.n_head, T, self.hs).transpose(1, 2).reshape(B, T, self.n_head * self.hs)
        return self.o_proj(y)


class Gemma3MLP(nn.Module):
    """Gemma3MLP: down(gelu_pytorch_tanh(gate(x)) * up(x))."""

    def __init__(self, C, F_):
        super().__init__()
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Gemma3Layer(nn.Module):
    """Gemma3DecoderLayer: norms before and after attention and the MLP (the outputs normalized
    before the residual add); sliding layers use the local RoPE table."""

    def __init__(self, c, sliding):
        super().__init__()
        C, eps = c["hidden_size"], c["rms_norm_eps"]
        self.sliding = sliding
        self.self_attn = Gemma3Attention(c, sliding)
        self.mlp = Gemma3MLP(C, c["intermediate_size"])
        self.input_layernorm = GemmaRMSNorm(C, eps)
        self.post_attention_layernorm = GemmaRMSNorm(C, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(C, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(C, eps)

    def forward(self, x, rope_global, rope_local):
        cos, sin = rope_local if self.sliding else rope_global
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


def gemma3_config(config):
    """Gemma3TextConfig's / Gemma2Config's defaults and the layer types (layer_types, else every
    sliding_window_pattern-th layer global; Gemma 2 every other); keys starting with "_" are this
    module's."""
    c = dict(config)
    g3 = c["model_type"] == "gemma3_text"
    for k, v in (("num_key_value_heads", 4), ("head_dim", 256), ("rms_norm_eps", 1e-6),
                 ("rope_theta", 1e6 if g3 else 1e4), ("rope_local_base_freq", 1e4), ("query_pre_attn_scalar", 256),
                 ("sliding_window", 4096), ("tie_word_embeddings", True),
                 ("max_position_embeddings", 131072 if g3 else 8192)):
        if c.get(k) is None:
            c[k] = v
    if g3:
        for k in ("attn_logit_softcapping", "final_logit_softcapping"):
            if c.get(k) is not None:
                raise ValueError(f"{k} is not supported")
    else:
        c.setdefault("attn_logit_softcapping", 50.0)
        c.setdefault("final_logit_softcapping", 30.0)
    L = c["num_hidden_layers"]
    if c.get("layer_types"):
        c["_sliding"] = [t == "sliding_attention" for t in c["layer_types"]]
    else:
        pattern = (c.get("sliding_window_pattern") or 6) if g3 else 2
        c["_sliding"] = [bool((i + 1) % pattern) for i in range(L)]
    return c


class Gemma3(nn.Module):
    """Gemma3ForCausalLM (text): embeddings times sqrt(hidden_size), tied head by default."""
    norm_zero_centred = True  # init_weights / perturb: norm weights around 0, not 1

    def __init__(self, config):
        super().__init__()
        c = gemma3_config(config)
        self.config = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(Gemma3Layer(c, s) for s in c["_sliding"])
        self.model.norm = GemmaRMSNorm(c["hidden_size"], c["rms_norm_eps"])
        if not c["tie_word_embeddings"]:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self._rope = {}

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config["tie_word_embeddings"] else self.lm_head.weight

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.model.embed_tokens(idx)
        x = x * torch.tensor(self.config["hidden_size"] ** 0.5, dtype=x.dtype)
        key = (T, x.dtype, str(x.device))
        if key not in self._rope:
            g3 = self.config["model_type"] == "gemma3_text"  # Gemma 2: one table for every layer
            local = dict(self.config, rope_theta=self.config["rope_local_base_freq"], rope_scaling=None) if g3 \
                else self.config
            self._rope[key] = (hfmodels.rope_cos_sin(T, self.config, x.dtype, x.device),
                               hfmodels.rope_cos_sin(T, local, x.dtype, x.device))
        rope_global, rope_local = self._rope[key]
        for layer in self.model.layers:
            x = layer(x, rope_global, rope_local)
        x = self.model.norm(x)
        logits = F.linear(x, self.head_weight())
        cap = self.config.get("final_logit_softcapping")
        if cap:  # Gemma 2
            logits = torch.tanh(logits / cap) * cap
        return logits, (hfmodels.lm_loss(logits, targets) if targets is not None else None)


# model_type -> (layer class, final norm class) for hfmodels.Llama.
LAYERS = {"olmo2": (Olmo2Layer, Olmo2RMSNorm), "phi3": (Phi3Layer, Olmo2RMSNorm)}
