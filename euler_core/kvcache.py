"""Generation with a KV cache: each layer's keys and values of every position so far, kept so that
a new token runs the model over itself only.

Without a cache, sampling token t runs the whole context (t positions) through every layer again.
With one, the keys and values of positions < t are already known: the new token's q, k, v come from
its own row, its k and v are appended to the cache, and `attention_cached` lets its query attend
to every cached key. Everything else in a block (layernorm, matmuls, GELU, residual) is per
position, so it runs on the new rows only.

    cache = KVCache(model, batch=1)
    logits = forward_cached(model, prompt_tokens, cache)   # prefill: (1,T,Vp), cache holds T positions
    logits = forward_cached(model, [[next_id]], cache)     # one step: (1,1,Vp), cache holds T+1

The cache stores k and v as the qkv projection lays them out, heads side by side: per layer two
(B, block_size, C) arrays, filled from the left. Appending is a copy of qkv's k and v columns, with
no arithmetic: every op still runs through the kernel registry, as in `GPT.forward`.

What it does not do: sliding past `block_size` (the context is full then; generate.py starts a
fresh cache over the last block_size - 1 tokens instead) or batches of prompts of different
lengths (all rows share one position).
"""

from __future__ import annotations

import warnings

import numpy as np

from .device import storage_dtype, to_device


class KVCache:
    """Per layer, the keys and values of positions [0, length) of B sequences."""

    def __init__(self, model, batch: int = 1):
        cfg = model.config
        self.batch = batch
        self.capacity = cfg.block_size
        self.length = 0  # positions filled
        xp, C = model.xp, cfg.n_embd
        self.k = [xp.zeros((batch, cfg.block_size, C), dtype=storage_dtype(model.dtype)) for _ in range(cfg.n_layer)]  # (B,maxT,C)
        self.v = [xp.zeros((batch, cfg.block_size, C), dtype=storage_dtype(model.dtype)) for _ in range(cfg.n_layer)]  # (B,maxT,C)

    def append(self, layer: int, qkv, start: int) -> tuple:
        """Copy the k and v columns of qkv (B,Tn,3C) into positions [start, start+Tn) of `layer`;
        return the views k, v (B,start+Tn,C) of every position so far."""
        B, Tn, C3 = qkv.shape
        C = C3 // 3
        end = start + Tn
        self.k[layer][:, start:end] = qkv[:, :, C:2 * C]
        self.v[layer][:, start:end] = qkv[:, :, 2 * C:]
        return self.k[layer][:, :end], self.v[layer][:, :end]

    def reset(self) -> None:
        self.length = 0


_WARNED: set = set()


def forward_cached(model, tokens, cache: KVCache, last_only: bool = False):
    """Logits (B,Tn,Vp) of the new tokens (B,Tn) at positions [cache.length, cache.length + Tn),
    given the cache of every earlier position; the cache then holds them too. `last_only` computes
    the final layernorm and the classifier for the last position only (B,1,Vp), which is all that
    sampling needs. Forward only: nothing is kept for a backward.
    """
    k, p, cfg = model.kernels, model.params, model.config
    tokens = np.asarray(tokens) if isinstance(tokens, (list, tuple)) else tokens
    if tokens.ndim != 2:
        raise ValueError(f"forward_cached: tokens must be (B,Tn), got shape {tuple(tokens.shape)}")
    B, Tn = tokens.shape
    t0 = cache.length
    if B != cache.batch:
        raise ValueError(f"forward_cached: tokens have batch {B}, the cache was made for {cache.batch}")
    if t0 + Tn > cache.capacity:
        raise ValueError(f"forward_cached: positions {t0}..{t0 + Tn - 1} exceed the model's block_size "
                         f"{cfg.block_size}; start a new cache")
    attention = k["attention_cached"]
    if attention.device != model.device and attention.variant.qualname not in _WARNED:
        _WARNED.add(attention.variant.qualname)
        warnings.warn(f"attention_cached runs on {attention.device} ({attention.variant.qualname}) while the "
                      f"model lives on {model.device}: the cache is copied there for every token", stacklevel=2)
    N, C = B * Tn, cfg.n_embd

    # positions t0.. are rows t0.. of wpe: the embedding op adds wpe's first Tn rows, so give it those
    x, _ = k["embedding"].forward({"tokens": tokens, "wte": p["wte.weight"], "wpe": p["wpe.weight"][t0:t0 + Tn]})
    x = x.reshape(N, C)  # (N,C) the residual stream of the new positions

    def attend(i, qkv):  # (N,3C) -> (N,C): layer i's new queries against every cached position
        qkv = qkv.reshape(B, Tn, 3 * C)
        keys, values = cache.append(i, qkv, t0)  # (B,t0+Tn,C) each
        att, _ = attention.forward({"q": qkv[:, :, :C], "k": keys, "v": values}, {"n_head": cfg.n_head})
        return to_device(att, model.device).reshape(N, C), None

    _, h = model.trunk(x, attend)  # (N,C) ln_f of the stream after the last layer
    cache.length = t0 + Tn
    rows = Tn
    if last_only:
        h = model.xp.ascontiguousarray(h.reshape(B, Tn, C)[:, -1])  # (B,C): ln_f works row by row
        rows = 1
    logits, _ = k["matmul"].forward({"x": h, "weight": p["wte.weight"]})  # (B*rows,Vp) tied
    return logits.reshape(B, rows, cfg.padded_vocab_size)
