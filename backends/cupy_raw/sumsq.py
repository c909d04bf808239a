"""sumsq, cupy_raw: the sum of squares of a whole buffer, (1,) float32, in a fixed order (sumsq.cu).

Two launches: G blocks (G from the size alone, at most MAX_BLOCKS) each sum a strided share in
float32 and write a partial; one block sums the partials. The order depends only on the size, so
the result is bitwise repeatable on any GPU. No backward (the core calls it on the flat gradient
buffer once per optimizer step, for clipping).
"""

import numpy as np

from . import _common
from . import _runtime as rt

THREADS, MAX_BLOCKS, ELEMENTS_PER_THREAD = 256, 1024, 8


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    _common.check_float("sumsq", "x", x)
    _common.check_contiguous("sumsq", x=x)
    xp = _common.xp_of(x)
    y = _common.output("sumsq", xp, out, (1,), "float32")
    blocks = max(1, min(MAX_BLOCKS, rt.cdiv(x.size, THREADS * ELEMENTS_PER_THREAD)))
    partial = xp.empty((blocks,), dtype=np.float32)
    defines = {"floatX": _common.ctype(x)}
    rt.launch(rt.function("sumsq", "sumsq_partial", defines), blocks, THREADS, (x, partial, np.int64(x.size)))
    rt.launch(rt.function("sumsq", "sumsq_finish", defines), 1, THREADS, (partial, y, np.int32(blocks)))
    return y, None


def backward(saved, dout, grads):
    return {}  # nothing to differentiate (the spec names no differentiable input)
