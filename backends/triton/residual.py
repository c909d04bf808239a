"""residual, triton: out = a + b in one pass; the backward hands dout to both inputs.

Without buffers, the backward returns `dout` itself for both a and b (no copy, as naive does: the
caller treats returned gradients as read-only); with buffers in `grads`, it copies into them.
"""

from . import _common
from ._runtime import cdiv, kernel, launch, tl, xp_of

BLOCK = 1024


@kernel
def _add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


@kernel
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask).to(dst_ptr.dtype.element_ty), mask=mask)


def forward(inputs, attrs, out=None):
    a, b = inputs["a"], inputs["b"]
    _common.check_float("residual", "a", a)
    _common.check_contiguous("residual", a=a, b=b)
    y = _common.output("residual", xp_of(a), out, a.shape, a.dtype)
    launch(_add, (cdiv(a.size, BLOCK),), a, b, y, a.size, BLOCK=BLOCK)
    return y, None


def copy_into(src, dst):
    """dst[...] = src for two contiguous arrays of one size (dtypes may differ)."""
    launch(_copy, (cdiv(src.size, BLOCK),), src, dst, src.size, BLOCK=BLOCK)
    return dst


def backward(saved, dout, grads):
    _common.check_contiguous("residual", dout=dout)
    result = {}
    for name in ("a", "b"):
        if grads.get(name) is None:
            result[name] = dout
        else:
            buf = _common.grad_buffer("residual", grads, name, dout, xp_of(dout))
            result[name] = copy_into(dout, buf)
    return result
