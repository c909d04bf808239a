"""attention: GPT-2's causal multi-head self-attention, from the fused qkv projection.

qkv (B,T,3C) holds q, k, v side by side along the last axis; each is split into NH heads of
HS = C / NH channels. Per batch b and head h (q, k, v of shape (T,HS)):

    S = q @ k.T / sqrt(HS)                       (T,T) scores
    S[t, s] = -inf where s > t                   causal: a position sees only itself and the past
    P = softmax(S) along s                       (T,T) attention weights
    y = P @ v                                    (T,HS)

and the heads are put back side by side: out (B,T,C). The backward, given dy (T,HS) per head:

    dv = P.T @ dy
    dP = dy @ v.T
    dS = P * (dP - rowsum(dP * P))               softmax backward, row by row
    dq = dS @ k / sqrt(HS)        dk = dS.T @ q / sqrt(HS)

`saved` is the variant's choice: the naive backend keeps P (B,NH,T,T); a flash variant keeps the
logsumexp of each row (B,NH,T) and recomputes P.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import REQUIRED, OpSpec, expect_array, nbytes, random_float


@dataclass(frozen=True)
class AttentionSpec(OpSpec):
    name: str = "attention"
    inputs: tuple = ("qkv",)
    params: tuple = ()
    differentiable: tuple = ("qkv",)
    attrs: dict = field(default_factory=lambda: {"n_head": REQUIRED})

    def check(self, inputs, attrs):
        B, T, C3 = expect_array(self.name, "qkv", inputs["qkv"], 3)
        n_head = attrs["n_head"]
        if not isinstance(n_head, int) or n_head < 1:
            raise ValueError(f"attention: n_head must be a positive int, got {n_head!r}")
        if C3 % 3:
            raise ValueError(f"attention: qkv's last axis must be 3*C, got {C3} (not a multiple of 3)")
        if (C3 // 3) % n_head:
            raise ValueError(f"attention: C={C3 // 3} channels do not split into n_head={n_head} heads")

    def output_shape(self, inputs, attrs):
        B, T, C3 = inputs["qkv"].shape
        return (B, T, C3 // 3)

    def flops(self, inputs, attrs):
        # Two matmuls of T x T x HS per head forward, halved by the causal mask; five backward.
        B, T, C3 = inputs["qkv"].shape
        C = C3 // 3
        forward = 2 * B * T * T * C
        return {"forward": forward, "backward": forward * 5 // 2}

    def bytes_moved(self, inputs, attrs):
        qkv = inputs["qkv"]
        out = nbytes(qkv) // 3
        return {"forward": nbytes(qkv) + out, "backward": 2 * nbytes(qkv) + 2 * out}

    def example(self, dims, dtype, rng):
        B, T, C = dims["B"], dims["T"], dims["C"]
        return {"qkv": random_float(rng, (B, T, 3 * C), dtype)}, {"n_head": dims["NH"]}


SPEC = AttentionSpec()
