"""Plain-torch reference models and safetensors I/O for ztrain parity tests.

Reproduces the math and parameter names/layouts of Hugging Face's
GPT2LMHeadModel and LlamaForCausalLM without depending on `transformers` or
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


def causal_mask(T, dtype, device):
    """Additive (T, T) causal mask: 0 on and below the diagonal, -inf above; cached."""
    key = (T, dtype, str(device))
    m = _MASKS.get(key)
    if m is None:
        m = torch.zeros(T, T, dtype=dtype, device=device).masked_fill(
            torch.ones(T, T, dtype=torch.bool, device=device).triu(1), float("-inf"))
        _MASKS[key] = m
    return m


def causal_attention(q, k, v):
    """q, k, v: (B, H, T, HS) -> (B, H, T, HS), softmax scale 1/sqrt(HS).

    torch 1.13 has no public scaled_dot_product_attention, so this is an
    explicit masked softmax. baddbmm folds the scale and the additive mask into
    the score GEMM, which measured a little faster on CPU than matmul +
    masked_fill; adding 0 / -inf is exact, so the math is HF's (which fills
    with finfo.min instead of -inf: same softmax, the diagonal is never masked).
    """
    B, H, T, hs = q.shape
    q3, k3, v3 = (t.reshape(B * H, T, hs) for t in (q, k, v))
    mask = causal_mask(T, q.dtype, q.device).expand(B * H, T, T)
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


def rope_cos_sin(T, hs, theta, dtype, device):
    """(T, HS) cos/sin tables in HF rotate-half layout.

    Computed in float32 like HF (and ztrain's rope_table) so fp32 parity is not
    limited by the angle arithmetic; float64 models get float64 tables so
    finite-difference checks stay exact.
    """
    ct = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).to(ct) / hs))
    ang = torch.outer(torch.arange(T, dtype=ct), inv_freq)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def rotate_half(x):
    h = x.size(-1) // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, C, n_head, n_kv_head, hs):
        super().__init__()
        self.n_head, self.n_kv_head, self.hs = n_head, n_kv_head, hs
        self.q_proj = nn.Linear(C, n_head * hs, bias=False)
        self.k_proj = nn.Linear(C, n_kv_head * hs, bias=False)
        self.v_proj = nn.Linear(C, n_kv_head * hs, bias=False)
        self.o_proj = nn.Linear(n_head * hs, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_head // self.n_kv_head
        if rep > 1:
            # KV head j serves query heads j*rep .. j*rep+rep-1 (HF repeat_kv).
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, self.n_head * self.hs)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, C, F_):
        super().__init__()
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["hidden_size"]
        self.input_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.self_attn = LlamaAttention(C, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
        self.post_attention_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.mlp = LlamaMLP(C, c["intermediate_size"])

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
        self.model.layers = nn.ModuleList(LlamaLayer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
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
            self._rope[key] = rope_cos_sin(T, self.config["head_dim"], self.config["rope_theta"],
                                           x.dtype, x.device)
        cos, sin = self._rope[key]
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        logits = F.linear(x, self.head_weight())
        return logits, (lm_loss(logits, targets) if targets is not None else None)


def llama_config(config):
    """Fills HF LlamaConfig defaults and validates what this model supports."""
    c = dict(config)
    c.setdefault("vocab_size", 32000)
    c.setdefault("hidden_size", 4096)
    c.setdefault("intermediate_size", 11008)
    c.setdefault("num_hidden_layers", 32)
    c.setdefault("num_attention_heads", 32)
    if c.get("num_key_value_heads") is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    c.setdefault("max_position_embeddings", 2048)
    c.setdefault("rms_norm_eps", 1e-6)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("tie_word_embeddings", False)
    c.setdefault("hidden_act", "silu")
    if c.get("head_dim") is None:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    if c["num_attention_heads"] % c["num_key_value_heads"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    if c["head_dim"] % 2:
        raise ValueError("head_dim must be even for RoPE")
    if c["hidden_act"] != "silu":
        raise ValueError(f"unsupported hidden_act {c['hidden_act']}")
    if c.get("rope_scaling"):
        raise ValueError("rope_scaling is not supported")
    if c.get("attention_bias") or c.get("mlp_bias"):
        raise ValueError("attention_bias / mlp_bias are not supported")
    if c.get("pretraining_tp", 1) != 1:
        raise ValueError("pretraining_tp != 1 is not supported")
    return c


# ----------------------------------------------------------------------------
# folders


def build_model(config):
    mt = config.get("model_type")
    if mt == "gpt2":
        return GPT2(config)
    if mt == "llama":
        return Llama(config)
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
        elif p.dim() == 1:
            p.fill_(1.0)
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
