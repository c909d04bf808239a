"""attention_cached: causal attention of Tn new queries over a KV cache, for generation. Forward
only: it has no backward and nothing of it is differentiated.

The keys and values of every position so far are kept by the caller (euler_core/kvcache.py) in the
layout the qkv projection makes them, heads side by side: k, v (B,Tk,C). The queries are those of
the Tn newest positions of each row, q (B,Tn,C). Row b holds L_b = lengths[b] positions (the
optional input `lengths` (B,) int32; without it every L_b = Tk), the last Tn of them the queries'
own: query i sits at position t0 + i with t0 = L_b - Tn. Per batch b and head h (q (Tn,HS),
k and v (L_b,HS), HS = C / NH):

    S = q @ k[:L_b].T / sqrt(HS)                 (Tn,L_b) scores
    S[i, s] = -inf where s > t0 + i              causal: query i sees the cache and itself
    P = softmax(S) along s                       (Tn,L_b)
    y = P @ v[:L_b]                              (Tn,HS)

and the heads are put back side by side: out (B,Tn,C). Keys and values at positions >= L_b are
never read (they may hold anything: another row's longer prompt, or nothing yet). So one call
serves rows of different lengths (batched generation), and a CUDA graph captured over the whole
cache (Tk = block_size) replays for any lengths written into the same `lengths` array. With
Tn == Tk == L_b (t0 = 0) this is exactly the `attention` op on qkv = [q, k, v]; with Tn == 1 it is
one decoding step (no mask at all).

Why a separate op: with a cache, each new token costs O(Tk * C) instead of re-running the whole
context through the model (O(Tk^2 * C) attention plus Tk times every matmul). `attention`'s
contract (one qkv input, T queries over T keys) cannot express Tn != Tk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import REQUIRED, OpSpec, expect_array, expect_same_dtype, nbytes, random_float


@dataclass(frozen=True)
class AttentionCachedSpec(OpSpec):
    name: str = "attention_cached"
    inputs: tuple = ("q", "k", "v", "lengths")
    optional: tuple = ("lengths",)
    params: tuple = ()
    differentiable: tuple = ()  # forward only: inference never differentiates through the cache
    attrs: dict = field(default_factory=lambda: {"n_head": REQUIRED})
    inference_only: bool = True  # not part of a training step (kernels.py leaves it out of device checks)

    def check(self, inputs, attrs):
        B, Tn, C = expect_array(self.name, "q", inputs["q"], 3)
        Bk, Tk, Ck = expect_array(self.name, "k", inputs["k"], 3)
        Bv, Tv, Cv = expect_array(self.name, "v", inputs["v"], 3)
        expect_same_dtype(self.name, inputs, ("q", "k", "v"))
        n_head = attrs["n_head"]
        if not isinstance(n_head, int) or n_head < 1:
            raise ValueError(f"attention_cached: n_head must be a positive int, got {n_head!r}")
        if (Bk, Ck) != (B, C) or (Bv, Tv, Cv) != (Bk, Tk, Ck):
            raise ValueError(f"attention_cached: k and v must both be (B,Tk,C) = ({B},Tk,{C}) to match q "
                             f"{(B, Tn, C)}; got k {(Bk, Tk, Ck)}, v {(Bv, Tv, Cv)}")
        if Tk < Tn:
            raise ValueError(f"attention_cached: k holds Tk={Tk} positions, fewer than the Tn={Tn} queries "
                             "(the cache must already include the new positions' keys)")
        if C % n_head:
            raise ValueError(f"attention_cached: C={C} channels do not split into n_head={n_head} heads")
        lengths = inputs.get("lengths")
        if lengths is not None:
            expect_array(self.name, "lengths", lengths, 1, kind="int")
            if tuple(lengths.shape) != (B,):
                raise ValueError(f"attention_cached: lengths must be (B,) = ({B},), one per row, got "
                                 f"{tuple(lengths.shape)}")
            if isinstance(lengths, np.ndarray) and lengths.size:  # device values are not read (no sync)
                lo, hi = int(lengths.min()), int(lengths.max())
                if lo < Tn or hi > Tk:
                    raise ValueError(f"attention_cached: lengths must lie in [Tn, Tk] = [{Tn}, {Tk}] (each row "
                                     f"holds its Tn queries' keys, within the cache), got values in [{lo}, {hi}]")

    def output_shape(self, inputs, attrs):
        return tuple(inputs["q"].shape)

    def flops(self, inputs, attrs):
        # Two matmuls of Tn x Tk x HS per head (the causal part of the new block, and the positions
        # past each row's length, are not subtracted).
        B, Tn, C = inputs["q"].shape
        Tk = inputs["k"].shape[1]
        return {"forward": 4 * B * Tn * Tk * C, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        return {"forward": nbytes(q, k, v) + nbytes(q), "backward": 0}

    def example(self, dims, dtype, rng):
        """dims: B, Tn (new positions), Tk (all positions, Tk >= Tn; default Tn), C, NH, and
        `lengths` (a list of B ints in [Tn, Tk]: rows of different lengths; keys and values past
        each row's length are NaN, which a kernel that reads them turns into a NaN output)."""
        B, Tn, C = dims["B"], dims["Tn"], dims["C"]
        Tk = dims.get("Tk", Tn)
        inputs = {"q": random_float(rng, (B, Tn, C), dtype), "k": random_float(rng, (B, Tk, C), dtype),
                  "v": random_float(rng, (B, Tk, C), dtype)}
        if "lengths" in dims:
            lengths = np.asarray(dims["lengths"], dtype=np.int32)
            for b, n in enumerate(lengths):
                inputs["k"][b, n:] = np.nan
                inputs["v"][b, n:] = np.nan
            inputs["lengths"] = lengths
        return inputs, {"n_head": dims["NH"]}


SPEC = AttentionCachedSpec()
