"""embedding, cupy_raw: a gather forward and a sort-free, deterministic scatter-add backward
(embedding.cu has the kernels and why the backward is built the way it is).

Forward: out[n] = wte[tokens[n]] + wpe[n % T] in 16-byte packs. Backward: dwpe by one thread per
(t, 8 columns) summing over b in order; dwte by bucketing positions per token (integer atomics, then
a prefix sum), then one warp per token ordering its few positions by rank and summing them in that
order (or, for a token held by more than 32 positions, its bucket put in position order by a walk
over all positions, and 32 warps summing slices of it), so the float sums never depend on thread
timing: bitwise repeatable, and no CUB/thrust sort (which a captured CUDA graph could not hold). Token ids outside [0, V) (the spec checks them only for NumPy
input, to avoid a host sync) give NaN rows forward and no gradient, never an out-of-bounds read.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

# as embedding.cu's defines
PIECE, LIGHT_MAX, LIGHT_WARPS, HEAVY_WARPS, ORDER_THREADS = 8, 32, 8, 32, 1024
COLUMNS = 32 * PIECE


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
    vec = np.int32(C % PIECE == 0 and _common.vector_ok(dout, dwte, dwpe))
    C32 = _common.i32(C)
    rt.launch(rt.function("embedding", "embedding_dwpe", _defines(dout, dwpe)), rt.cdiv(T * rt.cdiv(C, PIECE), 256),
              256, (dout, dwpe, _common.i32(B), _common.i32(T), C32, vec))
    Vp = rt.cdiv(V, 4) * 4  # embedding_offsets reads count four entries at a time
    zeroed = xp.zeros((2 * Vp + 1,), dtype=np.int32)  # one memset: count, cursor, heavy_count
    count, cursor, heavy_count = zeroed[:Vp], zeroed[Vp:2 * Vp], zeroed[2 * Vp:]
    offsets = xp.empty((Vp,), dtype=np.int32)
    bucket = xp.empty((max(N, 1),), dtype=np.int32)
    heavy_cap = N // (LIGHT_MAX + 1)  # the most tokens that can each hold more than LIGHT_MAX positions
    heavy = xp.empty((max(heavy_cap, 1),), dtype=np.int32)
    defines = _defines(dout, dwte)
    rt.launch(rt.function("embedding", "embedding_count", defines), rt.cdiv(N, 256), 256,
              (saved.tokens, count, _common.i32(N), _common.i32(V)))
    rt.launch(rt.function("embedding", "embedding_offsets", defines), 1, 1024, (count, offsets, _common.i32(Vp)))
    rt.launch(rt.function("embedding", "embedding_bucket", defines), rt.cdiv(N, 256), 256,
              (saved.tokens, offsets, cursor, bucket, _common.i32(N), _common.i32(V)))
    column_blocks = rt.cdiv(C, COLUMNS)
    rt.launch(rt.function("embedding", "embedding_dwte", defines), (rt.cdiv(V, LIGHT_WARPS), column_blocks),
              32 * LIGHT_WARPS, (count, offsets, bucket, dout, dwte, heavy, heavy_count, _common.i32(V), C32, vec))
    if heavy_cap:
        rt.launch(rt.function("embedding", "embedding_order", defines), heavy_cap, ORDER_THREADS,
                  (saved.tokens, heavy, heavy_count, offsets, bucket, _common.i32(N)))
        rt.launch(rt.function("embedding", "embedding_dwte_heavy", defines), (heavy_cap, column_blocks),
                  32 * HEAVY_WARPS, (count, offsets, bucket, heavy, heavy_count, dout, dwte, C32, vec))
    return {"wte": dwte, "wpe": dwpe}
