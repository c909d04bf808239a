"""crossentropy, triton: softmax cross-entropy chunked over the vocabulary; no probabilities kept.

Forward, one program per row (position): walk the first n_valid logits in BLOCK_V chunks, each lane
of the block keeping its own running max m and running sum s of exp(z - m), so the row is read once
and nothing is reduced across lanes until the end. A new logit z meets its lane's (m, s) with one
exp, of minus the distance between them, whichever is larger:

    e = exp(-|z - m|);   z > m:  s = s e + 1,  m = z      (the old sum rescaled to the new max)
                         else:   s = s + e                 (z's own term)

At the end the lanes are merged: M = max m, S = sum s exp(m - M); loss = M + log(S) - z[target],
0 where the target is -1. Saved: the logsumexp (N,) float32.

The chunks wholly below n_valid are read unmasked, and only the last one with a mask: GPT-2's
n_valid = 50257 is odd, so a mask `cols < n_valid` on every chunk would keep Triton from proving
that 8 neighbouring lanes agree on it, and each lane would load its own 2 bytes instead of 16 (589
against 457 us at 16384 rows on the H200, reports/triton-h200/crossentropy-sweep.json). The loop's
loads are pipelined (`tl.range(num_stages=FORWARD_STAGES)`, asynchronous copies).

Backward, one program per (row, chunk): dlogits = dloss * (exp(z - lse) - [v == target]) for v <
n_valid, 0 in the padded columns and on ignored rows: one read and one write of the logits. Naive
materialises the (B,T,V) softmax in float64; this never holds more than a chunk.

The classifier fused with the loss, classifier_crossentropy.py, runs the backward kernel on one
chunk of rows at a time (`dlogits_into`), on logits its GEMM stored minus each tile's row max (`TILE`:
the max is added back as each logit is read); its loss comes from that GEMM's epilogue instead of
the forward kernel. This variant is the loss alone, as the spec defines it.

Not done: the logits' gradient is not fused into the classifier's GEMM here (that is
classifier_crossentropy), label smoothing and z-loss are not offered, and a row is one program, so
vocabularies are walked serially within it (fine at GPT-2's 16384+ rows; a few rows of a huge
vocabulary would leave SMs idle).
"""

from dataclasses import dataclass

from . import _common
from ._runtime import cdiv, kernel, launch, next_pow2, tl, triton, xp_of

#: Launch configuration. Chunk widths (at most; smaller vocabularies take the next power of two
#: above V). The forward's 2048-wide chunks on 4 warps (16 logits a lane: the loads of several
#: programs in flight on each SM while others do the exps), loads two deep: 457 us at 16384 rows of
#: 50304, 85% of the H200's copy bandwidth; 4096-wide 502 us, 8192-wide 622 us, a cross-block
#: reduction of each chunk 60% (reports/triton-h200/crossentropy-sweep.json). The backward: 4096-wide
#: chunks, 8 warps (4 below 2048), not swept.
FORWARD_BLOCK_V, BACKWARD_BLOCK_V = 2048, 4096
FORWARD_WARPS, FORWARD_STAGES = 4, 2


@triton.jit
def _online_update(m, s, z):
    """Each lane's running (max, sum of exp(z - max)) after meeting z (-inf: nothing met)."""
    e = tl.exp(-tl.abs(z - m))
    return tl.maximum(m, z), tl.where(z > m, s * e + 1.0, s + e)


@triton.jit
def row_loss(base, targets_ptr, losses_ptr, row, n_valid, BLOCK_V: tl.constexpr, STAGES: tl.constexpr):
    """The loss of one row of logits at `base` (stored at losses_ptr[row]); returns (lse, target).
    crossentropy_onepass.py's kernel starts with this too."""
    # per lane; m starts below any logit but finite, so that z - m is never -inf - (-inf)
    m = tl.full((BLOCK_V,), -3.0e38, dtype=tl.float32)
    s = tl.zeros((BLOCK_V,), dtype=tl.float32)
    lanes = tl.arange(0, BLOCK_V)
    n_full = n_valid - n_valid % BLOCK_V
    for v0 in tl.range(0, n_full, BLOCK_V, num_stages=STAGES):  # whole chunks: no mask
        m, s = _online_update(m, s, tl.load(base + v0 + lanes).to(tl.float32))
    cols = n_full + lanes  # the rest, masked (a masked column is -inf: exp gives 0)
    m, s = _online_update(m, s, tl.load(base + cols, mask=cols < n_valid, other=float("-inf")).to(tl.float32))
    m_row = tl.max(m, axis=0)
    lse = m_row + tl.log(tl.sum(s * tl.exp(m - m_row), axis=0))
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target >= 0
    picked = tl.load(base + tl.where(valid, target, 0)).to(tl.float32)
    tl.store(losses_ptr + row, tl.where(valid, lse - picked, 0.0).to(losses_ptr.dtype.element_ty))
    return lse, target


@kernel
def _ce_forward(logits_ptr, targets_ptr, losses_ptr, lse_ptr, V, n_valid, BLOCK_V: tl.constexpr,
                STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lse, _ = row_loss(logits_ptr + row * V, targets_ptr, losses_ptr, row, n_valid, BLOCK_V, STAGES)
    tl.store(lse_ptr + row, lse)


@kernel
def _ce_backward(logits_ptr, targets_ptr, lse_ptr, dlosses_ptr, dlogits_ptr, tile_max_ptr, V, n_valid, tiles_n,
                 BLOCK_V: tl.constexpr, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    target = tl.load(targets_ptr + row).to(tl.int64)
    dloss = tl.load(dlosses_ptr + row).to(tl.float32)
    dloss = tl.where(target >= 0, dloss, 0.0)
    lse = tl.load(lse_ptr + row)
    real = cols < n_valid
    z = tl.load(logits_ptr + row * V + cols, mask=real, other=0.0).to(tl.float32)
    if TILE:  # stored minus the max of their TILE-wide tile (the classifier's GEMM): z - lse = z + (max - lse)
        p = tl.exp(z + (tl.load(tile_max_ptr + row * tiles_n + cols // TILE, mask=real, other=0.0) - lse))
    else:
        p = tl.exp(z - lse)
    d = dloss * (p - tl.where(cols == target, 1.0, 0.0))
    d = tl.where(real, d, 0.0)
    tl.store(dlogits_ptr + row * V + cols, d.to(dlogits_ptr.dtype.element_ty), mask=cols < V)


@dataclass
class Saved:
    logits: object   # (B,T,Vp)
    targets: object  # (B,T) int
    lse: object      # (B*T,) float32 logsumexp over the valid columns
    n_valid: int


def _block(V: int, widest: int) -> int:
    return min(widest, max(16, next_pow2(V)))


def losses_into(logits, targets, losses, lse, n_valid: int) -> None:
    """losses (R,) and lse (R,) float32 of the R rows of logits (R, V), contiguous; targets (R,)."""
    R, V = logits.shape
    launch(_ce_forward, (R,), logits, targets, losses, lse, V, n_valid, BLOCK_V=_block(V, FORWARD_BLOCK_V),
           STAGES=FORWARD_STAGES, num_warps=FORWARD_WARPS)


def dlogits_into(logits, targets, lse, dlosses, dlogits, n_valid: int, tile_max=None, tile: int = 0) -> None:
    """dlogits (R, V) = dlosses * (softmax - onehot), 0 in the padding and on ignored rows. dlogits
    may be logits itself: each element is read before it is written, by the same program. With
    `tile` > 0, logits are stored shifted: row r's columns [j tile, (j+1) tile) minus tile_max[r, j]
    (a (R, ceil(V / tile)) float32 array), as classifier_crossentropy's GEMM writes them."""
    R, V = logits.shape
    block = _block(V, BACKWARD_BLOCK_V)
    tiles = tile_max.shape[1] if tile else 1
    launch(_ce_backward, (R, cdiv(V, block)), logits, targets, lse, dlosses, dlogits,
           tile_max if tile else lse, V, n_valid, tiles, BLOCK_V=block, TILE=tile,
           num_warps=8 if block >= 2048 else 4)


def forward(inputs, attrs, out=None):
    logits, targets = inputs["logits"], inputs["targets"]
    _common.check_float("crossentropy", "logits", logits)
    _common.check_contiguous("crossentropy", logits=logits)
    B, T, V = logits.shape
    n_valid = attrs["n_valid"] or V
    xp = xp_of(logits)
    targets = xp.ascontiguousarray(targets)  # targets are often a view of a token window: copy (B*T ints)
    losses = _common.output("crossentropy", xp, out, (B, T), "float32")
    lse = xp.empty((B * T,), dtype="float32")
    losses_into(logits.reshape(B * T, V), targets, losses, lse, n_valid)
    return losses, Saved(logits, targets, lse, n_valid)


def backward(saved, dlosses, grads):
    logits = saved.logits
    B, T, V = logits.shape
    xp = xp_of(logits)
    dlosses = xp.ascontiguousarray(dlosses)
    dlogits = _common.grad_buffer("crossentropy", grads, "logits", logits, xp)
    dlogits_into(logits.reshape(B * T, V), saved.targets, saved.lse, dlosses, dlogits.reshape(B * T, V), saved.n_valid)
    return {"logits": dlogits}
