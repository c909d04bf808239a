"""embedding, cupy_raw: a gather forward and a sort-free, deterministic scatter-add backward
(embedding.cu has the kernels and why the backward is built the way it is).

Forward: out[n] = wte[tokens[n]] + wpe[n % T] in 16-byte packs. Backward: dwpe by one thread per
(t, c) summing over b in order; dwte by bucketing positions per token (integer atomics, then a
prefix sum) and summing each bucket in position order, so the float sums never depend on thread
timing: bitwise repeatable, and no CUB/thrust sort (which a captured CUDA graph could not hold).
Token ids outside [0, V) (the spec checks them only for NumPy input, to avoid a host sync) give NaN
rows forward and no gradient, never an out-of-bounds read.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

DWTE_THREADS = 256  # as embedding.cu's DWTE_THREADS


@dataclass
class Saved:
    tokens: object  # (B*T,) int32: the ids each position read
    B: int
    T: int
    V: int


def _defines(wte, grad=None) -> dict:
    return {"floatX": _common.ctype(wte), "gradT": _common.ctype(grad if grad is not None else wte)}


def forward(inputs, attrs, out=None):
    tokens, wte, wpe = inputs["tokens"], inputs["wte"], inputs["wpe"]
    _common.check_float("embedding", "wte", wte)
    _common.check_contiguous("embedding", wte=wte, wpe=wpe)
    B, T = tokens.shape
    V, C = wte.shape
    xp = _common.xp_of(wte)
    tokens = xp.ascontiguousarray(tokens.reshape(-1), dtype=np.int32)  # ids are often a view of a token window
    y = _common.output("embedding", xp, out, (B, T, C), str(wte.dtype))
    vec = int(C % (16 // wte.dtype.itemsize) == 0 and _common.vector_ok(wte, wpe, y))
    items = B * T * C // (16 // wte.dtype.itemsize) if vec else B * T * C
    rt.launch(rt.function("embedding", "embedding_forward", _defines(wte)),
              _common.elementwise_grid(items, xp) if items else 0, _common.ELEMENTWISE_THREADS,
              (tokens, wte, wpe, y, _common.i32(B * T), _common.i32(T), _common.i32(C), _common.i32(V), np.int32(vec)))
    return y, Saved(tokens, B, T, V)


def backward(saved, dout, grads):
    dwte, dwpe = grads["wte"], grads["wpe"]
    _common.check_contiguous("embedding", dout=dout, wte=dwte, wpe=dwpe)
    for name, buf in (("wte", dwte), ("wpe", dwpe)):
        if str(buf.dtype) not in (str(dout.dtype), "float32"):
            raise TypeError(f"embedding: grads['{name}'] must be {dout.dtype} or float32, got {buf.dtype}")
    B, T, V, N = saved.B, saved.T, saved.V, saved.B * saved.T
    C = dout.shape[-1]
    xp = _common.xp_of(dout)
    rt.launch(rt.function("embedding", "embedding_dwpe", _defines(dout, dwpe)), rt.cdiv(T * C, 256), 256,
              (dout, dwpe, _common.i32(B), _common.i32(T), _common.i32(C)))
    count = xp.zeros((V,), dtype=np.int32)
    cursor = xp.zeros((V,), dtype=np.int32)
    offsets = xp.empty((V,), dtype=np.int32)
    bucket = xp.empty((max(N, 1),), dtype=np.int32)
    defines = _defines(dout, dwte)
    rt.launch(rt.function("embedding", "embedding_count", defines), rt.cdiv(N, 256), 256,
              (saved.tokens, count, _common.i32(N), _common.i32(V)))
    rt.launch(rt.function("embedding", "embedding_offsets", defines), 1, 1024, (count, offsets, _common.i32(V)))
    rt.launch(rt.function("embedding", "embedding_bucket", defines), rt.cdiv(N, 256), 256,
              (saved.tokens, offsets, cursor, bucket, _common.i32(N), _common.i32(V)))
    rt.launch(rt.function("embedding", "embedding_dwte", defines), (V, rt.cdiv(C, DWTE_THREADS)), DWTE_THREADS,
              (saved.tokens, count, offsets, bucket, dout, dwte, _common.i32(N), _common.i32(C)))
    return {"wte": dwte, "wpe": dwpe}
