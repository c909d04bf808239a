"""matmul, triton: a tiled tensor-core GEMM with the bias (and optionally GELU) in its epilogue.

One kernel computes C = A @ B (+ bias) (+ C, to accumulate) for any strides, so the forward and
both backward products are the same code with the operands' strides swapped:

    forward    y (N,M)  = x (N,K) @ W.T       A = x,      B[k, m] = W[m, k]   (+ bias in the epilogue)
    backward   dx (N,K) = dy (N,M) @ W        A = dy,     B = W
               dW (M,K) += dy.T @ x           A[m, n] = dy[n, m], B = x       (ACCUMULATE: load, add, store)
               db (M)  += column sums of dy   _reduce.colsum_into (deterministic, no atomics)

Each program owns a BLOCK_M x BLOCK_N tile of C and walks K in BLOCK_K steps, keeping the float32
accumulator in registers; Triton pipelines the loads (num_stages) and, for fp16/bf16 on sm_90,
issues wgmma. Programs are ordered in groups of GROUP_M row-tiles so that neighbouring programs
share tiles of B in L2. float32 inputs are multiplied in IEEE float32 (input_precision="ieee"), as
the float32 contract asks; a TF32 variant would be about 8x faster and 1e-3 accurate.

`ACT=1` applies GPT-2's tanh GELU to the result in the epilogue (y = gelu(x @ W.T + b)) and can also
write the pre-activation for the backward: the fused matmul+GELU of the MLP's first layer. It is
compiled and tested here; the core has no fused op to register it under yet.
"""

from dataclasses import dataclass

from . import _common, _reduce
from ._runtime import cdiv, kernel, launch, next_pow2, tl, xp_of


@kernel
def _gemm(a_ptr, b_ptr, c_ptr, bias_ptr, pre_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
          HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr, ACT: tl.constexpr, WRITE_PRE: tl.constexpr,
          PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          GROUP_M: tl.constexpr):
    # program id -> (tile row, tile column), GROUP_M tile rows at a time for L2 reuse of B
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mmask = rm < M
    nmask = rn < N
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn.to(tl.int64)[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = (k0 + rk) < K
        a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None] & nmask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk

    cmask = mmask[:, None] & nmask[None, :]
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * scm + rn.to(tl.int64)[None, :] * scn
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        if WRITE_PRE:
            tl.store(pre_ptr + rm.to(tl.int64)[:, None] * scm + rn.to(tl.int64)[None, :] * scn,
                     acc.to(pre_ptr.dtype.element_ty), mask=cmask)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))  # x * sigmoid(2u) = GELU(x), tanh form
    if ACCUMULATE:
        acc += tl.load(c_ptrs, mask=cmask, other=0.0).to(tl.float32)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=cmask)


#: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for fp16/bf16 inputs, forward and backward
#: products: picked from a sweep of seven tiles on the H200 (reports/triton-h200/sweep.json)
TILE16 = (256, 128, 64, 8, 3)
TILE16_BACKWARD = (128, 256, 64, 8, 4)


def _config(dtype: str, M: int, N: int, K: int, backward: bool = False) -> dict:
    """Tile sizes and pipeline depth for one product (M x N output, depth K)."""
    if dtype == "float32":
        bm, bn, bk, warps, stages = 64, 64, 32, 4, 3
    else:  # two warpgroups on a 256 x 128 (128 x 256) tile: 147 KB (196 KB) of shared memory
        bm, bn, bk, warps, stages = TILE16_BACKWARD if backward else TILE16
    # small problems (tests, T=1): shrink the tile to the problem, never below tl.dot's 16
    bm = min(bm, max(16, next_pow2(M)))
    bn = min(bn, max(16, next_pow2(N)))
    bk = min(bk, max(16, next_pow2(K)))
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)


def gemm(a, b, c, a_strides, b_strides, M, N, K, bias=None, accumulate=False, act=0, pre=None,
         backward=False):
    """c (M,N) (+)= a @ b (+ bias), with a and b given by (pointer array, element strides)."""
    dt = str(a.dtype)
    cfg = _config(dt, M, N, K, backward)
    grid = (cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"]),)
    launch(_gemm, grid, a, b, c, bias if bias is not None else c, pre if pre is not None else c,
           M, N, K, a_strides[0], a_strides[1], b_strides[0], b_strides[1], N, 1,
           HAS_BIAS=bias is not None, ACCUMULATE=accumulate, ACT=act, WRITE_PRE=pre is not None,
           PRECISION=_common.dot_precision(dt), **cfg)
    return c


@dataclass
class Saved:
    x: object       # (N,K)
    weight: object  # (M,K)
    has_bias: bool


def _check(x, weight, bias):
    dt = _common.check_float("matmul", "x", x)
    for name, a in (("weight", weight), ("bias", bias)):
        if a is not None and str(a.dtype) != dt:
            raise TypeError(f"matmul: '{name}' must have x's dtype {dt}, got {a.dtype}")
    _common.check_contiguous("matmul", x=x, weight=weight, bias=bias)


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    _check(x, weight, bias)
    N, K = x.shape
    M = weight.shape[0]
    y = _common.output("matmul", xp_of(x), out, (N, M), x.dtype)
    gemm(x, weight, y, (K, 1), (1, K), N, M, K, bias=bias)   # B[k, m] = W[m, k]
    return y, Saved(x, weight, bias is not None)


def forward_gelu(x, weight, bias=None, out=None, pre=None):
    """The fused MLP layer: out = gelu(x @ W.T + bias), and pre = x @ W.T + bias when `pre` is given."""
    _check(x, weight, bias)
    N, K = x.shape
    M = weight.shape[0]
    xp = xp_of(x)
    y = _common.output("matmul", xp, out, (N, M), x.dtype)
    gemm(x, weight, y, (K, 1), (1, K), N, M, K, bias=bias, act=1, pre=pre)
    return y


def backward(saved, dout, grads):
    x, weight = saved.x, saved.weight
    _common.check_contiguous("matmul", dout=dout)
    N, K = x.shape
    M = weight.shape[0]
    xp = xp_of(x)
    dx = _common.grad_buffer("matmul", grads, "x", x, xp)
    gemm(dout, weight, dx, (M, 1), (K, 1), N, K, M, backward=True)                        # dx = dy @ W
    gemm(dout, x, grads["weight"], (1, M), (K, 1), M, K, N, accumulate=True, backward=True)  # dW += dy.T @ x
    result = {"x": dx, "weight": grads["weight"]}
    if saved.has_bias:
        _reduce.colsum_into(dout, grads["bias"], xp)                           # db += sum_n dy
        result["bias"] = grads["bias"]
    return result
