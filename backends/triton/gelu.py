"""gelu, triton: the tanh-approximate GELU, one pass over memory each way.

    out = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),      u = sqrt(2/pi) (x + 0.044715 x^3)
    dx  = dout * (s + 2 x s (1 - s) du/dx),            s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)

(1 + tanh(u)) / 2 is sigmoid(2u) and 1 - tanh(u)^2 = 4 s (1 - s): one exp per element and no tanh,
which Triton's core language lacks. The math runs in float32 whatever the storage dtype. Differs
from naive only in where it runs: one program per BLOCK elements, each read once and written once.
"""

from dataclasses import dataclass

from . import _common, _reduce
from ._runtime import cdiv, kernel, launch, tl, triton, xp_of

BLOCK = 1024


@triton.jit
def gelu_gate(x):
    """s = sigmoid(2u) at float32 x, u = sqrt(2/pi) (x + 0.044715 x^3): gelu(x) = x * s."""
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 1.0 / (1.0 + tl.exp(-2.0 * u))


@triton.jit
def gelu_grad_gated(x, s):
    """d gelu / dx at x given its gate s = gelu_gate(x): s + 2 x s (1 - s) du/dx. The GEMM epilogue
    of matmul_gelu (matmul.py) computes s once for both the output x * s and this, which it saves."""
    du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    return s + 2.0 * x * s * (1.0 - s) * du


@triton.jit
def gelu_grad(x):
    """d gelu / dx at float32 x."""
    return gelu_grad_gated(x, gelu_gate(x))


@kernel
def _gelu_forward(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    s = 1.0 / (1.0 + tl.exp(-2.0 * u))  # sigmoid(2u) = (1 + tanh u) / 2
    tl.store(out_ptr + offs, (x * s).to(out_ptr.dtype.element_ty), mask=mask)


@kernel
def _gelu_backward(x_ptr, dout_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dout = tl.load(dout_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dx = dout * gelu_grad(x)
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@kernel
def _gelu_backward_colsum(x_ptr, dout_ptr, dx_ptr, partial_ptr, N, M, ROWS, BLOCK_R: tl.constexpr,
                          BLOCK_C: tl.constexpr):
    # program (j, g): rows g*ROWS .. (g+1)*ROWS of the BLOCK_C-wide column strip j, as _reduce's
    # _colsum_partial walks them, writing dx and summing it (as stored) into partial[g, strip]
    g, cols, cmask, start = _reduce.row_group_strip(M, ROWS, BLOCK_C)
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)  # dx's column sums, reduced over rows at the end
    for r0 in range(start, start + ROWS, BLOCK_R):
        offs, mask = _reduce.strip_block(r0, start, ROWS, N, M, cols, cmask, BLOCK_R)
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dout = tl.load(dout_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dx = (dout * gelu_grad(x)).to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + offs, dx, mask=mask)
        acc += dx.to(tl.float32)
    tl.store(partial_ptr + g * M + cols, tl.sum(acc, axis=0), mask=cmask)


@dataclass
class Saved:
    x: object  # (N,C) or any shape: the input


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    _common.check_float("gelu", "x", x)
    _common.check_contiguous("gelu", x=x)
    xp = xp_of(x)
    y = _common.output("gelu", xp, out, x.shape, x.dtype)
    launch(_gelu_forward, (cdiv(x.size, BLOCK),), x, y, x.size, BLOCK=BLOCK)
    return y, Saved(x)


def backward(saved, dout, grads):
    x = saved.x
    _common.check_contiguous("gelu", dout=dout)
    xp = xp_of(x)
    dx = _common.grad_buffer("gelu", grads, "x", x, xp)
    launch(_gelu_backward, (cdiv(x.size, BLOCK),), x, dout, dx, x.size, BLOCK=BLOCK)
    return {"x": dx}


def backward_with_colsum(saved, dout, dx, colsum):
    """dx = dout * gelu'(x) into the given buffer for a 2-D x (N, M), and colsum (M,) += the column
    sums of dx as stored, in a fixed order (the bias gradient of the linear that produced x, with no
    second pass over dx: matmul_gelu's `passes` variant). The partial sums are laid out as
    _reduce.colsum_into's (COLSUM's row groups and strips) and finished by _reduce.finish_into. The
    caller has checked dout (contiguous, x's shape)."""
    x = saved.x
    N, M = x.shape
    xp = xp_of(x)
    cfg = _reduce.COLSUM
    G, rows = _reduce.groups_for(N, cfg.groups)
    partial = xp.empty((G, M), dtype="float32")
    launch(_gelu_backward_colsum, (cdiv(M, cfg.block_c), G), x, dout, dx, partial, N, M, rows,
           BLOCK_R=cfg.block_r, BLOCK_C=cfg.block_c, num_warps=cfg.num_warps)
    _reduce.finish_into(partial, colsum)
    return dx
