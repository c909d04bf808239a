"""classifier_crossentropy, triton: the tied classifier and the loss, a chunk of rows at a time, so
that only one chunk's logits ever exist (matmul.py's GEMM and crossentropy.py's two kernels; no
kernel of its own).

For each chunk of R rows (the last one shorter), in one reusable (R, Vp) buffer z:

    z  = x[chunk] @ W.T                   the lm_head GEMM (matmul's tuned (50304, 768) forward tile)
    losses[chunk], lse = ...              crossentropy's forward kernel on z (online logsumexp)
  and, given dlosses (training):
    z  = dlosses * (softmax(z) - onehot)  crossentropy's backward kernel, in place (dlogits)
    dx[chunk]  = z @ W                    a dx GEMM: few output tiles over a deep K = Vp, so K is
                                          cut into slices (split-K, summed in order)
    dW_local  (+)= z.T @ x[chunk]         a dW GEMM into a float32 (Vp, C) buffer, the first chunk
                                          writing it, the others accumulating

backward adds dW_local to grads["weight"] (one pass) and hands dx on. Memory beyond the inputs:
z (R x Vp in x's dtype), dx (N, C), dW_local (Vp x C float32, 154 MB at GPT-2), against (N, Vp)
logits and as many dlogits unfused (3.3 GB each at N = 32768 in bf16).

What it costs against the unfused composition: the logits' traffic is the same (each chunk is
written, read twice and written again, as the whole array would be); each chunk re-reads W for two
GEMMs (77 MB in bf16, from L2 in part); the float32 dW_local is read and written once per chunk
(2 x 154 MB) where one dW GEMM over all rows writes it once; dx's split-K slices add a small
float32 partial per chunk. Bigger chunks amortise the last two; CONFIG bounds the chunk's buffer.

Rows per chunk: the largest power of two whose logits fit in CONFIG["scratch_bytes"] (2048 rows at
Vp = 50304 in bf16: 206 MB; 1024 in float32), at most N. Without dlosses only the first two steps run.
"""

from dataclasses import dataclass

from euler_core.ops.classifier_crossentropy import SPEC

from . import _common, _reduce, crossentropy, matmul
from ._runtime import xp_of
from .residual import copy_into

OP = "classifier_crossentropy"

#: the chunk's logits buffer may take this many bytes; dx's K (= Vp) may be cut into this many slices
CONFIG = {"scratch_bytes": 256 * 2 ** 20, "dx_split_k": 8}


@dataclass
class Saved:
    dlosses: object  # (N,) the gradient given ahead (None: an evaluation forward)
    dx: object       # (N,C) in x's dtype
    dweight: object  # (Vp,C) float32


def chunk_rows(N: int, Vp: int, itemsize: int, scratch_bytes: int) -> int:
    """Rows per chunk: the largest power of two whose (rows, Vp) logits fit, at least 1, at most N."""
    fit = max(1, scratch_bytes // (Vp * itemsize))
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
    z = xp.empty((R, Vp), dtype=x.dtype)   # one chunk's logits, then its dlogits, in place
    lse = xp.empty((R,), dtype="float32")
    train = dlosses is not None
    if train:
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
        crossentropy.dlogits_into(zc, targets[rows], lse[:n], dlosses[rows], zc, n_valid)       # z = dlogits
        matmul.gemm(zc, weight, dx[rows], (Vp, 1), (C, 1), n, C, Vp, product="dx", weight_shape=(Vp, C),
                    config=dx_config)                                                            # dx = z W
        matmul.gemm(zc, x[rows], dweight, (1, Vp), (C, 1), Vp, C, n, accumulate=r0 > 0, product="dW",
                    weight_shape=(Vp, C))                                                        # dW (+)= z^T x
    return losses, (Saved(dlosses, dx, dweight) if train else Saved(None, None, None))


def backward(saved, grad_output, grads):
    SPEC.check_backward(saved.dlosses, grad_output)
    dx = saved.dx
    dW = _common.param_grad(OP, grads, "weight", saved.dweight.shape, dx.dtype)  # float32 for 16-bit x
    _reduce.splitk_finish_into(saved.dweight[None], dW, accumulate=True)         # grads += dW_local
    if grads.get("x") is not None:
        dx = copy_into(dx, _common.grad_buffer(OP, grads, "x", dx, xp_of(dx)))
    return {"x": dx, "weight": dW}
