"""attention_cached, cupy_raw: Tn new queries over Tk cached keys, one block per (query, head,
batch), exact softmax in float32 (attention_cached.cu). Forward only.

q, k and v are taken as the KV cache hands them over, views included (q a slice of the qkv
projection, k and v the first Tk rows of the caches): any batch and row strides, the last axis
contiguous. With `lengths` (rows of different lengths) row b attends to its first lengths[b] keys. Tk is limited by one row of scores in shared memory (about 56,000 keys).
"""

import math

import numpy as np

from . import _common
from . import _runtime as rt

THREADS = 128


def _strides(op: str, name: str, a) -> tuple:
    item = a.dtype.itemsize
    if a.strides[2] != item:
        raise ValueError(f"{op}: '{name}' must be contiguous along its last axis (channels)")
    return np.int64(a.strides[0] // item), np.int64(a.strides[1] // item)


def forward(inputs, attrs, out=None):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    n_head = attrs["n_head"]
    _common.check_float("attention_cached", "q", q)
    B, Tn, C = q.shape
    Tk = k.shape[1]
    HS = C // n_head
    shared = (HS + Tk) * 4
    if shared > rt.MAX_SHARED_PER_BLOCK:
        raise ValueError(f"attention_cached: the cupy_raw simple variant keeps a row of Tk scores in shared memory; "
                         f"Tk={Tk} needs {shared} bytes, more than {rt.MAX_SHARED_PER_BLOCK}")
    xp = _common.xp_of(q)
    y = _common.output("attention_cached", xp, out, (B, Tn, C), str(q.dtype))
    lengths = inputs.get("lengths")
    has_lengths = lengths is not None
    if has_lengths and str(lengths.dtype) != "int32":
        lengths = lengths.astype("int32")
    k_fn = rt.function("attention_cached", "attention_cached_forward",
                       {"floatX": _common.ctype(q), "HAS_LENGTHS": int(has_lengths)})
    rt.launch(k_fn, (Tn, n_head, B), THREADS,
              (q, k, v, y, lengths if has_lengths else _no_lengths(xp), _common.i32(Tn), _common.i32(Tk), _common.i32(C), _common.i32(n_head))
              + _strides("attention_cached", "q", q) + _strides("attention_cached", "k", k)
              + _strides("attention_cached", "v", v) + (_common.f32(1 / math.sqrt(HS)),),
              shared_mem=shared)
    return y, None


def _no_lengths(xp):
    """A stand-in for the lengths pointer when there are none (HAS_LENGTHS=0 never reads it)."""
    if xp not in _DUMMY:
        _DUMMY[xp] = xp.zeros(1, dtype="int32")
    return _DUMMY[xp]


_DUMMY: dict = {}


def backward(saved, dout, grads):
    return {}  # forward only: nothing of it is differentiated
