#!/usr/bin/env python3
"""Independent float64 reference for stories260K, from the ORIGINAL llama2.c checkpoint
(stories260K.bin: its own file format, interleaved RoPE, written after llama2.c's run.c), so it
shares nothing with rlparity's loader or forward. Prints per-token logprobs of a token sequence as
JSON: {"logprobs": [...]} where logprobs[j] = log p(tokens[j+1] | tokens[:j+1]).

usage: llama2c_reference.py stories260K.bin TOKEN [TOKEN ...]
"""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("7i", f.read(28))
        data = np.frombuffer(f.read(), dtype=np.float32).astype(np.float64)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // heads
    kv_dim = kv_heads * hs
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        arr = data[off:off + n].reshape(shape)
        off += n
        return arr

    w = {}
    w["emb"] = take(vocab, dim)
    w["rms_att"] = take(layers, dim)
    w["wq"] = take(layers, dim, dim)
    w["wk"] = take(layers, kv_dim, dim)
    w["wv"] = take(layers, kv_dim, dim)
    w["wo"] = take(layers, dim, dim)
    w["rms_ffn"] = take(layers, dim)
    w["w1"] = take(layers, hidden, dim)
    w["w2"] = take(layers, dim, hidden)
    w["w3"] = take(layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, hs // 2)  # freq_cis_real (unused: recomputed as run.c does)
    take(seq_len, hs // 2)
    w["wcls"] = w["emb"] if shared else take(vocab, dim)
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, hs=hs)
    return cfg, w


def rmsnorm(x, weight, eps=1e-5):
    return x / np.sqrt(np.mean(x * x) + eps) * weight


def rope_interleaved(v, pos, hs):
    out = v.copy()
    for i in range(0, len(v), 2):
        freq = 1.0 / (10000.0 ** ((i % hs) / hs))
        c, s = np.cos(pos * freq), np.sin(pos * freq)
        out[i] = v[i] * c - v[i + 1] * s
        out[i + 1] = v[i] * s + v[i + 1] * c
    return out


def forward_all(cfg, w, tokens):
    L, hs, H, KV = cfg["layers"], cfg["hs"], cfg["heads"], cfg["kv_heads"]
    keys = [[] for _ in range(L)]
    vals = [[] for _ in range(L)]
    out = []
    for pos, tok in enumerate(tokens):
        x = w["emb"][tok].copy()
        for l in range(L):
            xb = rmsnorm(x, w["rms_att"][l])
            q = rope_interleaved(w["wq"][l] @ xb, pos, hs)
            k = rope_interleaved(w["wk"][l] @ xb, pos, hs)
            v = w["wv"][l] @ xb
            keys[l].append(k)
            vals[l].append(v)
            att_out = np.zeros(cfg["dim"])
            for h in range(H):
                g = h // (H // KV)
                qh = q[h * hs:(h + 1) * hs]
                scores = np.array([qh @ kk[g * hs:(g + 1) * hs] for kk in keys[l]]) / np.sqrt(hs)
                p = np.exp(scores - scores.max())
                p /= p.sum()
                att_out[h * hs:(h + 1) * hs] = sum(pi * vv[g * hs:(g + 1) * hs] for pi, vv in zip(p, vals[l]))
            x = x + w["wo"][l] @ att_out
            xb = rmsnorm(x, w["rms_ffn"][l])
            h1 = w["w1"][l] @ xb
            h3 = w["w3"][l] @ xb
            x = x + w["w2"][l] @ (h1 / (1.0 + np.exp(-h1)) * h3)
        logits = w["wcls"] @ rmsnorm(x, w["rms_final"])
        m = logits.max()
        out.append(logits - m - np.log(np.exp(logits - m).sum()))
    return out


def main():
    cfg, w = load(sys.argv[1])
    tokens = [int(t) for t in sys.argv[2:]]
    lps = forward_all(cfg, w, tokens)
    print(json.dumps({"logprobs": [float(lps[j][tokens[j + 1]]) for j in range(len(tokens) - 1)]}))


if __name__ == "__main__":
    main()
