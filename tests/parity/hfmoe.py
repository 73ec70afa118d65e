"""The mixture-of-experts families as transformers computes them: Mixtral (MixtralForCausalLM:
block_sparse_moe with experts w1 / w3 / w2, top-k weights renormalised), Qwen2-MoE
(Qwen2MoeForCausalLM: mlp with experts gate_proj / up_proj / down_proj, norm_topk_prob, a shared
expert scaled by sigmoid(shared_expert_gate(x))) and Qwen3-MoE (Qwen3MoeForCausalLM: Qwen3's
attention, no shared expert). The router's softmax runs in float32, the top-k on the probabilities;
with output_router_logits the loss adds router_aux_loss_coef times load_balancing_loss_func over
the concatenated layers. Written from transformers' modeling_mixtral.py / modeling_qwen2_moe.py
arithmetic; the attention and norms come from hfmodels.py.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import hfmodels

BASE = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}


def moe_config(config):
    """MixtralConfig / Qwen2MoeConfig / Qwen3MoeConfig defaults on top of the dense family's."""
    mt = config["model_type"]
    raw = dict(config)
    if mt == "mixtral":
        raw.setdefault("rms_norm_eps", 1e-5)
        raw.setdefault("rope_theta", 1e6)
        raw.setdefault("sliding_window", None)  # MixtralConfig: no window unless given
    c = hfmodels.llama_config(dict(raw, model_type=BASE[mt]))
    c["model_type"] = mt
    mixtral = mt == "mixtral"
    c["_E"] = c.get("num_local_experts", 8) if mixtral else c.get("num_experts", 60 if mt == "qwen2_moe" else 128)
    c["_K"] = c.get("num_experts_per_tok", 2 if mixtral else 4 if mt == "qwen2_moe" else 8)
    c["_F"] = c["intermediate_size"] if mixtral else c.get("moe_intermediate_size", 1408 if mt == "qwen2_moe" else 768)
    c["_Fs"] = c.get("shared_expert_intermediate_size", 5632) if mt == "qwen2_moe" else 0
    c["_renorm"] = True if mixtral else bool(c.get("norm_topk_prob", False))
    c["_aux"] = bool(c.get("output_router_logits", False))
    c["_aux_coef"] = c.get("router_aux_loss_coef", 0.001)
    return c


class MixtralExpert(nn.Module):
    """MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, C, F_):
        super().__init__()
        self.w1 = nn.Linear(C, F_, bias=False)
        self.w2 = nn.Linear(F_, C, bias=False)
        self.w3 = nn.Linear(C, F_, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    """MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock."""

    def __init__(self, c):
        super().__init__()
        C, E = c["hidden_size"], c["_E"]
        self.E, self.K, self.renorm = E, c["_K"], c["_renorm"]
        self.gate = nn.Linear(C, E, bias=False)
        mixtral = c["model_type"] == "mixtral"
        self.experts = nn.ModuleList(MixtralExpert(C, c["_F"]) if mixtral else hfmodels.LlamaMLP(C, c["_F"])
                                     for _ in range(E))
        if c["_Fs"]:
            self.shared_expert = hfmodels.LlamaMLP(C, c["_Fs"])
            self.shared_expert_gate = nn.Linear(C, 1, bias=False)
        self.router_logits = None

    def forward(self, x):
        B, T, C = x.shape
        h = x.reshape(-1, C)
        logits = self.gate(h)
        self.router_logits = logits
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, chosen = torch.topk(w, self.K, dim=-1)
        if self.renorm:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(h.dtype)
        out = torch.zeros_like(h)
        mask = F.one_hot(chosen, num_classes=self.E).permute(2, 1, 0)  # (E, K, N)
        for e in range(self.E):
            k, t = torch.where(mask[e])
            if t.numel():
                out.index_add_(0, t, self.experts[e](h[t]) * w[t, k, None])
        if hasattr(self, "shared_expert"):
            out = out + torch.sigmoid(self.shared_expert_gate(h)) * self.shared_expert(h)
        return out.reshape(B, T, C)


class MoeLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        C = c["hidden_size"]
        self.input_layernorm = hfmodels.RMSNorm(C, c["rms_norm_eps"])
        self.self_attn = hfmodels.LlamaAttention(C, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                                                 c["_qkv_bias"], c["_o_bias"],
                                                 c["rms_norm_eps"] if c["_qk_norm"] else None, c["_window"])
        self.post_attention_layernorm = hfmodels.RMSNorm(C, c["rms_norm_eps"])
        if c["model_type"] == "mixtral":
            self.block_sparse_moe = SparseMoe(c)
        else:
            self.mlp = SparseMoe(c)

    def moe(self):
        return self.block_sparse_moe if hasattr(self, "block_sparse_moe") else self.mlp

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.moe()(self.post_attention_layernorm(x))


def load_balancing_loss(gate_logits, E, K):
    """load_balancing_loss_func without an attention mask: E * sum over (k, e) of the fraction of
    rows whose k-th choice is e times e's mean probability, over all layers' rows at once."""
    logits = torch.cat(gate_logits, dim=0)
    p = F.softmax(logits, dim=-1)
    _, chosen = torch.topk(p, K, dim=-1)
    mask = F.one_hot(chosen, E)
    tokens_per_expert = torch.mean(mask.float(), dim=0)
    prob_per_expert = torch.mean(p, dim=0)
    return torch.sum(tokens_per_expert * prob_per_expert.unsqueeze(0)) * E


class MoeLM(nn.Module):
    """MixtralForCausalLM / Qwen2MoeForCausalLM / Qwen3MoeForCausalLM."""

    def __init__(self, config):
        super().__init__()
        c = moe_config(config)
        self.config = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(MoeLayer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = hfmodels.RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        if not c["tie_word_embeddings"]:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self._rope = {}

    def head_weight(self):
        return hfmodels.Llama.head_weight(self)

    def forward(self, idx, targets=None):
        logits, loss = hfmodels.Llama.forward(self, idx, targets)
        if loss is not None and self.config["_aux"]:
            aux = load_balancing_loss([layer.moe().router_logits for layer in self.model.layers], self.config["_E"],
                                      self.config["_K"])
            loss = loss + self.config["_aux_coef"] * aux
        return logits, loss
