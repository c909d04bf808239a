"""Sampling text from a model: temperature, top-k, top-p (nucleus), a seed, stop tokens (end-of-text,
the end of an assistant turn).

With the KV cache (the default, euler_core/kvcache.py) the prompt runs through the model once and
each new token then runs over itself only. Without it (`use_cache=False`, kept as the reference the
cached path is tested against) each new token runs the model over the whole (cropped) context.
Both sample from the last position's distribution on the host, and give the same tokens: when the
context outgrows block_size, the cached path starts a fresh cache over the last block_size tokens,
exactly the window the uncached path crops to (so past block_size it is no faster).
"""

from __future__ import annotations

import numpy as np

from .device import to_device


def sample_next(logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0,
                top_k: int | None = None, top_p: float | None = None) -> int:
    """One token id drawn from `logits` (V,) after temperature, top-k and top-p filtering.
    temperature 0 means greedy (the argmax)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    logits = logits / temperature
    if top_k is not None and 0 < top_k < logits.size:
        kth = np.partition(logits, -top_k)[-top_k]
        logits = np.where(logits < kth, -np.inf, logits)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    if top_p is not None and 0 < top_p < 1:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cumulative, top_p)) + 1]  # smallest set reaching top_p
        mask = np.zeros_like(probs, dtype=bool)
        mask[keep] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return int(rng.choice(probs.size, p=probs))


def generate(model, prompt: list[int], max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_token=None,
             use_cache: bool = True) -> list[int]:
    """The prompt's continuation (new token ids only), sampled one token at a time.

    stop_token: an id, or a collection of ids, that ends the generation (not included in the output).
    """
    if not prompt:
        raise ValueError("generate: the prompt must hold at least one token")
    stops = set() if stop_token is None else ({int(stop_token)} if np.isscalar(stop_token) else
                                              {int(t) for t in stop_token})
    rng = np.random.default_rng(seed)
    tokens = list(prompt)
    out: list[int] = []
    V, block = model.config.vocab_size, model.config.block_size
    cache = None
    if use_cache:
        from .kvcache import KVCache
        cache = KVCache(model, batch=1)
    for _ in range(max_new_tokens):
        if cache is None:
            context = np.array([tokens[-block:]], dtype=np.int32)  # (1,T)
            logits, _ = model.forward(context)
        elif cache.length == 0 or cache.length >= block:  # (re)fill: the prompt, or the cropped window
            cache.reset()
            logits = model.forward_cached(np.array([tokens[-block:]], dtype=np.int32), cache, last_only=True)
        else:
            logits = model.forward_cached(np.array([tokens[-1:]], dtype=np.int32), cache, last_only=True)
        last = to_device(logits[0, -1, :V], "cpu")  # the real vocabulary only, not the padding
        token = sample_next(last, rng, temperature, top_k, top_p)
        if token in stops:
            break
        tokens.append(token)
        out.append(token)
    return out
