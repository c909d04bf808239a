"""matmul_gelu, triton: the linear layer with its GELU fused into the GEMM both ways (matmul.py's
`_gemm`, no kernel of its own).

Forward: one GEMM whose epilogue takes the float32 result pre = x @ W.T + b while it is still in
registers and writes gelu(pre) (the output) and gelu'(pre) (for the backward, `PRE_GRAD`). pre
itself is never stored; unfused, matmul writes pre and gelu reads it back and writes the output.

Backward: dpre = dout * gelu'(pre) is never written either. Both backward GEMMs take it as their A
operand by loading a tile of dout and the same tile of the saved gelu'(pre) and multiplying them as
they load (`SCALE_A`; the product is rounded to the storage dtype, as a stored dpre would be):

    dx       = (dout * g) @ W            the dx GEMM
    dW      += (dout * g).T @ x          the dW GEMM, which also sums A's rows into db (ROWSUM)
    db      += sum_n (dout * g)

So the elementwise pass of the unfused backward (read dout and pre, write dpre) is gone, for the
cost of reading two A operands instead of one in each GEMM (the tiles come through L2 once per
output tile column, as A always does). Each pipeline stage then holds two A tiles: the backward
configs (BACKWARD_CONFIGS, for 16-bit data) keep the tuned dx / dW tiles of matmul.py with the
stages that fit in shared memory. The bias gradient is always the fused row sum here (matmul's
separate column sum would need dpre in memory).

Not fused: the GELU's derivative of the *next* use, i.e. dout itself comes from the following
linear's dx GEMM as a separate op (llm.c folds dgelu into that GEMM's epilogue; across two ops of
this contract it would need a fused MLP op).
"""

from dataclasses import dataclass

from . import _common, matmul
from ._runtime import xp_of

OP = "matmul_gelu"

#: 16-bit launch configurations of the backward GEMMs with SCALE_A (float32 uses matmul's CONFIGS):
#: matmul's tuned dx (128 x 256, 3 stages) and dW (128 x 256, split-K) tiles; dW at 3 stages, not 4:
#: a stage is two 128 x 64 A tiles and one 64 x 256 B tile, 64 KB, and 4 of them would not fit in
#: the 227 KB of shared memory an sm_90 block may have (3: 192 KB).
BACKWARD_CONFIGS = {
    "dx": matmul.CONFIGS[("16", "dx")],
    "dW": {**matmul.CONFIGS[("16", "dW")], "num_stages": 3},
}


@dataclass
class Saved:
    x: object       # (N,K)
    weight: object  # (M,K)
    dgelu: object   # (N,M) gelu'(pre), in x's dtype
    has_bias: bool


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    matmul.check_operands(x, weight, bias, op=OP)
    N, K = x.shape
    M = weight.shape[0]
    xp = xp_of(x)
    y = _common.output(OP, xp, out, (N, M), x.dtype)
    dgelu = xp.empty((N, M), dtype=x.dtype)
    matmul.gemm(x, weight, y, (K, 1), (1, K), N, M, K, bias=bias, act=1, pre=dgelu, pre_grad=True,
                weight_shape=(M, K))                                 # y = gelu(x @ W.T + b), dgelu = gelu'(...)
    return y, Saved(x, weight, dgelu, bias is not None)


def _config(dtype: str, product: str):
    return None if dtype == "float32" else BACKWARD_CONFIGS[product]


def backward(saved, dout, grads):
    x, weight, dgelu = saved.x, saved.weight, saved.dgelu
    _common.check_contiguous(OP, dout=dout)
    N, K = x.shape
    M = weight.shape[0]
    dt = str(x.dtype)
    dx = _common.grad_buffer(OP, grads, "x", x, xp_of(x))
    dW = _common.param_grad(OP, grads, "weight", (M, K), x.dtype)   # float32 for 16-bit x: mixed precision
    db = _common.param_grad(OP, grads, "bias", (M,), x.dtype) if saved.has_bias else None
    matmul.gemm(dout, weight, dx, (M, 1), (K, 1), N, K, M, scale_a=dgelu, product="dx", weight_shape=(M, K),
                config=_config(dt, "dx"))                            # dx = (dy * g) @ W
    matmul.gemm(dout, x, dW, (1, M), (K, 1), M, K, N, accumulate=True, rowsum=db, scale_a=dgelu,
                product="dW", weight_shape=(M, K), config=_config(dt, "dW"))  # dW += (dy * g).T @ x, db += sum
    result = {"x": dx, "weight": dW}
    if saved.has_bias:
        result["bias"] = db
    return result
