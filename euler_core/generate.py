"""Sampling text from a model: temperature, top-k, top-p (nucleus), a seed, stop at end-of-text.

Each new token runs the model over the (cropped) context and samples from the last position's
distribution on the host. (A KV cache, which avoids recomputing the context, is a later addition.)
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
             top_p: float | None = None, seed: int | None = None, stop_token: int | None = None) -> list[int]:
    """The prompt's continuation (new token ids only), sampled one token at a time."""
    if not prompt:
        raise ValueError("generate: the prompt must hold at least one token")
    rng = np.random.default_rng(seed)
    tokens = list(prompt)
    out: list[int] = []
    V = model.config.vocab_size
    for _ in range(max_new_tokens):
        context = np.array([tokens[-model.config.block_size:]], dtype=np.int32)  # (1,T)
        logits, _ = model.forward(context)
        last = to_device(logits[0, -1, :V], "cpu")  # the real vocabulary only, not the padding
        token = sample_next(last, rng, temperature, top_k, top_p)
        if stop_token is not None and token == stop_token:
            break
        tokens.append(token)
        out.append(token)
    return out
