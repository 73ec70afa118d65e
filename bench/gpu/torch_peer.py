"""torch_peer.py: PyTorch's figures on the GPU that zt_cuda_bench measures, in the same call
(bench/gpu_check.sh): the bf16 GEMM at 8192^3, causal SDPA forward+backward at T=4096, HS=128
(FlashAttention under the hood), and GPT-2 124M training with torch.compile at T=1024 (the
issue's speed peer). Each line starts with 'torch'."""
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def gemm():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b.T)
    print(f"torch gemm 8192^3 bf16 {ms:.3f} ms {2 * 8192**3 / ms / 1e9:.1f} TFLOP/s")


def attention(B, NH, T, HS):
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    fwd_flops = 4 * B * NH * T * T * HS / 2
    ms_f = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(do)

    ms_fb = median_ms(fwd_bwd)
    print(f"torch sdpa causal B={B} NH={NH} T={T} HS={HS} fwd {ms_f:.3f} ms {fwd_flops / ms_f / 1e9:.1f} TFLOP/s; "
          f"fwd+bwd {ms_fb:.3f} ms {3.5 * fwd_flops / ms_fb / 1e9:.1f} TFLOP/s")


def gpt2_compile(B=16, T=1024):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=T, n_embd=768, n_layer=12, n_head=12, vocab_size=50304)
    model = GPT2LMHeadModel(cfg).cuda()
    model.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = torch.compile(model)
    x = torch.randint(0, 50257, (B, T), device="cuda")

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.time()
    train_step()
    torch.cuda.synchronize()
    compile_s = time.time() - t
    ms = median_ms(train_step, reps=5)
    n = sum(p.numel() for p in model.parameters())
    flops = 6 * n * B * T + 12 * 12 * B * T * T * 768  # 6N per token + attention (causal not halved, as llm.c)
    print(f"torch gpt2-124M compile B={B} T={T}: {B * T / ms * 1e3:.0f} tokens/s, {ms:.1f} ms/step, "
          f"{flops / ms / 1e9:.0f} TFLOP/s, compile {compile_s:.0f} s, peak mem "
          f"{torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    print("torch", torch.__version__, torch.cuda.get_device_name())
    gemm()
    attention(4, 16, 4096, 128)
    attention(8, 12, 1024, 64)
    if "--no-gpt2" not in sys.argv:
        try:
            gpt2_compile()
        except Exception as e:  # the peer's figure is informative; the check goes on without it
            print(f"error: torch gpt2 compile failed: {e}")
