"""classifier_crossentropy, triton: the tied classifier and the loss, a chunk of rows at a time, so
that only one chunk's logits ever exist (matmul.py's GEMM, crossentropy.py's backward kernel and
one small kernel of its own).

For each chunk of R rows (the last one shorter), in one reusable (R, Vp) buffer z in x's dtype and
a (2, R, tiles) float32 array of per-tile statistics (tiles = Vp / the GEMM's BLOCK_N, 197 at GPT-2):

    z, stats   = x[chunk] @ W.T             the lm_head GEMM (matmul's tuned (50304, 768) forward tile)
                                            with `softmax_stats` in its epilogue: for each row of each
                                            (BLOCK_M, BLOCK_N) tile, still in float32 registers, the
                                            max m over its columns below n_valid and sum exp(z - m);
                                            z is stored minus m, rounded to x's dtype
    losses[chunk], lse                      `_losses` (one program per row): lse = M + log sum_j s_j
                                            exp(m_j - M) over the row's tiles, M = max_j m_j; the
                                            target's logit x[n] . W[t] recomputed as a float32 dot
                                            product; loss = lse - that
  and, given dlosses (training):
    z := dlosses * (softmax - onehot)       crossentropy's backward kernel, in place, exp(z + m_j - lse)
    dx[chunk]  = z @ W                      a dx GEMM (split-K where the chunk has few tiles, `_split`)
    dW_local  (+)= z.T @ x[chunk]           a dW GEMM into a float32 (Vp, C) buffer, the first chunk
                                            writing it, the others accumulating

backward adds dW_local to grads["weight"] (one pass) and hands dx on.

Why the shifted logits. The logits are rounded to x's dtype (bf16) in memory, as the unfused path
rounds them; a logit's absolute rounding error becomes the relative error of its probability
(softmax is exp), so bf16 logits of |z| ~ 40 carry ~0.08, an 8% error in p: a float64 emulation of
the conformance suite's bf16 cases (bench/fused_precision.py, 12 seeds) puts the unfused composition
past the bf16 gradient tolerance by 1.4-10x (large-logits, V257, C768-V2048, padded-vocab), and bf16
logits beside a float32 loss, whose probabilities then do not sum to 1, by up to 40x. Stored minus
their tile's max, the logits that carry the probability (those near the max) are small numbers with
small absolute errors, and the loss never touches the rounded values (lse and m come from the
float32 accumulator, the target's logit from its own dot product): every case at the float32 chunk's
error (worst 0.50 of the tolerance, as float32 logits). The statistics cost one exp per logit in the
GEMM's epilogue and remove crossentropy's forward pass over the logits.

Memory beyond the inputs: z (R x Vp in x's dtype) and the statistics (R x tiles x 8 bytes), dx
(N, C), dW_local (Vp x C float32, 154 MB at GPT-2), against (N, Vp) logits and as many dlogits
unfused (1.65 GB each at N = 16384 in bf16). Traffic against the unfused composition: each chunk
re-reads W for two GEMMs (77 MB in bf16, from L2 in part); the float32 dW_local is read and written
once per chunk (2 x 154 MB) where one dW GEMM over all rows writes it once; dx's split-K slices add
a small float32 partial per chunk. Bigger chunks amortise the W and dW_local traffic.

Rows per chunk: the largest power of two whose z and statistics fit in CONFIG.scratch_bytes
(8192 rows at Vp = 50304 for 16-bit x: 837 MB; 4096 for float32), at most N. Without dlosses only
the first two steps run. `forward_with` runs the op at another ChunkConfig (bench/device/
fused_bench.py times other chunk sizes with it).

Not done here: the GEMMs' launch configurations are matmul's (its lm_head forward, dx and dW
entries), not tuned for a chunk; the logits of an evaluation are never kept (the op's output is
the loss); W must be the tied (Vp, C) embedding in x's dtype.
"""

from dataclasses import dataclass, replace

from euler_core.ops.classifier_crossentropy import SPEC

from . import _common, _reduce, crossentropy, matmul
from ._runtime import cdiv, kernel, launch, next_pow2, tl, xp_of
from .residual import copy_into

OP = "classifier_crossentropy"


@dataclass(frozen=True)
class ChunkConfig:
    """How the rows are cut into chunks, and the dx GEMM's K slices."""
    scratch_bytes: int  # the chunk's buffers (z and its statistics) may take this many bytes
    dx_split_k: int     # the dx GEMM's K (= Vp) may be cut into this many slices (16-bit x)


#: 1 GiB of scratch: 8192-row chunks at GPT-2's vocabulary (837 MB); bigger chunks amortise the W
#: and dW_local traffic paid once per chunk (above). Not swept: bench/device/fused_bench.py times
#: other chunk sizes beside it.
CONFIG = ChunkConfig(scratch_bytes=2 ** 30, dx_split_k=8)


@kernel
def _losses(stats_ptr, x_ptr, w_ptr, targets_ptr, losses_ptr, lse_ptr, R, tiles, C,
            BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """Row r: lse from its tiles' (max, sum) in stats (2, R, tiles), the target's logit as x[r] . W[t]
    in float32, loss = lse - that (0 where the target is -1)."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_T)
    m = tl.load(stats_ptr + row * tiles + j, mask=j < tiles, other=float("-inf"))
    s = tl.load(stats_ptr + (R + row) * tiles + j, mask=j < tiles, other=0.0)
    top = tl.max(m, axis=0)  # finite: every row has a column below n_valid
    lse = top + tl.log(tl.sum(s * tl.exp(m - top), axis=0))
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target >= 0
    c = tl.arange(0, BLOCK_C)
    xr = tl.load(x_ptr + row * C + c, mask=c < C, other=0.0).to(tl.float32)
    wr = tl.load(w_ptr + tl.where(valid, target, 0) * C + c, mask=c < C, other=0.0).to(tl.float32)
    picked = tl.sum(xr * wr, axis=0)
    tl.store(losses_ptr + row, tl.where(valid, lse - picked, 0.0).to(losses_ptr.dtype.element_ty))
    tl.store(lse_ptr + row, lse)


@dataclass
class Saved:
    dlosses: object  # (N,) the gradient given ahead (None: an evaluation forward)
    dx: object       # (N,C) in x's dtype
    dweight: object  # (Vp,C) float32


def _logits_config(dtype: str, R: int, Vp: int, C: int) -> tuple:
    """(launch configuration, BLOCK_N, tiles) of the logits GEMM for chunks of R rows: one
    configuration for every chunk (a shorter last one included), so one tile width for the
    statistics."""
    cfg = matmul.launch_config(dtype, "forward", (Vp, C), R)
    block_n = matmul.tile_shape(dtype, R, Vp, C, config=cfg)[1]
    return cfg, block_n, cdiv(Vp, block_n)


def row_bytes(Vp: int, C: int, dtype: str, R: int) -> int:
    """Bytes of z and its statistics per row of a chunk of R rows."""
    return Vp * (4 if dtype == "float32" else 2) + 2 * _logits_config(dtype, R, Vp, C)[2] * 4


def chunk_rows(N: int, Vp: int, C: int, dtype: str, scratch_bytes: int) -> int:
    """Rows per chunk: the largest power of two whose z and statistics fit, at least 1, at most N."""
    fit = max(1, scratch_bytes // row_bytes(Vp, C, dtype, N))
    R = min(N, 1 << (fit.bit_length() - 1))
    while R > 1 and R * row_bytes(Vp, C, dtype, R) > scratch_bytes:  # a few-row chunk's narrower tiles
        R //= 2
    return R


def forward(inputs, attrs, out=None):
    return forward_with(CONFIG, inputs, attrs, out)


def forward_with(cfg: ChunkConfig, inputs, attrs, out=None):
    """The op's forward with the chunks of `cfg` (`forward` is this with CONFIG)."""
    x, weight, targets, dlosses = inputs["x"], inputs["weight"], inputs["targets"], inputs.get("dlosses")
    matmul.check_operands(x, weight, None, op=OP)
    _common.check_contiguous(OP, dlosses=dlosses)
    N, C = x.shape
    Vp = weight.shape[0]
    dt = str(x.dtype)
    n_valid = attrs["n_valid"] or Vp
    xp = xp_of(x)
    targets = xp.ascontiguousarray(targets)  # often a view of a token window: copy (N ints)
    losses = _common.output(OP, xp, out, (N,), "float32")
    R = chunk_rows(N, Vp, C, dt, cfg.scratch_bytes)
    logits_config, tile, tiles = _logits_config(dt, R, Vp, C)
    z = xp.empty((R, Vp), dtype=x.dtype)  # one chunk's shifted logits, then their gradient in place
    stats = xp.empty((2 * R * tiles,), dtype="float32")
    lse = xp.empty((R,), dtype="float32")
    train = dlosses is not None
    if train:
        dx = xp.empty((N, C), dtype=x.dtype)
        dweight = xp.empty((Vp, C), dtype="float32")
        dx_config = None if dt == "float32" else replace(matmul.CONFIGS[("16", "dx", matmul.ANY)],
                                                         split_k=cfg.dx_split_k)
    for r0 in range(0, N, R):
        n = min(R, N - r0)
        rows, zc = slice(r0, r0 + n), z[:n]
        st = stats[:2 * n * tiles].reshape(2, n, tiles)
        matmul.gemm(x[rows], weight, zc, (C, 1), (1, C), n, Vp, C, config=logits_config,
                    softmax_stats=(st, n_valid))                                        # z - m, stats = x W^T
        launch(_losses, (n,), st, x[rows], weight, targets[rows], losses[rows], lse[:n], n, tiles, C,
               BLOCK_T=next_pow2(tiles), BLOCK_C=next_pow2(C))                          # losses, lse
        if not train:
            continue
        crossentropy.dlogits_into(zc, targets[rows], lse[:n], dlosses[rows], zc, n_valid,
                                  tile_max=st[0], tile=tile)                            # z := dlogits
        matmul.gemm(zc, weight, dx[rows], (Vp, 1), (C, 1), n, C, Vp, product="dx", weight_shape=(Vp, C),
                    config=dx_config)                                                   # dx = d W
        matmul.gemm(zc, x[rows], dweight, (1, Vp), (C, 1), Vp, C, n, accumulate=r0 > 0, product="dW",
                    weight_shape=(Vp, C))                                               # dW (+)= d^T x
    return losses, (Saved(dlosses, dx, dweight) if train else Saved(None, None, None))


def backward(saved, grad_output, grads):
    SPEC.check_backward(saved.dlosses, grad_output)
    dx = saved.dx
    dW = _common.param_grad(OP, grads, "weight", saved.dweight.shape, dx.dtype)  # float32 for 16-bit x
    dx_buf = None if grads.get("x") is None else _common.grad_buffer(OP, grads, "x", dx, xp_of(dx))
    _reduce.splitk_finish_into(saved.dweight[None], dW, accumulate=True)         # grads += dW_local
    return {"x": dx if dx_buf is None else copy_into(dx, dx_buf), "weight": dW}
