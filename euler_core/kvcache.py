"""Generation with a KV cache: each layer's keys and values of every position so far, kept so that
a new token runs the model over itself only.

Without a cache, sampling token t runs the whole context (t positions) through every layer again.
With one, the keys and values of positions < t are already known: the new token's q, k, v come from
its own row, its k and v are written into the cache, and `attention_cached` lets its query attend
to every cached key. Everything else in a block (layernorm, matmuls, GELU, residual) is per
position, so it runs on the new rows only.

    cache = KVCache(model, batch=2)
    logits = forward_cached(model, prompts, cache, lengths=[5, 3])   # prefill: (2,5,Vp); row 1 is
                                                                      # right-padded, holds 3 positions
    logits = forward_cached(model, [[a], [b]], cache)                 # one step: row 0 at position 5,
                                                                      # row 1 at position 3

Memory. The cache lives on the model's device, allocated once for block_size positions: per layer
two (B, block_size, C) arrays in the activations' dtype, the layout the qkv projection makes them
(heads side by side). Allocating it checks that it fits (a clear error naming the batch, not an
out-of-memory failure halfway through a generation).

Rows of different lengths. Each row has its own length (`cache.lengths`, on the host): the new
tokens of row b go to positions lengths[b], lengths[b] + 1, ...; their position embeddings are the
rows of wpe at those positions, gathered, and the `embedding` op adds them (it adds wpe's row t to
the t-th token, so the batch is handed to it as one sequence of N = B*Tn tokens beside the N
gathered rows). Keys past a row's length are never read (`attention_cached`'s `lengths`), so a
batch of prompts is prefilled as one right-padded block: causal attention keeps each real
position blind to the padding after it, the padding's keys land past the row's length, and the
first decoding step of that row overwrites them.

`forward_at` is the device-side part, a fixed sequence of kernel launches given device buffers
for the tokens, their positions and the rows' lengths: the decoding step that generate.py captures
as a CUDA graph and replays. When every row starts at position 0 (a prompt), the attention is the
training `attention` op over the new positions themselves (the fastest kernels, FlashAttention on
the GPU); otherwise `attention_cached` over the whole cache.

What it does not do: slide past block_size (the context is full then; generate.py refills a row's
cache with its last block_size tokens instead).
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .device import to_device


class KVCache:
    """Per layer, the keys and values of B rows; row b holds positions [0, lengths[b])."""

    def __init__(self, model, batch: int = 1):
        cfg = model.config
        if not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"KVCache: batch must be a positive int, got {batch!r}")
        self.batch = int(batch)
        self.capacity = cfg.block_size
        self.lengths = np.zeros(self.batch, dtype=np.int64)  # (B,) positions filled, per row
        xp, C = model.xp, cfg.n_embd
        dtype = model.params["wte.weight"].dtype  # the activations' dtype (16-bit in a 16-bit model)
        shape = (self.batch, cfg.block_size, C)   # (B,maxT,C)
        check_fits(model, 2 * cfg.n_layer * int(np.prod(shape)) * np.dtype(dtype).itemsize,
                   f"the KV cache of {self.batch} rows x {cfg.block_size} positions")
        self.k = [xp.zeros(shape, dtype=dtype) for _ in range(cfg.n_layer)]
        self.v = [xp.zeros(shape, dtype=dtype) for _ in range(cfg.n_layer)]

    def reset(self) -> None:
        self.lengths[:] = 0

    def row(self, b: int) -> "KVCache":
        """A one-row cache sharing row b's memory (to refill that row alone)."""
        view = object.__new__(KVCache)
        view.batch, view.capacity = 1, self.capacity
        view.lengths = self.lengths[b:b + 1]  # a view: what the one-row cache fills, row b holds
        view.k = [k[b:b + 1] for k in self.k]
        view.v = [v[b:b + 1] for v in self.v]
        return view


def check_fits(model, nbytes: int, what: str) -> None:
    """ValueError when `nbytes` more bytes do not fit in the model's device memory now."""
    if model.device == "cuda":
        import cupy
        free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
        where = "the GPU has"
    else:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        where = "this machine has"
    if nbytes > free:
        raise ValueError(f"{what} needs {nbytes / 2**30:.2f} GiB, but {where} {free / 2**30:.2f} GiB free: "
                         "use a smaller batch")


_WARNED: set = set()


def forward_cached(model, tokens, cache: KVCache, last_only: bool = False, lengths=None):
    """Logits (B,Tn,Vp) of new tokens (B,Tn) at positions [cache.lengths[b], cache.lengths[b] + Tn)
    of each row b, given the cache of every earlier position; the cache then holds them too.

    lengths: (B,) how many of each row's Tn tokens are real (default all): the rest is right
    padding, computed but not kept (the row's length grows by lengths[b] only). `last_only`
    computes the final layernorm and the classifier at each row's last real token only (B,1,Vp),
    which is all that sampling needs. Forward only: nothing is kept for a backward.
    """
    tokens = np.asarray(tokens) if isinstance(tokens, (list, tuple)) else tokens
    if tokens.ndim != 2:
        raise ValueError(f"forward_cached: tokens must be (B,Tn), got shape {tuple(tokens.shape)}")
    B, Tn = tokens.shape
    if B != cache.batch:
        raise ValueError(f"forward_cached: tokens have batch {B}, the cache was made for {cache.batch}")
    real = np.full(B, Tn, dtype=np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
    if real.shape != (B,) or (real < 1).any() or (real > Tn).any():
        raise ValueError(f"forward_cached: lengths must be (B,) = ({B},) ints in [1, {Tn}], got {lengths!r}")
    start = cache.lengths.copy()  # (B,)
    if int(start.max()) + Tn > cache.capacity:
        raise ValueError(f"forward_cached: positions up to {int(start.max()) + Tn - 1} exceed the model's "
                         f"block_size {cache.capacity}; start a new cache")
    attention = model.kernels["attention_cached"]
    if attention.device != model.device and attention.variant.qualname not in _WARNED:
        _WARNED.add(attention.variant.qualname)
        warnings.warn(f"attention_cached runs on {attention.device} ({attention.variant.qualname}) while the "
                      f"model lives on {model.device}: the cache is copied there for every token", stacklevel=2)
    device = model.device
    positions = start[:, None] + np.arange(Tn)  # (B,Tn)
    logits = forward_at(model, to_device(np.asarray(to_device(tokens, "cpu"), dtype=np.int32), device),
                        to_device(positions.astype(np.int32), device),
                        to_device((start + Tn).astype(np.int32), device), cache,
                        fresh=not start.any(),
                        last=to_device((real - 1).astype(np.int32), device) if last_only else None)
    cache.lengths[:] = start + real
    return logits


def forward_at(model, tokens, positions, lengths, cache: KVCache, fresh: bool, last=None):
    """The device side of forward_cached, with no host synchronisation: tokens (B,Tn) and positions
    (B,Tn) int32 (where each token goes), lengths (B,) int32 (each row's positions once these are
    written: positions[:, -1] + 1), all on the model's device. `fresh`: every row starts at
    position 0 (attention over the new positions themselves). `last` (B,) int32: logits at
    column last[b] of each row only (B,1,Vp). Writes the new keys and values into the cache; does
    not change cache.lengths (the host's record)."""
    k, p, cfg, xp = model.kernels, model.params, model.config, model.xp
    B, Tn = tokens.shape
    N, C = B * Tn, cfg.n_embd
    # the position embeddings of each row's positions, handed to the embedding op as wpe
    wpe_rows = xp.take(p["wpe.weight"], positions.reshape(N), axis=0)  # (N,C)
    x, _ = k["embedding"].forward({"tokens": tokens.reshape(1, N), "wte": p["wte.weight"], "wpe": wpe_rows})
    x = x.reshape(N, C)  # (N,C) the residual stream of the new positions
    # where the new keys and values go in the cache viewed as (B*maxT, C) rows
    slots = (xp.arange(B, dtype=np.int64)[:, None] * cache.capacity + positions).reshape(N)  # (N,)

    def attend(i, qkv):  # (N,3C) -> (N,C): layer i's new queries against every cached position
        qkv = qkv.reshape(B, Tn, 3 * C)
        cache.k[i].reshape(B * cache.capacity, C)[slots] = qkv[:, :, C:2 * C].reshape(N, C)
        cache.v[i].reshape(B * cache.capacity, C)[slots] = qkv[:, :, 2 * C:].reshape(N, C)
        if fresh:
            att, _ = k["attention"].forward({"qkv": qkv}, {"n_head": cfg.n_head})
        else:
            att, _ = k["attention_cached"].forward(
                {"q": qkv[:, :, :C], "k": cache.k[i], "v": cache.v[i], "lengths": lengths}, {"n_head": cfg.n_head})
        return to_device(att, model.device).reshape(N, C), None

    _, h = model.trunk(x, attend)  # (N,C) ln_f of the stream after the last layer
    rows = Tn
    if last is not None:
        h = h.reshape(B, Tn, C)[xp.arange(B), last]  # (B,C) each row's last real position (ln_f is per row)
        rows = 1
    logits, _ = k["matmul"].forward({"x": h, "weight": p["wte.weight"]})  # (B*rows,Vp) tied
    return logits.reshape(B, rows, cfg.padded_vocab_size)
