"""Plain-torch reference models and safetensors I/O for ztrain parity tests.

Reproduces the math and parameter names/layouts of Hugging Face's
GPT2LMHeadModel and LlamaForCausalLM (and its relatives: Mistral, Qwen2, Qwen3, and OLMo-2 in
hffamilies.py; Phi-3 there too) without depending on `transformers` or
`safetensors` (neither is installed here), so that a folder written by HF (or
by ztrain) can be loaded, evaluated and trained in PyTorch as an oracle.

Public API:
  read_safetensors(path) -> {name: float32 tensor}
  write_safetensors(path, tensors, dtype="F32"|"BF16", metadata=None)
  GPT2(config), Llama(config)      nn.Modules; forward(idx, targets=None) -> (logits, loss)
  build_model(config)              picks the class from config["model_type"]
  load_model(folder) -> (model, config)
  save_model(folder, model, config, dtype="F32")
  init_weights(model, n_layer, generator)  seeded GPT-2-style random init
  param_groups(model, weight_decay) AdamW groups: decay on ndim >= 2 only
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# safetensors

_NP_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}
_ITEM_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def read_safetensors(path):
    """Reads a .safetensors file; every tensor comes back as a float32 tensor."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], list(info["shape"])
        begin, end = info["data_offsets"]
        if dt not in _ITEM_SIZE:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * _ITEM_SIZE[dt] or end > len(body):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin},{end}")
        raw = body[begin:end]
        if dt == "BF16":
            # bf16 is the top half of an f32, so widening is an exact shift.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dt]).astype(np.float32)
        out[name] = torch.from_numpy(arr).reshape(shape)  # both branches made a fresh array
    return out


def read_safetensors_metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header.get("__metadata__", {})


def _tensor_bytes(t, dtype):
    t = t.detach().to("cpu").contiguous()
    if dtype == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float32).numpy().astype("<f2").tobytes()
    if dtype == "BF16":
        # torch's f32 -> bf16 cast rounds to nearest even, like HF's save path.
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    raise ValueError(f"unsupported output dtype {dtype}")


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Writes {name: tensor} with every tensor stored as `dtype` (F32, BF16 or F16)."""
    if dtype not in ("F32", "BF16", "F16"):
        raise ValueError(f"unsupported output dtype {dtype}")
    header, blobs, offset = {}, [], 0
    if metadata is None:
        metadata = {"format": "pt"}  # what HF's save_pretrained writes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        b = _tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # keeps the data section 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ----------------------------------------------------------------------------
# shared pieces

_MASKS = {}


def causal_mask(T, dtype, device, window=0):
    """Additive (T, T) causal mask: 0 on and below the diagonal, -inf above; cached.

    window > 0 (Mistral's sliding_window) also masks keys j <= i - window, as
    transformers' sliding-window mask does (kv_idx > q_idx - sliding_window).
    """
    key = (T, dtype, str(device), window)
    m = _MASKS.get(key)
    if m is None:
        blocked = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
        if window > 0:
            blocked |= torch.ones(T, T, dtype=torch.bool, device=device).tril(-window)
        m = torch.zeros(T, T, dtype=dtype, device=device).masked_fill(blocked, float("-inf"))
        _MASKS[key] = m
    return m


def causal_attention(q, k, v, window=0):
    """q, k, v: (B, H, T, HS) -> (B, H, T, HS), softmax scale 1/sqrt(HS).

    torch 1.13 has no public scaled_dot_product_attention, so this is an
    explicit masked softmax. baddbmm folds the scale and the additive mask into
    the score GEMM, which measured a little faster on CPU than matmul +
    masked_fill; adding 0 / -inf is exact, so the math is HF's (which fills
    with finfo.min instead of -inf: same softmax, the diagonal is never masked).
    """
    B, H, T, hs = q.shape
    q3, k3, v3 = (t.reshape(B * H, T, hs) for t in (q, k, v))
    mask = causal_mask(T, q.dtype, q.device, window).expand(B * H, T, T)
    att = torch.baddbmm(mask, q3, k3.transpose(1, 2), alpha=1.0 / math.sqrt(hs))
    att = torch.softmax(att, dim=-1)
    return torch.bmm(att, v3).view(B, H, T, hs)


def lm_loss(logits, targets):
    """Mean cross-entropy over every target token."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ----------------------------------------------------------------------------
# GPT-2


class Conv1D(nn.Module):
    """HF's GPT-2 'Conv1D': a linear layer whose weight is stored [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(
            *x.shape[:-1], self.weight.size(1))


class GPT2Attention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, C, inner, activation):
        super().__init__()
        self.c_fc = Conv1D(C, inner)
        self.c_proj = Conv1D(inner, C)
        # "gelu_new" (HF default for GPT-2) is the tanh approximation; plain
        # "gelu" is the exact erf form.
        self.approximate = "none" if activation == "gelu" else "tanh"

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate))


class GPT2Block(nn.Module):
    def __init__(self, C, n_head, inner, eps, activation):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = GPT2Attention(C, n_head)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.mlp = GPT2MLP(C, inner, activation)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT2LMHeadModel without dropout; the LM head is tied to wte."""

    def __init__(self, config):
        super().__init__()
        c = gpt2_config(config)
        self.config = c
        C = c["n_embd"]
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(c["vocab_size"], C)
        self.transformer.wpe = nn.Embedding(c["n_positions"], C)
        self.transformer.h = nn.ModuleList(
            GPT2Block(C, c["n_head"], c["n_inner"], c["layer_norm_epsilon"], c["activation_function"])
            for _ in range(c["n_layer"]))
        self.transformer.ln_f = nn.LayerNorm(C, eps=c["layer_norm_epsilon"])

    def forward(self, idx, targets=None):
        T = idx.size(1)
        if T > self.config["n_positions"]:
            raise ValueError(f"sequence length {T} > n_positions {self.config['n_positions']}")
        pos = torch.arange(T, device=idx.device)
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(pos)
        for block in tr.h:
            x = block(x)
        x = tr.ln_f(x)
        logits = F.linear(x, tr.wte.weight)
        return logits, (lm_loss(logits, targets) if targets is not None else None)


def gpt2_config(config):
    """Fills HF GPT2Config defaults and validates what this model supports."""
    c = dict(config)
    c.setdefault("vocab_size", 50257)
    c.setdefault("n_positions", c.get("n_ctx", 1024))
    c.setdefault("n_embd", 768)
    c.setdefault("n_layer", 12)
    c.setdefault("n_head", 12)
    c.setdefault("layer_norm_epsilon", 1e-5)
    c.setdefault("activation_function", "gelu_new")
    if c.get("n_inner") is None:
        c["n_inner"] = 4 * c["n_embd"]
    if c["n_embd"] % c["n_head"]:
        raise ValueError("n_embd must be divisible by n_head")
    if c["activation_function"] not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise ValueError(f"unsupported activation {c['activation_function']}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if c.get(flag):
            raise ValueError(f"{flag}=true is not supported")
    if c.get("scale_attn_weights") is False:
        raise ValueError("scale_attn_weights=false is not supported")
    if c.get("tie_word_embeddings") is False:
        raise ValueError("untied GPT-2 is not supported")
    return c


# ----------------------------------------------------------------------------
# Llama


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_inv_freq(c, seq_len=None):
    """(HS/2) inverse frequencies and the cos/sin scale for a Llama-family config.

    Written from transformers' modeling_rope_utils (4.5x): default, linear, dynamic,
    yarn and llama3, with its float32 tensor arithmetic and double scalar arithmetic.
    """
    dim, theta = c["head_dim"], c["rope_theta"]
    f32 = torch.float32
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))

    def default(base):
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(f32) / dim))

    if kind == "default":
        return default(theta), 1.0
    if kind in ("longrope", "su"):
        import hffamilies
        return hffamilies.longrope_inv_freq(c, seq_len)
    if kind == "linear":
        return default(theta) / rs["factor"], 1.0
    if kind == "dynamic":
        # Rescaled only past max_position_embeddings (never in these tests): seq_len = max.
        L, f = c["max_position_embeddings"], rs["factor"]
        base = theta * ((f * L / L) - (f - 1)) ** (dim / (dim - 2))
        return default(base), 1.0
    if kind == "llama3":
        inv = default(theta)
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, inv_l), 1.0
    if kind == "yarn":
        factor = rs["factor"]
        orig = c["max_position_embeddings"]
        if "original_max_position_embeddings" in rs:
            orig = rs["original_max_position_embeddings"]
            factor = c["max_position_embeddings"] / orig

        def mscale(s_, m=1):
            return 1.0 if s_ <= 1 else 0.1 * m * math.log(s_) + 1.0

        att = rs.get("attention_factor")
        if att is None:
            if rs.get("mscale") and rs.get("mscale_all_dim"):
                att = float(mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"]))
            else:
                att = mscale(factor)
        beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

        lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
        if rs.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=f32) - lo) / (hi - lo), 0, 1)
        pos = theta ** (torch.arange(0, dim, 2).to(f32) / dim)
        extra, inter = 1.0 / pos, 1.0 / (factor * pos)
        ef = 1 - ramp
        return inter * (1 - ef) + extra * ef, att
    raise ValueError(f"unsupported rope_type {kind}")


def rope_cos_sin(T, c, dtype, device):
    """(T, HS) cos/sin tables in HF rotate-half layout.

    Computed in float32 like HF (and ztrain's rope tables) so fp32 parity is not
    limited by the angle arithmetic; float64 models get float64 tables so
    finite-difference checks stay exact.
    """
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq, scale = rope_inv_freq(c, T)
    ang = torch.outer(torch.arange(T, dtype=ct), inv_freq.to(ct))
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype=dtype, device=device), sin.to(dtype=dtype, device=device)


def rotate_half(x):
    h = x.size(-1) // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaAttention(nn.Module):
    """Llama / Mistral / Qwen2 / Qwen3 attention: the families differ in q/k/v and o
    biases, Qwen3's per-head q/k RMSNorm (before RoPE) and Mistral's sliding window."""

    def __init__(self, C, n_head, n_kv_head, hs, qkv_bias=False, o_bias=False, qk_norm_eps=None, window=0):
        super().__init__()
        self.n_head, self.n_kv_head, self.hs, self.window = n_head, n_kv_head, hs, window
        self.q_proj = nn.Linear(C, n_head * hs, bias=qkv_bias)
        self.k_proj = nn.Linear(C, n_kv_head * hs, bias=qkv_bias)
        self.v_proj = nn.Linear(C, n_kv_head * hs, bias=qkv_bias)
        self.o_proj = nn.Linear(n_head * hs, C, bias=o_bias)
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(hs, qk_norm_eps)
            self.k_norm = RMSNorm(hs, qk_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hs)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hs)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            # KV head j serves query heads j*rep .. j*rep+rep-1 (HF repeat_kv).
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        window = self.window if 0 < self.window < T else 0
        y = causal_attention(q, k, v, window).transpose(1, 2).reshape(B, T, self.n_head * self.hs)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, C, F_, bias=False):
        super().__init__()
        self.gate_proj = nn.Linear(C, F_, bias=bias)
        self.up_proj = nn.Linear(C, F_, bias=bias)
        self.down_proj = nn.Linear(F_, C, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["hidden_size"]
        self.input_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.self_attn = LlamaAttention(C, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                                        c["_qkv_bias"], c["_o_bias"],
                                        c["rms_norm_eps"] if c["_qk_norm"] else None, c["_window"])
        self.post_attention_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.mlp = LlamaMLP(C, c["intermediate_size"], c["_mlp_bias"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """LlamaForCausalLM; lm_head exists only when tie_word_embeddings is false."""

    def __init__(self, config):
        super().__init__()
        c = llama_config(config)
        self.config = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        import hffamilies  # the families with their own blocks (it imports this module)
        layer, norm = hffamilies.LAYERS.get(c["model_type"], (LlamaLayer, RMSNorm))
        self.model.layers = nn.ModuleList(layer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = norm(c["hidden_size"], c["rms_norm_eps"])
        if not c["tie_word_embeddings"]:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self._rope = {}

    def head_weight(self):
        return self.model.embed_tokens.weight if self.config["tie_word_embeddings"] else self.lm_head.weight

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.model.embed_tokens(idx)
        key = (T, x.dtype, str(x.device))
        if key not in self._rope:
            self._rope[key] = rope_cos_sin(T, self.config, x.dtype, x.device)
        cos, sin = self._rope[key]
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        logits = F.linear(x, self.head_weight())
        return logits, (lm_loss(logits, targets) if targets is not None else None)


def llama_config(config):
    """Fills HF LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config defaults and
    validates what this model supports. Keys starting with "_" are this module's own
    resolved options (stripped again by save_model)."""
    c = dict(config)
    mt = c["model_type"]
    c.setdefault("vocab_size", 32000)
    c.setdefault("hidden_size", 4096)
    c.setdefault("intermediate_size", 11008)
    c.setdefault("num_hidden_layers", 32)
    c.setdefault("num_attention_heads", 32)
    if c.get("num_key_value_heads") is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    c.setdefault("max_position_embeddings", {"llama": 2048, "olmo2": 2048, "phi3": 4096, "mistral": 4096 * 32}.get(mt, 32768))
    c.setdefault("rms_norm_eps", 1e-5 if mt in ("olmo2", "phi3") else 1e-6)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("tie_word_embeddings", False)
    c.setdefault("hidden_act", "silu")
    if c.get("head_dim") is None:
        c["head_dim"] = 128 if mt == "qwen3" else c["hidden_size"] // c["num_attention_heads"]
    c["_qkv_bias"] = bool(c.get("attention_bias")) if mt in ("llama", "qwen3", "olmo2") else mt == "qwen2"
    c["_o_bias"] = bool(c.get("attention_bias")) if mt in ("llama", "qwen3", "olmo2") else False
    c["_mlp_bias"] = bool(c.get("mlp_bias")) if mt == "llama" else False
    c["_qk_norm"] = mt == "qwen3"
    c["_window"] = (c.get("sliding_window", 4096) or 0) if mt == "mistral" else (c.get("sliding_window") or 0) \
        if mt == "phi3" else 0
    if mt in ("qwen2", "qwen3") and c.get("use_sliding_window"):
        raise ValueError("use_sliding_window is not supported")
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    if c["head_dim"] % 2:
        raise ValueError("head_dim must be even for RoPE")
    if c["hidden_act"] != "silu":
        raise ValueError(f"unsupported hidden_act {c['hidden_act']}")
    if c.get("pretraining_tp", 1) != 1:
        raise ValueError("pretraining_tp != 1 is not supported")
    return c


# ----------------------------------------------------------------------------
# folders


def build_model(config):
    mt = config.get("model_type")
    if mt == "gpt2":
        return GPT2(config)
    if mt in ("llama", "mistral", "qwen2", "qwen3", "olmo2", "phi3"):
        return Llama(config)
    if mt in ("gemma3_text", "gemma2"):
        import hffamilies
        return hffamilies.Gemma3(config)
    if mt in ("mixtral", "qwen2_moe", "qwen3_moe"):
        import hfmoe
        return hfmoe.MoeLM(config)
    raise ValueError(f"unsupported model_type {mt!r}")


# Buffers that some HF versions serialize; they carry no trainable state.
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def load_model(folder):
    """Loads config.json + model.safetensors into a float32 model; returns (model, config)."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    model = build_model(config)
    sd = read_safetensors(os.path.join(folder, "model.safetensors"))
    if config["model_type"] == "gpt2" and not any(k.startswith("transformer.") for k in sd):
        # Checkpoints saved from a bare GPT2Model (e.g. the original "gpt2")
        # lack the "transformer." prefix.
        sd = {("transformer." + k if k != "lm_head.weight" else k): v for k, v in sd.items()}
    sd = {k: v for k, v in sd.items() if not k.endswith(_IGNORED_SUFFIXES)}
    tied = config["model_type"] == "gpt2" or config.get("tie_word_embeddings", False)
    if tied:
        sd.pop("lm_head.weight", None)  # tied copy, if a writer included it anyway
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"{folder}: missing tensors {missing}, unexpected tensors {unexpected}")
    return model, config


def save_model(folder, model, config, dtype="F32"):
    """Writes config.json + model.safetensors (tied head not stored, as HF does)."""
    os.makedirs(folder, exist_ok=True)
    cfg = dict(config)
    cfg["torch_dtype"] = "bfloat16" if dtype == "BF16" else "float16" if dtype == "F16" else "float32"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    write_safetensors(os.path.join(folder, "model.safetensors"),
                      {k: v for k, v in model.state_dict().items()}, dtype=dtype)


_RESIDUAL_PROJ = (".attn.c_proj.weight", ".mlp.c_proj.weight", ".self_attn.o_proj.weight",
                  ".mlp.down_proj.weight")


@torch.no_grad()
def init_weights(model, n_layer, generator=None, std=0.02):
    """GPT-2-style init: N(0, std) weights, zero biases, unit norm weights, and
    residual-stream output projections scaled by 1/sqrt(2*n_layer).

    Parameters are drawn in named_parameters() order from `generator`, so a
    seed fully determines the weights.
    """
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.zero_()
        elif p.dim() == 1:  # norm weights: 1, or 0 where the norm scales by 1 + w (Gemma)
            p.fill_(0.0 if getattr(model, "norm_zero_centred", False) else 1.0)
        else:
            s = std / math.sqrt(2 * n_layer) if name.endswith(_RESIDUAL_PROJ) else std
            p.normal_(0.0, s, generator=generator)


def param_groups(model, weight_decay):
    """AdamW groups: matrices/embeddings decay; 1-D tensors (biases, norms) do not.

    named_parameters() deduplicates shared tensors, but the models here never
    register the tied head separately in the first place.
    """
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]
