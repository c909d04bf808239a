"""gelu_matmul, triton: the MLP projection with the GELU's backward in its dx GEMM's epilogue
(matmul.py's `_gemm`, gelu.py's kernel; no kernel of its own).

Forward, as the composition: gelu's kernel writes h = gelu(x) (kept for dW), then the GEMM
y = h @ W.T + b.

Backward: the dx GEMM multiplies its float32 result by gelu'(x) in the epilogue (`GELU_GRAD`: the
tile of x read through TMA beside the result's store) and writes dx itself:

    dx       = (dy @ W) * gelu'(x)      one GEMM; d(h) never exists in memory
    dW      += dy.T @ h,  db += sum_n dy    matmul's dW kernel (db fused or apart, as matmul's entry says)

Against the composition (matmul's backward writes dh, gelu's kernel reads dh and x and writes dx)
it saves a write and a read of dh (N,K): 2 x 403 MB a layer of GPT-2 124M at B=64, where the GELU
backward took 306 us of a 116 ms step (reports/train-h200/152ceb5/trace), for one more read of x
in the GEMM's epilogue. dx is rounded once, from float32, where the composition rounds dh first.
The dx GEMM keeps matmul's launch configuration for its shape (the epilogue loads one (128, 128)
tile of x per column half: 32 KB of shared memory beside the 144 KB pipeline and C's 32 KB staging,
within sm_90's 227 KB).

Measured on the H200 it does not pay, so the variant is opt-in: at 65536 rows (B=64) the dx GEMM
with the epilogue takes 726 us against 446 us plain, as long as PyTorch's GEMM and GELU backward
together (727 us), and no other launch configuration does better (two 128 x 128 programs an SM:
1,141-1,177 us; plain loads of x: 886-895 us; reports/train-h200/0dbd73f/matmul-gelu.json). With
one program an SM nothing overlaps the epilogue's wait for x and its gelu' arithmetic (an exp and
~20 more instructions an element), which take about as long as the pass they replace. In the
whole B=64 step: 552,126 tokens/s against 556,171 for the composition (reports/train-h200/edb9c07/).
"""

from dataclasses import dataclass

from . import _common, gelu, matmul
from ._runtime import xp_of

OP = "gelu_matmul"


@dataclass
class Saved:
    x: object       # (N,K) the GELU's input
    h: object       # (N,K) gelu(x), the GEMM's input
    weight: object  # (M,K)
    has_bias: bool


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    matmul.check_operands(x, weight, bias, op=OP)
    N, K = x.shape
    M = weight.shape[0]
    h, _ = gelu.forward({"x": x}, {})                                         # h = gelu(x)
    y = _common.output(OP, xp_of(x), out, (N, M), x.dtype)
    matmul.gemm(h, weight, y, (K, 1), (1, K), N, M, K, bias=bias, weight_shape=(M, K))   # y = h @ W.T + b
    return y, Saved(x, h, weight, bias is not None)


def backward(saved, dout, grads):
    x, h, weight = saved.x, saved.h, saved.weight
    _common.check_contiguous(OP, dout=dout)
    N, K = x.shape
    M = weight.shape[0]
    dx = _common.grad_buffer(OP, grads, "x", x, xp_of(x))
    dW = _common.param_grad(OP, grads, "weight", (M, K), x.dtype)   # float32 for 16-bit x: mixed precision
    db = _common.param_grad(OP, grads, "bias", (M,), x.dtype) if saved.has_bias else None
    matmul.gemm(dout, weight, dx, (M, 1), (K, 1), N, K, M, product="dx", weight_shape=(M, K),
                gelu_grad_of=x)                                        # dx = (dy @ W) * gelu'(x)
    matmul.weight_grads(dout, h, dW, db)                               # dW += dy.T @ h, db += sum_n dy
    result = {"x": dx, "weight": dW}
    if saved.has_bias:
        result["bias"] = db
    return result
