"""Sampling text from a model: one prompt or a batch of prompts of different lengths; temperature,
top-k, top-p (nucleus), a seed, stop tokens (end-of-text, the end of an assistant turn).

    generate(model, [15496, 995], 20)                        # -> 20 new ids (fewer at a stop token)
    generate(model, [[15496, 995], [40, 588, 11]], 20)       # -> one list of new ids per prompt

With the KV cache (the default, euler_core/kvcache.py) the prompts run through the model once, as
one right-padded block, and each new token then runs over itself only: `DecodeStep`, one token for
every row as a fixed sequence of kernel launches on fixed buffers, captured as a CUDA graph on the
GPU after its first (eager) call and replayed for every later token (euler_core/graph.py). Without
the cache (`use_cache=False`, the reference the cached path is tested against) each new token runs
the model over each row's whole (cropped) context. Both give the same tokens: when a row's context
outgrows block_size, the cached path refills that row's cache with its last block_size tokens,
exactly the window the uncached path crops to (so past block_size it is no faster).

Sampling happens on the model's device (`Sampler`): the logits never travel to the host, only the
B sampled ids do, once a token (to stop rows at a stop token). Greedy (temperature 0) is the argmax.
Otherwise, with z = logits / temperature over the real vocabulary:

    top-k   keep z >= the k-th largest z (ties with it stay)
    top-p   p = softmax(z); keep p >= tau, tau the largest value whose kept mass sum(p[p >= tau])
            still reaches top_p: the smallest set of most likely tokens that reaches top_p (ties
            at tau stay)
    draw    argmax over the kept tokens of z + g, g = -log(-log(u)) Gumbel noise: a draw from
            softmax(z) restricted to them (the Gumbel-max trick), with no cumulative sum

Both thresholds are found by bisection over the order-preserving integer image of float32 values
(33 halvings make them exact), not by sorting: a sort on the GPU goes through thrust, which a CUDA
graph cannot hold. The uniforms u are a counter-based hash (splitmix64) of (seed, step, row, token),
so a draw depends on nothing but those four: the same seed gives the same tokens batched or not,
cached or not, and a graph replays with a new step by rewriting one number on the device.
"""

from __future__ import annotations

import contextlib
import math
import warnings
import weakref

import numpy as np

from .device import to_device
from .kvcache import KVCache, forward_at, forward_cached


# ---- sampling on the device -----------------------------------------------------------------------
def _splitmix64(x):
    """splitmix64's finaliser on uint64 arrays (NumPy or CuPy; wraps modulo 2^64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _ordered(z, xp):
    """int64 keys with the order of the float32 values z (-inf and -0.0 included)."""
    bits = z.view(np.int32).astype(np.int64)
    return xp.where(bits >= 0, bits, -(bits & 0x7FFFFFFF) - 1)


class Sampler:
    """Token ids (R,) int32 from logits (R,Vp) on the logits' device: see the module docstring.

    temperature 0 means greedy; top_k None or 0 (or >= V) and top_p None (or 1) mean no filtering."""

    BISECTIONS = 33  # halvings of an int64 key range no wider than 2^33: the thresholds are exact

    def __init__(self, vocab_size: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None):
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"generate: temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
        if top_k is not None and (not isinstance(top_k, (int, np.integer)) or top_k < 0):
            raise ValueError(f"generate: top_k must be an int >= 0 (0 or None: no top-k), got {top_k!r}")
        if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
            raise ValueError(f"generate: top_p must lie in (0, 1] (or None: no top-p), got {top_p!r}")
        self.vocab_size = vocab_size
        self.temperature = float(temperature)
        self.top_k = None if not top_k or top_k >= vocab_size else int(top_k)
        self.top_p = None if top_p is None or top_p >= 1 else float(top_p)
        self.key = (vocab_size, self.temperature, self.top_k, self.top_p)  # what a captured graph bakes in

    @staticmethod
    def counter(seed: int | None, step: int) -> np.ndarray:
        """The draw's counter (2,) uint64 on the host: (seed, step); seed None: a fresh one from the
        OS (not reproducible, as asked)."""
        if seed is None:
            seed = int(np.random.SeedSequence().entropy)
        return np.array([int(seed) % 2**64, step], dtype=np.uint64)

    def __call__(self, logits, counter, rows):
        """logits (R,Vp) (only the first vocab_size columns are real), counter (2,) uint64 (seed,
        step) and rows (R,) uint64 on the same device."""
        xp = _xp(logits)
        z = logits[:, :self.vocab_size].astype(np.float32)  # (R,V)
        if self.temperature == 0:
            return xp.argmax(z, axis=1).astype(np.int32)
        z = z / np.float32(self.temperature)
        if self.top_k is not None:
            keys = _ordered(z, xp)
            z = xp.where(keys >= self._bisect(keys, lambda ok: ok.sum(axis=1) >= self.top_k, xp)[:, None],
                         z, -np.inf)
        if self.top_p is not None:
            e = xp.exp(z - z.max(axis=1, keepdims=True))
            probs = e / e.sum(axis=1, keepdims=True)      # (R,V), >= 0: the bits order them
            keys = probs.view(np.int32).astype(np.int64)
            z = xp.where(keys >= self._bisect(keys, lambda ok: (probs * ok).sum(axis=1) >= self.top_p, xp)[:, None],
                         z, -np.inf)
        return xp.argmax(z + self._gumbel(counter, rows, xp), axis=1).astype(np.int32)

    def _bisect(self, keys, enough, xp):
        """Per row, the largest key t with enough(keys >= t) (true at the row's smallest key)."""
        lo = keys.min(axis=1)                     # (R,) enough here: every token kept
        hi = keys.max(axis=1) + 1                 # never enough: no token kept
        for _ in range(self.BISECTIONS):
            mid = (lo + hi) // 2
            ok = enough(keys >= mid[:, None])
            lo, hi = xp.where(ok, mid, lo), xp.where(ok, hi, mid)
        return lo

    def _gumbel(self, counter, rows, xp):
        """(R,V) float32 Gumbel noise from uniforms hashed from (seed, step, row, token)."""
        h = _splitmix64(counter[1:] * np.uint64(0x9E3779B97F4A7C15) ^ _splitmix64(counter[:1]))   # (1,)
        h = _splitmix64(h + rows * np.uint64(0xD1B54A32D192ED03))                                  # (R,)
        bits = _splitmix64(h[:, None] + xp.arange(self.vocab_size, dtype=np.uint64)[None, :])      # (R,V)
        u = ((bits >> np.uint64(40)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -24)  # (0,1)
        return -xp.log(-xp.log(u))


def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


# ---- the decoding step --------------------------------------------------------------------------
class DecodeStep:
    """One new token for each of B rows: the model over each row's newest token (`tokens`, at
    `positions`) against the cache, then sampling, the result written back into `tokens`. The
    buffers are fixed, so on the GPU the step is captured as a CUDA graph after its first, eager
    call (which compiles every kernel), and replayed after that; the host only rewrites the
    positions and the sampler's counter before each call.

    A step holds its KV cache; `decode_step()` keeps the latest ones of each model, so that a
    second generation of the same batch size and sampling settings reuses the cache's memory and
    the captured graph (a capture costs as much as tens of tokens)."""

    def __init__(self, model, batch: int, sampler: Sampler, graph: bool):
        xp = model.xp
        self.model = weakref.proxy(model)  # kept per model (decode_step): no reference back to it
        self.sampler = sampler
        self.cache = KVCache(model, batch)
        self.tokens = xp.zeros((batch, 1), dtype=np.int32)     # in: each row's newest token; out: the next
        self.positions = xp.zeros((batch, 1), dtype=np.int32)  # in: where the newest token goes
        self.lengths = xp.zeros(batch, dtype=np.int32)         # positions + 1, computed in the step
        self.counter = xp.zeros(2, dtype=np.uint64)            # in: the sampler's (seed, step)
        self.rows = xp.arange(batch, dtype=np.uint64)
        self.use_graph = graph and model.device == "cuda"
        self.graph = None
        self.calls = 0

    def run(self) -> None:
        xp = self.model.xp
        xp.add(self.positions[:, 0], 1, out=self.lengths)
        logits = forward_at(self.model, self.tokens, self.positions, self.lengths, self.cache, fresh=False)
        self.tokens[:, 0] = self.sampler(logits[:, 0], self.counter, self.rows)

    def __call__(self, positions: np.ndarray, counter: np.ndarray) -> None:
        """Sample the next token of every row into `tokens`; positions (B,) and counter (2,) on the host."""
        _write(self.positions, positions.reshape(-1, 1))
        _write(self.counter, counter)
        self.calls += 1
        if self.use_graph and self.calls > 1:
            if self.graph is None:
                from .graph import CapturedGraph, GraphCaptureError
                try:
                    self.graph = CapturedGraph(self.run, "decoding step")
                except GraphCaptureError as e:
                    warnings.warn(f"{e}; decoding runs without a CUDA graph", stacklevel=2)
                    self.use_graph = False
            if self.graph is not None:
                self.graph.replay()
                return
        self.run()


_STEPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
KEEP_STEPS = 2  # decoding steps (caches, graphs) kept per model, the most recently used


def decode_step(model, batch: int, sampler: Sampler, graph: bool) -> DecodeStep:
    """A DecodeStep for this model, batch size and sampling settings: a kept one, or a new one."""
    steps = _STEPS.setdefault(model, {})
    key = (batch, sampler.key, graph)
    step = steps.pop(key, None)
    if step is None:
        while len(steps) >= KEEP_STEPS:  # free the oldest first (its cache may be large)
            steps.pop(next(iter(steps)))
        step = DecodeStep(model, batch, sampler, graph)
    steps[key] = step  # now the most recent
    step.cache.reset()
    return step


def graph_in_use(model) -> bool:
    """Whether a kept decoding step of this model replays a captured CUDA graph (benchmarks say so)."""
    return any(step.graph is not None for step in _STEPS.get(model, {}).values())


def _write(dst, host: np.ndarray) -> None:
    """Copy host values into a device buffer of the same shape, in stream order."""
    host = np.ascontiguousarray(host, dtype=dst.dtype)
    if isinstance(dst, np.ndarray):
        dst[...] = host
    else:
        import cupy
        dst.set(host, stream=cupy.cuda.get_current_stream())


@contextlib.contextmanager
def _on_stream(model):
    """The GPU work of a generation on one stream (the one graphs are captured and replayed on)."""
    if model.device != "cuda":
        yield
        return
    from .graph import work_stream
    with work_stream():
        yield


# ---- generation -----------------------------------------------------------------------------------
def generate(model, prompt, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, stop_token=None, use_cache: bool = True,
             graph: bool = True):
    """The continuation (new token ids only) of one prompt (a list of ids), or of each prompt of a
    list of prompts or a (B,T) array (then a list of lists), sampled one token at a time.

    stop_token: an id, or a collection of ids, that ends a row's generation (not included in its
    output). graph: capture the decoding step as a CUDA graph on the GPU (False: launch every
    kernel from Python each token, for debugging).
    """
    batched = (isinstance(prompt, np.ndarray) and prompt.ndim == 2) or (
        isinstance(prompt, (list, tuple)) and len(prompt) > 0 and not np.isscalar(prompt[0]))
    prompts = _check_prompts(model, prompt if batched else [prompt])
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    stops = set() if stop_token is None else ({int(stop_token)} if np.isscalar(stop_token) else
                                              {int(t) for t in stop_token})
    sampler = Sampler(model.config.vocab_size, temperature, top_k, top_p)
    if seed is None:  # one fresh seed for the whole generation
        seed = int(Sampler.counter(None, 0)[0])
    if not max_new_tokens:
        outs = [[] for _ in prompts]
    else:
        with _on_stream(model):
            outs = (_generate_cached(model, prompts, int(max_new_tokens), sampler, seed, stops, graph) if use_cache
                    else _generate_uncached(model, prompts, int(max_new_tokens), sampler, seed, stops))
    return outs if batched else outs[0]


def _check_prompts(model, prompts) -> list[list[int]]:
    V, block = model.config.vocab_size, model.config.block_size
    checked = []
    for i, p in enumerate(prompts):
        name = "the prompt" if len(prompts) == 1 else f"prompt {i}"
        ids = [int(t) for t in np.asarray(p).reshape(-1)]
        if not ids:
            raise ValueError(f"generate: {name} is empty: it must hold at least one token")
        if len(ids) > block:
            raise ValueError(f"generate: {name} has {len(ids)} tokens, more than the model's context "
                             f"(block_size {block})")
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise ValueError(f"generate: {name} holds token ids outside the vocabulary [0, {V}): {bad[:5]}")
        checked.append(ids)
    return checked


class _Rows:
    """The host's record of a batch: each row's tokens so far, new tokens, and whether it is done."""

    def __init__(self, prompts, max_new: int, stops: set):
        self.seqs = [list(p) for p in prompts]
        self.outs = [[] for _ in prompts]
        self.active = np.ones(len(prompts), dtype=bool)
        self.max_new, self.stops = max_new, stops

    def take(self, ids, rows=None) -> None:
        """The sampled ids of `rows` (default all): append, or stop the row."""
        for b, t in zip(range(len(self.seqs)) if rows is None else rows, (int(t) for t in ids)):
            if not self.active[b]:
                continue
            if t in self.stops:
                self.active[b] = False
                continue
            self.seqs[b].append(t)
            self.outs[b].append(t)
            self.active[b] = len(self.outs[b]) < self.max_new


def _generate_cached(model, prompts, max_new: int, sampler: Sampler, seed: int | None, stops: set, graph: bool):
    block = model.config.block_size
    B = len(prompts)
    rows = _Rows(prompts, max_new, stops)
    step = decode_step(model, B, sampler, graph)
    cache = step.cache
    counter = Sampler.counter(seed, 0)
    lengths = np.array([len(p) for p in prompts])
    padded = np.zeros((B, int(lengths.max())), dtype=np.int32)  # (B,T) right-padded prompts
    for b, p in enumerate(prompts):
        padded[b, :len(p)] = p
    logits = forward_cached(model, padded, cache, last_only=True, lengths=lengths)  # (B,1,Vp)
    step.tokens[:, 0] = sampler(logits[:, 0], to_device(counter, model.device), step.rows)
    for s in range(1, max_new + 1):
        rows.take(to_device(step.tokens[:, 0], "cpu"))
        if not rows.active.any() or s == max_new:
            break
        counter[1] = s
        full = rows.active & (cache.lengths >= block)    # contexts past block_size: refilled below
        step(np.minimum(cache.lengths, block - 1), counter)  # done and full rows: results unused
        cache.lengths[rows.active & ~full] += 1
        for b in np.flatnonzero(full):  # this row's window, as the uncached path crops it
            row = cache.row(b)
            row.reset()
            window = np.array([rows.seqs[b][-block:]], dtype=np.int32)
            last = forward_cached(model, window, row, last_only=True)[:, 0]  # (1,Vp)
            step.tokens[b:b + 1, 0] = sampler(last, to_device(counter, model.device), step.rows[b:b + 1])
    return rows.outs


def _generate_uncached(model, prompts, max_new: int, sampler: Sampler, seed: int | None, stops: set):
    xp, block = model.xp, model.config.block_size
    rows = _Rows(prompts, max_new, stops)
    counter = Sampler.counter(seed, 0)
    for s in range(max_new):
        counter[1] = s
        live = np.flatnonzero(rows.active)
        contexts = [rows.seqs[b][-block:] for b in live]
        padded = np.zeros((len(live), max(len(c) for c in contexts)), dtype=np.int32)  # right-padded
        for i, c in enumerate(contexts):
            padded[i, :len(c)] = c
        logits, _ = model.forward(padded)  # (R,T,Vp)
        last = to_device(np.array([len(c) - 1 for c in contexts]), model.device)
        ids = sampler(logits[xp.arange(len(live)), last], to_device(counter, model.device),
                      to_device(live.astype(np.uint64), model.device))
        rows.take(to_device(ids, "cpu"), live)
        if not rows.active.any():
            break
    return rows.outs
