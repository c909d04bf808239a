"""matmul_gelu, cupy_raw (variant `epilogue`): GPT-2's MLP up-projection gelu(x @ W.T + b) with the
GELU in the GEMM's epilogue (matmul.py's forward_gelu; no kernel of its own).

Forward: one wgmma GEMM whose TMA-store epilogue writes both pre = x @ W.T + b (kept for the
backward, in x's dtype) and out = gelu(pre) (matmul.cu's WG_STORE_PRE modules, in the pingpong
schedule: a consumer warpgroup fills the shared-memory image of its 64 x 256 tile with pre, hands it
to the copy engine, turns the image into gelu(pre) once that has been read and stores it, all while
the other warpgroup's tile multiplies; matmul.py's CONFIGS say why). Against the composition (matmul
writes pre, gelu's kernel reads it back and writes out) it saves the GELU's pass over pre, and the
GELU runs while the tensor cores multiply.
out is gelu of pre as stored (rounded to x's dtype): bitwise what gelu.cu's kernel makes of it.

Backward, composed: gelu's kernel forms dpre = dout * gelu'(pre) (a scratch (N, M) array of the
call), then matmul's wgmma backward (dx, dW += and db += with the bias gradient fused into dW's GEMM).

Operands TMA cannot describe, float32 inputs, or no bias take the staged epilogue (or gemm_mma), as
forward_gelu does: the same results, slower.
"""

from . import _common, gelu, matmul

OP = "matmul_gelu"


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    matmul.check_operands(x, weight, bias, op=OP)
    N, M = x.shape[0], weight.shape[0]
    xp = _common.xp_of(x)
    out = _common.output(OP, xp, out, (N, M), str(x.dtype))
    pre = xp.empty((N, M), dtype=x.dtype)
    y = matmul.wgmma.forward_gelu(x, weight, bias, out=out, pre=pre)   # y = gelu(pre), pre = x @ W.T + b
    return y, (matmul.Saved(x, weight, bias), gelu.Saved(pre))


def backward(saved, dout, grads):
    s_matmul, s_gelu = saved
    pre = s_gelu.x
    if str(dout.dtype) != str(pre.dtype) or tuple(dout.shape) != tuple(pre.shape):
        raise ValueError(f"{OP}: dout must be {pre.dtype} of shape {tuple(pre.shape)}, got {dout.dtype} "
                         f"{tuple(dout.shape)}")
    _common.check_contiguous(OP, dout=dout)
    _common.grad_buffer(OP, grads, "x", s_matmul.x, _common.xp_of(pre))   # checked here, to name this op
    for name, param in (("weight", s_matmul.weight), ("bias", s_matmul.bias)):
        if param is not None:
            _common.check_param_grad(OP, name, grads[name], param)
    dpre = gelu.backward(s_gelu, dout, {})["x"]                      # dpre = dout * gelu'(pre)
    return matmul.wgmma.backward(s_matmul, dpre, grads)              # dx, dW (+)=, db (+)=
