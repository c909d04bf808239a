"""embedding, cupy_raw: a gather forward and a sort-free, deterministic scatter-add backward
(embedding.cu has the kernels and why the backward is built the way it is).

Forward: out[n] = wte[tokens[n]] + wpe[n % T] in 16-byte packs. Backward: dwpe by one thread per
(t, 8 columns) summing over b in order; dwte by bucketing positions per token (integer atomics, then
a prefix sum that also lists the tokens by how many positions hold them), then one warp per token
ordering its few positions by rank and summing them in that order (or, for a token held by more
than 32 positions, its bucket put in position order by a walk over all positions and summed in
slices of 128, the slices added in order), so the float sums never depend on thread timing:
bitwise repeatable, and no CUB/thrust sort (which a captured CUDA graph could not hold). Token ids
outside [0, V) (the spec checks them only for NumPy input, to avoid a host sync) give NaN rows
forward and no gradient, never an out-of-bounds read.
"""

from dataclasses import dataclass

import numpy as np

from . import _common
from . import _runtime as rt

# as embedding.cu's defines
PIECE, LIGHT_MAX, LIGHT_WARPS, SLICE_ROWS, HEAVY_WARPS, PLAN_THREADS, ORDER_THREADS = 8, 32, 8, 128, 8, 1024, 1024
#: rows embedding_dwte has in flight a warp (embedding.cu's LIGHT_AHEAD): more rows, fewer warps resident
LIGHT_AHEAD = 2


@dataclass
class Saved:
    tokens: object  # (B*T,) int32: the ids each position read
    B: int
    T: int
    V: int


def _defines(wte, grad=None, vec=False) -> dict:
    """The module's defines; `vec` only matters to the backward's kernels (the forward takes it as an argument)."""
    return {"floatX": _common.ctype(wte), "gradT": _common.ctype(grad if grad is not None else wte),
            "VEC": int(vec), "LIGHT_AHEAD": LIGHT_AHEAD}


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
    vec = C % PIECE == 0 and _common.vector_ok(dout, dwte, dwpe)
    C32, N32, V32 = _common.i32(C), _common.i32(N), _common.i32(V)
    rt.launch(rt.function("embedding", "embedding_dwpe", _defines(dout, dwpe, vec)), rt.cdiv(T * rt.cdiv(C, PIECE), 256),
              256, (dout, dwpe, _common.i32(B), _common.i32(T), C32))
    if N == 0:
        return {"wte": dwte, "wpe": dwpe}
    # the most entries each list can need (the counts themselves stay on the GPU: no host sync)
    Vp = rt.cdiv(V, 4) * 4  # embedding_plan reads count four entries at a time
    light_cap = min(V, N)
    heavy_cap = max(N // (LIGHT_MAX + 1), 1)  # tokens at more than LIGHT_MAX positions
    slice_cap = N // SLICE_ROWS + heavy_cap   # each heavy token's slices: at most L / SLICE_ROWS + 1
    zeroed = xp.zeros((2 * Vp + heavy_cap,), dtype=np.int32)  # one memset: count, cursor, tickets
    count, cursor, tickets = zeroed[:Vp], zeroed[Vp:2 * Vp], zeroed[2 * Vp:]
    offsets = xp.empty((Vp,), dtype=np.int32)
    bucket = xp.empty((N,), dtype=np.int32)
    light = xp.empty((light_cap, 4), dtype=np.int32)
    heavy = xp.empty((heavy_cap, 4), dtype=np.int32)
    slices = xp.empty((slice_cap, 4), dtype=np.int32)
    totals = xp.empty((3,), dtype=np.int32)  # light tokens, heavy tokens, slices
    scratch = xp.empty((slice_cap, C), dtype=np.float32)
    defines = _defines(dout, dwte, vec)
    fn = lambda name: rt.function("embedding", name, defines)  # noqa: E731
    rt.launch(fn("embedding_count"), rt.cdiv(N, 256), 256, (saved.tokens, count, N32, V32))
    groups = rt.cdiv(Vp, 4 * PLAN_THREADS)  # embedding_plan's groups of tokens, a block each
    group_sums = xp.empty((groups, 4), dtype=np.int32)
    rt.launch(fn("embedding_plan_groups"), groups, PLAN_THREADS, (count, group_sums, _common.i32(Vp)))
    rt.launch(fn("embedding_plan"), groups, PLAN_THREADS,
              (count, group_sums, offsets, light, heavy, slices, totals, _common.i32(Vp)))
    rt.launch(fn("embedding_bucket"), rt.cdiv(N, 256), 256, (saved.tokens, offsets, cursor, bucket, N32, V32))
    rt.launch(fn("embedding_dwte"), rt.cdiv(light_cap, LIGHT_WARPS), 32 * LIGHT_WARPS,
              (light, totals, bucket, dout, dwte, C32))
    blocks = 2 * _common.num_sms(xp)  # the heavy kernels loop over what the lists hold
    rt.launch(fn("embedding_order"), min(heavy_cap, blocks), ORDER_THREADS, (saved.tokens, heavy, totals, bucket, N32))
    rt.launch(fn("embedding_dwte_heavy"), min(slice_cap, 4 * blocks), 32 * HEAVY_WARPS,
              (heavy, slices, totals, bucket, dout, dwte, scratch, tickets, C32))
    return {"wte": dwte, "wpe": dwpe}
