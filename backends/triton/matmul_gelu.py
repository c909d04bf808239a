"""matmul_gelu, triton: the linear layer with its GELU fused into the GEMM (matmul.py's `_gemm`, no
kernel of its own) or into its backward's passes. Three variants:

    fused     the GELU fused both ways: the forward saves gelu'(pre), the backward GEMMs scale dout
              by it as they load it (below)
    epilogue  the forward alone fused: the GEMM's epilogue writes gelu(pre) and pre, rounded to x's
              dtype as the unfused matmul stores it; the backward is the composition's, gelu's
              backward kernel (dpre from pre and dout) then matmul's backward. Against the
              composition it saves the GELU forward's pass (reading pre back: 403 MB a layer of
              GPT-2 124M at B=64, 212 us of a 118 ms step in reports/train-h200/152ceb5/trace) for a
              second store in the GEMM's epilogue. The output is gelu of the float32 pre (the
              composition activates pre rounded to x's dtype); the backward is the composition's
              on the same rounded pre
    passes    the forward as the composition's (the GEMM writes pre, gelu's pass activates it); the
              backward's GELU pass also sums the columns of dpre as it writes them (gelu.py's
              backward_with_colsum), which is the bias gradient, so matmul's separate column sum
              over dpre (403 MB a layer at B=64, 116 us of the step in reports/train-h200/61e6ab8)
              is gone; then the dx and dW GEMMs as matmul's. In the B=64 step (reports/train-h200/
              f2eba87) that pass takes 362 us a layer against 302 + 117 apart (its 2-D strips
              stream slower than the flat GELU kernel): 570,649 tokens/s beside 569,980, opt-in

The fused variant:

Forward: one GEMM whose epilogue takes the float32 result pre = x @ W.T + b while it is still in
registers and writes gelu(pre) (the output) and g = gelu'(pre) (for the backward, `PRE_GRAD`), both
through TMA stores from one staging buffer in shared memory. pre itself is never stored; unfused,
matmul writes pre and gelu reads it back and writes the output.

Backward: dpre = dout * g is never written either. Both backward GEMMs take it as their A operand
by loading a tile of dout and the same tile of g and multiplying them in float32 as they load
(`SCALE_A`; the product is rounded to the storage dtype, as a stored dpre would be):

    dx       = (dout * g) @ W            the dx GEMM
    dW      += (dout * g).T @ x          the dW GEMM, which also sums A's rows into db (ROWSUM)
    db      += sum_n (dout * g)

So the elementwise pass of the unfused backward (read dout and pre, write dpre) is gone, for the
cost of reading two A operands instead of one in each GEMM (the tiles come through L2 once per
output tile column, as A always does). The bias gradient is always the fused row sum here (matmul's
separate column sum would need dpre in memory).

Why g is float16 for bfloat16 x. g is rounded once when saved and the product dout * g once more
when it becomes the A operand; with g in bfloat16 (8 significant bits) the two roundings put a few
elements of c_fc's dweight past the bf16 gradient tolerance (first H200 run: 3 of 2.4M elements at
K768-M3072, 1.1x the bound; a float64 emulation of the conformance cases, bench/fused_precision.py,
reproduced those very elements and put 24 of 40 seeds past it, worst 1.53x). g lies in [-0.17,
1.13], well inside float16's range, and float16's 11 bits make the first rounding negligible: worst
0.78x over the same 40 seeds, against 0.93x for the unfused composition (pre rounded to bf16, gelu'
of it in float32). Same bytes as a bf16 g, and the backward multiplies instead of evaluating gelu'.
The TMA store of g goes through the descriptor type of C (bf16) bit for bit, so that both stores
share one staging buffer: a second one would not leave room for two programs per SM.

Launch configurations: the forward takes matmul's own (for c_fc the tuned forward, two 128 x 128
programs of one warpgroup per SM, 3 stages, tile and K loops fused; with the GELU and its derivative
from one exp, 255 registers and no spills (ptxas for sm_90; with an exp each, 152 bytes a thread
spilled); a decoding step's few rows take matmul's few-row tiles). The backward (BACKWARD_CONFIGS,
16-bit x; float32 uses matmul's CONFIGS) keeps matmul's tuned dx (128 x 256, 3 stages) and dW (128 x
256, split-K) tiles; dW at 3 stages, not 4: a stage is two 128 x 64 A tiles and one 64 x 256 B tile,
64 KB, and 4 of them would not fit in the 227 KB of shared memory an sm_90 block may have (3: 192
KB).

Not fused: the GELU's derivative of the *next* use, i.e. dout itself comes from the following
linear's dx GEMM as a separate op (llm.c folds dgelu into that GEMM's epilogue; across two ops of
this contract it would need a fused MLP op).
"""

from dataclasses import dataclass, replace

from . import _common, gelu, matmul
from ._runtime import xp_of

OP = "matmul_gelu"

#: 16-bit launch configurations of the backward GEMMs with SCALE_A (see above)
BACKWARD_CONFIGS = {
    "dx": matmul.CONFIGS[("16", "dx", matmul.ANY)],
    "dW": replace(matmul.CONFIGS[("16", "dW", matmul.ANY)], num_stages=3),
}


@dataclass
class Saved:
    x: object       # (N,K)
    weight: object  # (M,K)
    dgelu: object   # (N,M) gelu'(pre): float16 for 16-bit x (see above), else x's dtype
    has_bias: bool


def _operands(inputs, out):
    """x, weight, bias (or None), checked, their N, K, M, and y (N, M): `out` or a new array."""
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    matmul.check_operands(x, weight, bias, op=OP)
    N, K = x.shape
    M = weight.shape[0]
    return x, weight, bias, N, K, M, _common.output(OP, xp_of(x), out, (N, M), x.dtype)


def _gelu_gemm(inputs, out, pre_grad: bool):
    """y = gelu(x @ W.T + b) from one GEMM, and what its epilogue keeps of pre = x @ W.T + b: with
    pre_grad gelu'(pre) (in saved_dtype), else pre itself (in x's dtype). Returns (y, kept)."""
    x, weight, bias, N, K, M, y = _operands(inputs, out)
    xp = xp_of(x)
    kept = xp.empty((N, M), dtype=saved_dtype(str(x.dtype)) if pre_grad else x.dtype)
    matmul.gemm(x, weight, y, (K, 1), (1, K), N, M, K, bias=bias, act=1, pre=kept, pre_grad=pre_grad,
                weight_shape=(M, K))
    return y, kept


def forward(inputs, attrs, out=None):
    y, dgelu = _gelu_gemm(inputs, out, pre_grad=True)               # y = gelu(x @ W.T + b), dgelu = gelu'(...)
    return y, Saved(inputs["x"], inputs["weight"], dgelu, inputs.get("bias") is not None)


def saved_dtype(dtype: str) -> str:
    """gelu'(pre) is kept in float16 for 16-bit x (bfloat16's 8 bits would be rounded twice), else in x's dtype."""
    return "float16" if dtype in ("float16", "bfloat16") else dtype


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


def _checked(saved, dout, grads):
    """The (matmul, gelu) saved pair of the epilogue and passes variants, once dout is found
    contiguous and a given grads["x"] right (refused before any launch)."""
    s_matmul, _ = saved
    _common.check_contiguous(OP, dout=dout)
    if grads.get("x") is not None:
        _common.grad_buffer(OP, grads, "x", s_matmul.x, xp_of(s_matmul.x))
    return saved


class Epilogue:
    """The `epilogue` variant (module docstring): the forward's GELU in the GEMM epilogue, pre saved
    in x's dtype; the backward composed of gelu's and matmul's."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, pre = _gelu_gemm(inputs, out, pre_grad=False)            # y = gelu(x @ W.T + b), pre = x @ W.T + b
        return y, (matmul.Saved(inputs["x"], inputs["weight"], inputs.get("bias") is not None), gelu.Saved(pre))

    @staticmethod
    def backward(saved, dout, grads):
        s_matmul, s_gelu = _checked(saved, dout, grads)
        dpre = gelu.backward(s_gelu, dout, {})["x"]                    # dpre = dout * gelu'(pre)
        return matmul.backward(s_matmul, dpre, grads, op=OP)          # dx, dW (+)=, db (+)=


class Passes:
    """The `passes` variant (module docstring): the composition's forward; the bias gradient summed
    by the GELU backward's pass."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        x, weight, bias, N, K, M, y = _operands(inputs, out)
        pre = xp_of(x).empty((N, M), dtype=x.dtype)
        matmul.gemm(x, weight, pre, (K, 1), (1, K), N, M, K, bias=bias, weight_shape=(M, K))  # pre = x @ W.T + b
        gelu.forward({"x": pre}, {}, out=y)                                                    # y = gelu(pre)
        return y, (matmul.Saved(x, weight, bias is not None), gelu.Saved(pre))

    @staticmethod
    def backward(saved, dout, grads):
        s_matmul, s_gelu = _checked(saved, dout, grads)
        dpre = xp_of(s_gelu.x).empty_like(s_gelu.x)
        if not s_matmul.has_bias:
            gelu.backward(s_gelu, dout, {"x": dpre})                      # dpre = dout * gelu'(pre)
            return matmul.backward(s_matmul, dpre, grads, op=OP)
        db = _common.param_grad(OP, grads, "bias", s_gelu.x.shape[1:], s_matmul.x.dtype)
        gelu.backward_with_colsum(s_gelu, dout, dpre, db)                 # and db += sum_n dpre
        result = matmul.backward(replace(s_matmul, has_bias=False), dpre,  # dx, dW (+)=; db is done
                                 {k: v for k, v in grads.items() if k != "bias"}, op=OP)
        return {**result, "bias": db}
