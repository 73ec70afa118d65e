#!/usr/bin/env python3
"""make_seeds.py: writes the hand-made seed inputs of every fuzz target into fuzz/corpus/<target>/.
Each seed is a small valid file of the format its target parses (see the target's header comment
for how an input is laid out). Run it again after changing a format; the files are committed."""
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\n=====\n"  # between the parts of a multi-file input


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def hash64(data, seed=0x5A545241494E):  # src/core/hash.h
    M = (1 << 64) - 1
    n = len(data)
    h = [seed ^ 0x9E3779B97F4A7C15, (seed + n) & M, ~seed & M, (seed * 0xFF51AFD7ED558CCD) & M]
    i = 0
    while i + 32 <= n:
        for k in range(4):
            w = struct.unpack_from("<Q", data, i + 8 * k)[0]
            h[k] = ((h[k] ^ ((w * 0x87C37B91114253D5) & M)) * 0x4CF5AD432745937F) & M
            h[k] ^= h[k] >> 31
        i += 32
    r = h[0] ^ ((h[1] * 3) & M) ^ ((h[2] * 5) & M) ^ ((h[3] * 7) & M)
    while i < n:
        r = ((r ^ data[i]) * 0x100000001B3) & M
        i += 1
    r ^= r >> 33
    r = (r * 0xFF51AFD7ED558CCD) & M
    r ^= r >> 33
    return r


def byte_char(b):  # GPT-2's bytes_to_unicode
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if b in printable:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in printable].index(b))


MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "Ġ t", "Ġt he"]


def byte_vocab():
    enc = {byte_char(b): b for b in range(256)}
    for m in MERGES:
        enc.setdefault(m.replace(" ", ""), len(enc))
    return enc


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def shard(tokens, width, vocab=70000, eos=-1):
    head = b"ZTTOKENS" + struct.pack("<IIQIi", 1, width, len(tokens), vocab, eos)
    head += b"\0" * (64 - len(head))
    return head + b"".join(struct.pack("<H" if width == 2 else "<I", t) for t in tokens)


def main():
    # flags: NUL-separated argv
    put("flags", "basic", b"\0".join([b"--output_dir", b"out", b"--learning_rate", b"1e-3", b"--no_shuffle"]))
    put("flags", "equals", b"\0".join([b"--per_device_train_batch_size=4", b"--max_steps", b"100", b"--seed", b"-1",
                                      b"--no_shuffle", b"false", b"--warmup_ratio=0.1"]))
    put("flags", "bools", b"\0".join([b"--overwrite_output_dir=true", b"--model_name_or_path", b"/m", b"--no_shuffle=0"]))

    # config: HF config.json
    put("config", "gpt2.json", json.dumps({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                                           "n_head": 12, "n_positions": 1024, "n_inner": None,
                                           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
                                           "architectures": ["GPT2LMHeadModel"]}, indent=1))
    put("config", "llama_gqa.json", json.dumps({"model_type": "llama", "vocab_size": 32000, "hidden_size": 64,
                                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                                "num_key_value_heads": 2, "intermediate_size": 172,
                                                "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
                                                "rope_theta": 500000.0, "tie_word_embeddings": True,
                                                "head_dim": 16, "hidden_act": "silu", "rope_scaling": None,
                                                "attention_bias": False}))
    put("config", "gpt2_nctx.json", '{"model_type":"gpt2","vocab_size":200,"n_embd":32,"n_layer":1,"n_head":2,"n_ctx":64}')

    # safetensors
    f32 = struct.pack("<6f", 1, -2.5, 3.25, 1e-3, 7, 0)
    put("safetensors", "f32_meta", safetensors([("a", "F32", [2, 3], f32), ("b.bias", "F32", [1], struct.pack("<f", 0.5))],
                                               {"format": "pt"}))
    put("safetensors", "bf16_f16", safetensors([("x", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC000)),
                                                ("y", "F16", [3], struct.pack("<3H", 0x3C00, 0xC000, 0x3800))]))
    put("safetensors", "empty_scalar_i64", safetensors([("e", "F32", [0, 4], b""), ("s", "F32", [], struct.pack("<f", 2)),
                                                        ("i", "I64", [1], struct.pack("<q", 5))], {}))

    # tokenizer_gpt2: encoder.json, separator, vocab.bpe
    enc = byte_vocab()
    enc["<|endoftext|>"] = len(enc)
    put("tokenizer_gpt2", "tiny", json.dumps(enc, ensure_ascii=False).encode() + SEP +
        ("#version: 0.2\n" + "\n".join(MERGES) + "\n").encode())
    put("tokenizer_gpt2", "no_version_crlf", json.dumps({"a": 0, "b": 1, "ab": 2, "c": 3}).encode() + SEP + b"a b\r\n\r\n")

    # tokenizer_hf: tokenizer.json [, separator, tokenizer_config.json]
    spm_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        spm_vocab["<0x%02X>" % b] = 3 + b
    for t in ["\u2581", "h", "i", "t", "e", "r", "\u2581h", "\u2581hi", "er", "\u2581t"]:
        spm_vocab[t] = len(spm_vocab)
    spm = {"added_tokens": [{"id": 1, "content": "<s>", "special": True}, {"id": 2, "content": "</s>", "special": True}],
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                               {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
           "pre_tokenizer": None,
           "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                         {"type": "ByteFallback"}, {"type": "Fuse"},
                                                         {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                     "vocab": spm_vocab, "merges": [["\u2581", "h"], "\u2581h i", ["e", "r"], "\u2581 t"]}}
    put("tokenizer_hf", "spm.json", json.dumps(spm, ensure_ascii=False).encode() + SEP +
        json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}).encode())
    # The same behind a Precompiled normalizer: a one-entry darts-clone charsmap, "A" -> "aa"
    # (tokenizer_charsmap.h), so mutations reach the trie walk.
    units = [0] * 66
    units[0] = 1 << 10
    units[1 ^ 0x41] = 0x41 | 1 << 8 | 1 << 10
    units[(1 ^ 0x41) ^ 1] = 1 << 31
    charsmap = struct.pack("<I", 4 * len(units)) + b"".join(struct.pack("<I", u) for u in units) + b"aa\0"
    pre = dict(spm, normalizer={"type": "Sequence", "normalizers": [
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}, spm["normalizer"]]})
    put("tokenizer_hf", "precompiled.json", json.dumps(pre, ensure_ascii=False).encode() + SEP +
        json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}).encode())
    llama3_regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    bv = byte_vocab()
    l3 = {"added_tokens": [{"id": len(bv), "content": "<|begin_of_text|>", "special": True},
                           {"id": len(bv) + 1, "content": "<|end_of_text|>", "special": True, "lstrip": True}],
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": llama3_regex}, "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "ignore_merges": True, "vocab": bv, "merges": [m.split(" ") for m in MERGES]}}
    put("tokenizer_hf", "llama3.json", json.dumps(l3, ensure_ascii=False))
    g2 = {"model": {"type": "BPE", "vocab": dict(bv, **{"<|endoftext|>": len(bv)}), "merges": MERGES},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True},
          "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Metaspace", "replacement": "\u2581"}]},
          "added_tokens": [{"id": len(bv), "content": "<|endoftext|>", "rstrip": False}]}
    put("tokenizer_hf", "gpt2_style.json", json.dumps(g2, ensure_ascii=False).encode() + SEP + b'{"eos_token": null}')

    # tokenizer_encode: byte 0 = tokenizer + 3 * operation, then text (or int32 ids)
    text = "hello world, the thing's here!\n\n  x \xe9t\xe9 \u4e2d\u6587 <s></s><|endoftext|>".encode()
    for which in range(3):
        for op in range(2):
            put("tokenizer_encode", "t%d_op%d" % (which, op), bytes([which + 3 * op]) + text)
        put("tokenizer_encode", "t%d_decode" % which, bytes([which + 6]) + struct.pack("<6i", 0, 5, 104, 258, 259, 266))

    # token_shard: ztrain shards and a headerless uint16 file
    put("token_shard", "u16.bin", shard([1, 2, 3, 4, 5, 6, 7, 65535], 2, eos=0))
    put("token_shard", "u32.bin", shard([1, 69999, 3, 4, 5, 6, 7], 4, vocab=70000, eos=69999))
    put("token_shard", "nanogpt.bin", struct.pack("<10H", *range(10)))

    # checkpoint: byte 0 = mode (0 checksums.json, 1 trainer_state.json, 2 folder names)
    files = {"config.json": b'{"model_type": "gpt2"}\n', "model.safetensors": bytes(range(100)),
             "trainer_state.json": b'{"global_step": 7}\n'}  # as fuzz_checkpoint.cpp writes them
    sums = {k: {"hash64": hash64(v), "bytes": len(v)} for k, v in files.items()}
    put("checkpoint", "checksums.json", b"\0" + json.dumps({"save_id": "0123456789abcdef", "files": sums}, indent=2).encode())
    state = {"best_metric": None, "epoch": 0.5, "global_step": 20, "log_history": [
        {"epoch": 0.25, "grad_norm": 1.5, "learning_rate": 0.001, "loss": 5.25, "step": 10},
        {"epoch": 0.5, "eval_loss": 5.0, "eval_perplexity": 148.4, "step": 20},
        {"epoch": 0.5, "step": 20, "train_runtime": 3.5, "train_loss": 5.2}],
        "logging_steps": 10, "max_steps": 40, "save_steps": 20, "train_batch_size": 2,
        "ztrain": {"loss_sum": 104.5, "sequences_consumed": 40, "seed": 42, "shuffle": True,
                   "sequence_length": 16, "sequences_per_step": 2}}
    put("checkpoint", "trainer_state.json", b"\1" + json.dumps(state, indent=2).encode())
    put("checkpoint", "names", b"\2" + b"checkpoint-10\ncheckpoint-200\ncheckpoint-3.tmp\nnot-a-checkpoint\ncheckpoint-")

    # tokenize_jsonl
    put("tokenize_jsonl", "docs.jsonl", '{"text": "hello world"}\n{"text": "the hell\\nworld", "id": 2}\n\n'
                                        '{"text": ""}\n{"text": "caf\\u00e9 \\ud83d\\ude00", "meta": {"a": [1, 2]}}\n')
    put("tokenize_jsonl", "crlf.jsonl", b'{"text": "a"}\r\n   \r\n{"text": "b b b b b b b b b b b b b b b b b b b b b b"}')


if __name__ == "__main__":
    main()
