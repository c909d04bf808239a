"""classifier_crossentropy, triton: the tied classifier and the loss, a chunk of rows at a time, so
that only one chunk's logits ever exist (matmul.py's GEMM and crossentropy.py's two kernels; no
kernel of its own).

For each chunk of R rows (the last one shorter), in two reusable buffers, z (R, Vp) float32 and
d (R, Vp) in x's dtype (for float32 x, d is z itself):

    z  = x[chunk] @ W.T                   the lm_head GEMM (matmul's tuned (50304, 768) forward tile),
                                          its float32 accumulator stored as it is
    losses[chunk], lse = ...              crossentropy's forward kernel on z (online logsumexp)
  and, given dlosses (training):
    d  = dlosses * (softmax(z) - onehot)  crossentropy's backward kernel (dlogits), rounded to x's dtype
    dx[chunk]  = d @ W                    a dx GEMM: few output tiles over a deep K = Vp, so K is
                                          cut into slices (split-K, summed in order)
    dW_local  (+)= d.T @ x[chunk]         a dW GEMM into a float32 (Vp, C) buffer, the first chunk
                                          writing it, the others accumulating

backward adds dW_local to grads["weight"] (one pass) and hands dx on.

Why float32 logits. A logit's absolute rounding error becomes the relative error of its
probability (softmax is exp), and that error grows with the logit: bf16 logits of |z| ~ 40 carry
~0.08, an 8% error in p. Unfused, the logits are a (N, Vp) activation and must be 16-bit (llm.c and
PyTorch's autocast round them too); here only a chunk exists, so it can stay float32: the loss and
the softmax are then as exact as the GEMM, and the conformance suite's bf16 gradient tolerance holds
(with bf16 logits, a float64 simulation of its cases failed 11 of 48 case-seeds, with float32 none).
The price is bytes: the loss kernels read 4 bytes a logit instead of 2.

Memory beyond the inputs: z and d (R x Vp x 6 bytes for 16-bit x), dx (N, C), dW_local (Vp x C
float32, 154 MB at GPT-2), against (N, Vp) logits and as many dlogits unfused (1.65 GB each at
N = 16384 in bf16). Traffic against the unfused composition: each chunk re-reads W for two GEMMs
(77 MB in bf16, from L2 in part); the float32 dW_local is read and written once per chunk (2 x 154
MB) where one dW GEMM over all rows writes it once; dx's split-K slices add a small float32 partial
per chunk; the float32 logits add 2 bytes a logit to the GEMM's store and the two loss kernels'
reads. Bigger chunks amortise the W and dW_local traffic.

Rows per chunk: the largest power of two whose z and d fit in CONFIG["scratch_bytes"] (2048 rows at
Vp = 50304: 618 MB for bf16 x, 412 MB for float32), at most N. Without dlosses only the first two
steps run (z only).
"""

from dataclasses import dataclass

from euler_core.ops.classifier_crossentropy import SPEC

from . import _common, _reduce, crossentropy, matmul
from ._runtime import xp_of
from .residual import copy_into

OP = "classifier_crossentropy"

#: the chunk's buffers (z and d) may take this many bytes; dx's K (= Vp) may be cut into this many slices
CONFIG = {"scratch_bytes": 640 * 2 ** 20, "dx_split_k": 8}


@dataclass
class Saved:
    dlosses: object  # (N,) the gradient given ahead (None: an evaluation forward)
    dx: object       # (N,C) in x's dtype
    dweight: object  # (Vp,C) float32


def row_bytes(Vp: int, itemsize: int) -> int:
    """Bytes of z and d per row of a chunk (d is z itself for float32 x)."""
    return Vp * (4 + (itemsize if itemsize != 4 else 0))


def chunk_rows(N: int, Vp: int, itemsize: int, scratch_bytes: int) -> int:
    """Rows per chunk: the largest power of two whose z and d fit, at least 1, at most N."""
    fit = max(1, scratch_bytes // row_bytes(Vp, itemsize))
    return min(N, 1 << (fit.bit_length() - 1))


def forward(inputs, attrs, out=None, config=None):
    x, weight, targets, dlosses = inputs["x"], inputs["weight"], inputs["targets"], inputs.get("dlosses")
    matmul.check_operands(x, weight, None, op=OP)
    _common.check_contiguous(OP, dlosses=dlosses)
    cfg = {**CONFIG, **(config or {})}
    N, C = x.shape
    Vp = weight.shape[0]
    n_valid = attrs["n_valid"] or Vp
    xp = xp_of(x)
    targets = xp.ascontiguousarray(targets)  # often a view of a token window: copy (N ints)
    losses = _common.output(OP, xp, out, (N,), "float32")
    R = chunk_rows(N, Vp, x.dtype.itemsize, cfg["scratch_bytes"])
    z = xp.empty((R, Vp), dtype="float32")  # one chunk's logits
    lse = xp.empty((R,), dtype="float32")
    train = dlosses is not None
    if train:
        d = z if str(x.dtype) == "float32" else xp.empty((R, Vp), dtype=x.dtype)  # its dlogits
        dx = xp.empty((N, C), dtype=x.dtype)
        dweight = xp.empty((Vp, C), dtype="float32")
        dx_config = None if str(x.dtype) == "float32" else {**matmul.CONFIGS[("16", "dx")],
                                                            "split_k": cfg["dx_split_k"]}
    for r0 in range(0, N, R):
        n = min(R, N - r0)
        rows, zc = slice(r0, r0 + n), z[:n]
        matmul.gemm(x[rows], weight, zc, (C, 1), (1, C), n, Vp, C, weight_shape=(Vp, C))        # z = x W^T
        crossentropy.losses_into(zc, targets[rows], losses[rows], lse[:n], n_valid)
        if not train:
            continue
        dc = d[:n]
        crossentropy.dlogits_into(zc, targets[rows], lse[:n], dlosses[rows], dc, n_valid)       # d = dlogits
        matmul.gemm(dc, weight, dx[rows], (Vp, 1), (C, 1), n, C, Vp, product="dx", weight_shape=(Vp, C),
                    config=dx_config)                                                            # dx = d W
        matmul.gemm(dc, x[rows], dweight, (1, Vp), (C, 1), Vp, C, n, accumulate=r0 > 0, product="dW",
                    weight_shape=(Vp, C))                                                        # dW (+)= d^T x
    return losses, (Saved(dlosses, dx, dweight) if train else Saved(None, None, None))


def backward(saved, grad_output, grads):
    SPEC.check_backward(saved.dlosses, grad_output)
    dx = saved.dx
    dW = _common.param_grad(OP, grads, "weight", saved.dweight.shape, dx.dtype)  # float32 for 16-bit x
    dx_buf = None if grads.get("x") is None else _common.grad_buffer(OP, grads, "x", dx, xp_of(dx))
    _reduce.splitk_finish_into(saved.dweight[None], dW, accumulate=True)         # grads += dW_local
    return {"x": dx if dx_buf is None else copy_into(dx, dx_buf), "weight": dW}
