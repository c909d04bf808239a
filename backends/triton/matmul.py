"""matmul, triton: a persistent tensor-core GEMM with the bias (and optionally GELU) in its epilogue.

One kernel computes C = A @ B (+ bias) (+ C, to accumulate) for any strides, so the forward and
both backward products are the same code with the operands' strides swapped:

    forward    y (N,M)  = x (N,K) @ W.T       A = x,      B[k, m] = W[m, k]   (+ bias in the epilogue)
    backward   dx (N,K) = dy (N,M) @ W        A = dy,     B = W
               dW (M,K) += dy.T @ x           A[m, n] = dy[n, m], B = x       (ACCUMULATE: load, add, store)
               db (M)  += column sums of dy   the row sums of dW's A (ROWSUM, below), or _reduce.colsum_into

Tiling. A work item is one BLOCK_M x BLOCK_N tile of C and one slice of K (SPLIT_K slices, see
below); the kernel walks K in BLOCK_K steps keeping the float32 accumulator in registers, and
Triton pipelines the loads (num_stages) and issues wgmma for fp16/bf16 on sm_90. The grid is
persistent: at most the configuration's `ctas_per_sm` programs per SM, each walking the work items
p, p + P, ... With FLATTEN, Triton fuses that loop and the K loop into one software pipeline, which loads the next
tile while the epilogue of the last one runs (with K = 768, twelve BLOCK_K steps a tile, the
epilogue is not negligible). It fuses them only if the K loop's trip count is the same for every
work item: `k_steps` BLOCK_K steps, the last K slice reading zeros past K (TMA zero-fills; the
pointer loads are masked). Work items are ordered in groups of GROUP_M tile rows so that programs
running together share tiles of B in L2.

Loads. For fp16/bf16 operands whose rows are 16-byte aligned (every GPT-2 shape) the tiles come
through Hopper's tensor memory accelerator: device-side tensor descriptors (`TMA`), one per operand,
over the operand as it is stored, row-major: A as (M, K), or, for dW's A = dy.T, as the (K, M)
array dy, loaded (BLOCK_K, BLOCK_M) and transposed in shared memory (`A_T`), which wgmma reads
directly (16-bit operands may be either major); B likewise as (K, N), or (N, K) for the forward's
W (`B_T`). The descriptors zero-fill out-of-range rows and columns, so no masks. C is stored
(and, when accumulating, first loaded) through a descriptor as well (`TMA_C`): the accumulator is
staged in shared memory and written by the copy engine, asynchronously, while the next tile starts;
a configuration's `epi_halves=2` stages it in two column halves (half the shared memory, room for a
deeper pipeline).
The descriptor is 3-D, (K slices, M, N), so that split-K's float32 slices (below) go the same way.
Anything else (float32, unaligned rows, the small test shapes) uses plain masked pointer loads and
stores in the same loop, and C alone takes plain stores where the configuration says `tma_store=False`
(no shared memory left for its staging: the dW and few-row entries).

Split-K. dW's output is small (768 x 768 for the attention projection: 18 tiles of 128 x 256 for
132 SMs) while its depth is the batch (16384 rows). With SPLIT_K > 1 each slice of K writes its own
float32 partial tile to a (SPLIT_K, M, N) buffer and `_reduce.splitk_finish_into` adds the slices in
order (then the bias, then C) - deterministic, no atomics.

Bias gradient. With ROWSUM the dW kernel also sums the rows of its A = dy.T, i.e. the columns of
dy: one more wgmma per K step, A @ e0 with e0 (BLOCK_K, 16) ones in column 0 and zeros elsewhere,
accumulated in float32 beside the tile; the programs of tile column 0 store it, one (slice, M)
float32 row per K slice, and `_reduce.finish_into` adds the slices in order to db. That saves
reading dy a second time (100 MB for fc at 16384 rows); a dW configuration with `separate_db` takes
the separate column sum instead, where that is faster.

float32 inputs are multiplied in IEEE float32 (input_precision="ieee"), as the float32 contract
asks; a TF32 variant would be about 8x faster and 1e-3 accurate.

`ACT=1` applies GPT-2's tanh GELU to the result in the epilogue (y = gelu(x @ W.T + b)) and can also
write the pre-activation (`WRITE_PRE`), or with `PRE_GRAD` the GELU's derivative there instead, in
pre's own 16-bit dtype (through C's descriptor type bit for bit, so that the two TMA stores share
one staging buffer): the forward of the fused op matmul_gelu (matmul_gelu.py). With TMA stores the
epilogue works on one column part (EPI_HALVES) at a time: saved, activated, stored. `SCALE_A`
multiplies each tile of A elementwise by the same tile of a second array laid out as A (through
pre_ptr) as it is loaded: matmul_gelu's backward GEMMs take A = dy * gelu'(pre) that way, so dpre
is never written. `SOFTMAX_STATS` makes the epilogue write, per row and tile, the max of the
tile's columns below n_valid and the sum of exp(C - max) over them (a (2, M, tiles_n) float32
array), and store C minus that max: classifier_crossentropy's logits, whose loss then needs no
pass over them (classifier_crossentropy.py). `GELU_GRAD` multiplies the result by gelu' of a second
array laid out as C (pre_ptr), read through TMA in the epilogue where C is stored that way:
gelu_matmul's dx = (dy @ W) * gelu'(x), so the GELU backward's pass over memory is gone
(gelu_matmul.py).

Launch configurations: one table, `CONFIGS` (a `GemmConfig` per dtype class, product and, where a
GPT-2 linear measured better with its own, weight shape), chosen by `launch_config`; a forward of
at most FEW_ROWS rows (a decoding step) has its own entry. Each entry cites the H200 measurement it
rests on (reports/triton-h200/notes-matmul.md); the candidates that lost are in that note and in
bench/tune/matmul_sweep.py, which runs `gemm` with a given `GemmConfig` (the `config` argument).

What this variant does not do: TF32 (float32 stays IEEE), FP8, stream-K (a small output such as
attn_proj's dW relies on split-K and still leaves SMs idle in the last wave), warp-specialised
producer/consumer partitions (Triton 3.6 does not build them for sm_90), or strided rows on the TMA
path (operands must have contiguous rows, as every op of this contract passes them; anything else
takes the masked pointer loads).
"""

from dataclasses import dataclass, replace

from . import _common, _reduce
from ._runtime import cdiv, kernel, launch, next_pow2, tl, triton, xp_of
from .gelu import gelu_gate, gelu_grad, gelu_grad_gated


@kernel
def _gemm(a_ptr, b_ptr, c_ptr, bias_ptr, pre_ptr, rowsum_ptr, stats_ptr, M, N, K, K_SPLIT, sam, sak, sbk, sbn,
          n_valid,
          HAS_BIAS: tl.constexpr, ROWSUM: tl.constexpr, ACCUMULATE: tl.constexpr, ACT: tl.constexpr,
          WRITE_PRE: tl.constexpr,
          PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          GROUP_M: tl.constexpr, TMA: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
          TMA_C: tl.constexpr, EPI_HALVES: tl.constexpr, FLATTEN: tl.constexpr, PRE_GRAD: tl.constexpr,
          SCALE_A: tl.constexpr, SOFTMAX_STATS: tl.constexpr, GELU_GRAD: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tiles_m * tiles_n
    per_group = GROUP_M * tiles_n
    work_items = tiles * tl.cdiv(K, K_SPLIT)
    k_steps = tl.cdiv(K_SPLIT, BLOCK_K)  # the same for every work item (the last slice reads zeros past K)
    if TMA:  # descriptors over the operands as stored (row-major); A_T / B_T: stored transposed
        if A_T:
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[sak, 1], block_shape=[BLOCK_K, BLOCK_M])
            if SCALE_A:  # the scale, laid out as A
                s_desc = tl.make_tensor_descriptor(pre_ptr, shape=[K, M], strides=[sak, 1], block_shape=[BLOCK_K, BLOCK_M])
        else:
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[sam, 1], block_shape=[BLOCK_M, BLOCK_K])
            if SCALE_A:
                s_desc = tl.make_tensor_descriptor(pre_ptr, shape=[M, K], strides=[sam, 1], block_shape=[BLOCK_M, BLOCK_K])
        if B_T:
            b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[sbn, 1], block_shape=[BLOCK_N, BLOCK_K])
        else:
            b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[sbk, 1], block_shape=[BLOCK_K, BLOCK_N])
    if TMA_C:  # C (or the split-K partials, a (slices, M, N) float32 array) through TMA too
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[tl.cdiv(K, K_SPLIT), M, N], strides=[tl.cast(M, tl.int64) * N, N, 1],
                                           block_shape=[1, BLOCK_M, BLOCK_N // EPI_HALVES])
        if WRITE_PRE:  # what ACT saves for the backward, laid out as C (one K slice), through C's own type
            # bit for bit (pre may be float16 beside a bfloat16 C): Triton gives the TMA stores of one
            # type one staging buffer, and a second one would leave room for only one program per SM
            p_desc = tl.make_tensor_descriptor(pre_ptr.to(c_ptr.dtype), shape=[1, M, N],
                                               strides=[tl.cast(M, tl.int64) * N, N, 1],
                                               block_shape=[1, BLOCK_M, BLOCK_N // EPI_HALVES])
        elif GELU_GRAD:  # the array whose gelu' scales the result, laid out as C, in its own dtype
            p_desc = tl.make_tensor_descriptor(pre_ptr, shape=[1, M, N], strides=[tl.cast(M, tl.int64) * N, N, 1],
                                               block_shape=[1, BLOCK_M, BLOCK_N // EPI_HALVES])
        else:
            p_desc = c_desc  # unused
    if ROWSUM:  # e0 (BLOCK_K, 16): column 0 ones, the rest zeros; A @ e0 puts A's row sums in column 0
        e0 = ((tl.arange(0, BLOCK_K)[:, None] >= 0) & (tl.arange(0, 16)[None, :] == 0)).to(a_ptr.dtype.element_ty)

    for work in tl.range(tl.program_id(0), work_items, tl.num_programs(0), flatten=FLATTEN):
        # work item -> (K slice, tile row, tile column), GROUP_M tile rows at a time for L2 reuse of B
        split = work // tiles
        t = work % tiles
        first_m = (t // per_group) * GROUP_M
        rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
        tile_m = first_m + (t % per_group) % rows_in_group
        tile_n = (t % per_group) // rows_in_group
        rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mmask = rm < M
        nmask = rn < N
        k_lo = split * K_SPLIT
        k_hi = tl.minimum(K, k_lo + K_SPLIT)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_rows = tl.zeros((BLOCK_M, 16), dtype=tl.float32)
        for ki in range(0, k_steps):
            k0 = k_lo + ki * BLOCK_K
            if TMA:
                if A_T:
                    a = a_desc.load([k0, tile_m * BLOCK_M])
                    if SCALE_A:
                        a = _scaled(a, s_desc.load([k0, tile_m * BLOCK_M]))
                    a = a.T
                else:
                    a = a_desc.load([tile_m * BLOCK_M, k0])
                    if SCALE_A:
                        a = _scaled(a, s_desc.load([tile_m * BLOCK_M, k0]))
                if B_T:
                    b = b_desc.load([tile_n * BLOCK_N, k0]).T
                else:
                    b = b_desc.load([k0, tile_n * BLOCK_N])
            else:
                rk = k0 + tl.arange(0, BLOCK_K)
                kmask = rk < k_hi
                a_offs = rm.to(tl.int64)[:, None] * sam + rk.to(tl.int64)[None, :] * sak
                a = tl.load(a_ptr + a_offs, mask=mmask[:, None] & kmask[None, :], other=0.0)
                if SCALE_A:
                    a = _scaled(a, tl.load(pre_ptr + a_offs, mask=mmask[:, None] & kmask[None, :], other=0.0))
                b = tl.load(b_ptr + rk.to(tl.int64)[:, None] * sbk + rn.to(tl.int64)[None, :] * sbn,
                            mask=kmask[:, None] & nmask[None, :], other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            if ROWSUM:
                acc_rows = tl.dot(a, e0, acc_rows, input_precision=PRECISION)

        # epilogue; with split-K, c_ptr is the (splits, M, N) float32 partial buffer
        if ROWSUM:  # this slice's row sums of A, once per tile row: rowsum_ptr is (splits, M) float32
            if tile_n == 0:
                tl.store(rowsum_ptr + split * M + rm, tl.sum(acc_rows, axis=1), mask=mmask)
        cmask = mmask[:, None] & nmask[None, :]
        offs = rm.to(tl.int64)[:, None] * N + rn.to(tl.int64)[None, :]
        m0 = tile_m * BLOCK_M
        n0 = tile_n * BLOCK_N
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        if SOFTMAX_STATS:  # the classifier's logits: C gets them minus their row's max over this tile
            acc = _softmax_stats(acc, stats_ptr, rm, rn, mmask, M, n_valid, tile_n, tl.cdiv(N, BLOCK_N))
        if TMA_C:  # in column parts (EPI_HALVES), each activated, saved and stored before the next
            if EPI_HALVES == 2:
                acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
                _finish_part(acc0, c_desc, p_desc, pre_ptr.dtype.element_ty, split, m0, n0, ACT, WRITE_PRE, PRE_GRAD,
                             ACCUMULATE, GELU_GRAD)
                _finish_part(acc1, c_desc, p_desc, pre_ptr.dtype.element_ty, split, m0, n0 + BLOCK_N // 2, ACT,
                             WRITE_PRE, PRE_GRAD, ACCUMULATE, GELU_GRAD)
            else:
                _finish_part(acc, c_desc, p_desc, pre_ptr.dtype.element_ty, split, m0, n0, ACT, WRITE_PRE, PRE_GRAD,
                             ACCUMULATE, GELU_GRAD)
        else:
            if GELU_GRAD:
                acc *= gelu_grad(tl.load(pre_ptr + offs, mask=cmask, other=0.0).to(tl.float32))
            if ACT == 1:
                acc, saved = _activated(acc, PRE_GRAD)
                if WRITE_PRE:
                    tl.store(pre_ptr + offs, saved.to(pre_ptr.dtype.element_ty), mask=cmask)
            c_ptrs = c_ptr + split.to(tl.int64) * M * N + offs
            if ACCUMULATE:
                acc += tl.load(c_ptrs, mask=cmask, other=0.0).to(tl.float32)
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _activated(pre, PRE_GRAD: tl.constexpr):
    """(gelu(pre), what ACT=1 keeps of the float32 pre-activation: pre itself, or with PRE_GRAD
    gelu'(pre)); one exp for both (gelu.py's gate)."""
    s = gelu_gate(pre)
    if PRE_GRAD:
        return pre * s, gelu_grad_gated(pre, s)
    return pre * s, pre


@triton.jit
def _finish_part(part, c_desc, p_desc, pre_dtype: tl.constexpr, split, m0, n0, ACT: tl.constexpr,
                 WRITE_PRE: tl.constexpr, PRE_GRAD: tl.constexpr, ACCUMULATE: tl.constexpr, GELU_GRAD: tl.constexpr):
    """One (BLOCK_M, W) float32 column part of the result at [m0, n0]: with ACT, its saved
    pre-activation (rounded to pre_dtype, stored through p_desc's type bit for bit) and the GELU;
    with GELU_GRAD, times gelu' of the same part of p_desc's array; then (added to C and) stored
    into C's K slice `split`."""
    BLOCK_M: tl.constexpr = part.shape[0]
    W: tl.constexpr = part.shape[1]
    if GELU_GRAD:
        part *= gelu_grad(p_desc.load([0, m0, n0]).reshape(BLOCK_M, W).to(tl.float32))
    if ACT == 1:
        part, saved = _activated(part, PRE_GRAD)
        if WRITE_PRE:
            p_desc.store([0, m0, n0], saved.to(pre_dtype).to(p_desc.dtype, bitcast=True).reshape(1, BLOCK_M, W))
    if ACCUMULATE:
        part += c_desc.load([0, m0, n0]).reshape(BLOCK_M, W).to(tl.float32)
    c_desc.store([split, m0, n0], part.to(c_desc.dtype).reshape(1, BLOCK_M, W))


@triton.jit
def _softmax_stats(acc, stats_ptr, rm, rn, mmask, M, n_valid, tile_n, tiles_n):
    """For each row of the tile, over its columns below n_valid: the max m and sum(exp(acc - m)),
    stored at stats[0, row, tile_n] and stats[1, row, tile_n] of a (2, M, tiles_n) float32 array
    (m = -inf, sum 0, for a tile wholly in the padding); returns acc - m (acc where m is -inf)."""
    valid = (rn < n_valid)[None, :]
    m = tl.max(tl.where(valid, acc, float("-inf")), axis=1)
    shift = tl.where(m == float("-inf"), 0.0, m)
    acc -= shift[:, None]
    s = tl.sum(tl.where(valid, tl.exp(acc), 0.0), axis=1)
    at = stats_ptr + rm.to(tl.int64) * tiles_n + tile_n
    tl.store(at, m, mask=mmask)
    tl.store(at + tl.cast(M, tl.int64) * tiles_n, s, mask=mmask)
    return acc


@triton.jit
def _scaled(a, scale):
    """a * scale elementwise in float32, rounded back to a's dtype (the tensor cores' input)."""
    return (a.to(tl.float32) * scale.to(tl.float32)).to(a.dtype)


@dataclass(frozen=True)
class GemmConfig:
    """One launch configuration of `_gemm`: its tile (shrunk to small problems by `tile_shape`),
    warps and pipeline stages, and how the work is spread over the SMs."""
    block_m: int
    block_n: int
    block_k: int = 64
    num_warps: int = 8
    num_stages: int = 3
    group_m: int = 8                # tile rows walked together (programs running at once share B in L2)
    flatten: bool = True            # the tile loop and the K loop one software pipeline (FLATTEN)
    ctas_per_sm: int | None = 1     # programs per SM of the persistent grid (None: one per work item)
    split_k: int = 1                # the most K slices a product is cut into (`_split`)
    busy: float = 0.8               # the wave occupancy that is enough when choosing the slices
    epi_halves: int = 2             # C staged for its TMA store in this many column parts
    tma_store: bool = True          # C through TMA where the operands allow it (False: plain stores)
    separate_db: bool = False       # dW only: db by a separate column sum, not fused (ROWSUM; below)


def _tile16(bm, bn, stages, **fields) -> GemmConfig:
    """A 16-bit configuration: BLOCK_K 64 (one 128-byte row of bf16 per TMA box), 8 warps unless given."""
    return GemmConfig(bm, bn, 64, num_stages=stages, **fields)


#: forwards of at most this many rows take the few-row entry (a decoding step: one row per sequence)
FEW_ROWS = 64
#: dW products over at least this many rows (GPT-2 124M at B=64) take the deep entry where one exists
DEEP_ROWS = 65536

#: The launch configurations: (dtype class, product, weight shape (out, in) or ANY) -> GemmConfig.
#: "16" is fp16/bf16, "32" float32; products: "forward" y = x @ W.T, "dx" dy @ W, "dW" dy.T @ x,
#: "few_rows" a forward of at most FEW_ROWS rows, "dW_deep" a dW over at least DEEP_ROWS rows.
#: `launch_config` takes the few-row or deep entry, else the weight shape's, else the product's ANY.
#: Ratios are cuBLAS time / ours on the H200 at 16384 / 32768 rows, bf16 (reports/triton-h200/notes-matmul.md, "Final defaults" and round 2's tables).
ANY = None
_DW = _tile16(128, 256, 4, split_k=16, flatten=False, tma_store=False)
_FLOAT32 = GemmConfig(64, 64, 32, num_warps=4, num_stages=3, flatten=False, ctas_per_sm=None, epi_halves=1)
CONFIGS = {
    # Two 128 x 128 programs of one warpgroup per SM: one's epilogue overlaps the other's main loop
    # (K = 768 is only 12 BLOCK_K steps a tile), tile rows in groups of 4: qkv 0.99x / 1.00x,
    # attn_proj 0.94x / 0.96x, fc 0.98x / 0.98x (one 128 x 256 program per SM: 0.91-0.96x).
    ("16", "forward", ANY): _tile16(128, 128, 3, num_warps=4, ctas_per_sm=2, group_m=4),
    # fc_proj (K = 3072, a long K loop to hide the epilogue): one 128 x 256 program per SM, 0.97x /
    # 0.98x (two 128 x 128: 0.92x / 0.93x).
    ("16", "forward", (768, 3072)): _tile16(128, 256, 3),
    # lm_head: 128 x 256, tile rows in groups of 32, so that W (77 MB) is read from DRAM about once
    # per group: 1.04x / 0.99x (two 128 x 128: 1.00x / 0.94x).
    ("16", "forward", (50304, 768)): _tile16(128, 256, 3, group_m=32),
    # dx: one 128 x 256 program per SM, the loops fused: 0.93-1.00x.
    ("16", "dx", ANY): _tile16(128, 256, 3),
    # dW: the output has few tiles (72 of 128 x 256 for fc on 132 SMs), so K (the rows) is cut into
    # slices (`_split`). 4 stages leave no shared memory for the fused loop's staging of C or of the
    # float32 slices, so the loops stay apart and C takes plain stores: with db fused (ROWSUM), fc's
    # backward 0.96x / 0.94x (the fused-loop 3-stage one: 0.86x / 0.83x).
    ("16", "dW", ANY): _DW,
    # qkv: 128 x 128 makes 108 tiles and needs no split; the float32 dW of mixed precision is staged
    # in two halves (64 KB for its load and store; 128 KB with 4 stages would pass the 227 KB of
    # shared memory): backward 0.94x / 1.00x with db separate (128 x 256 split in 2: 0.89x / 0.91x).
    ("16", "dW", (2304, 768)): _tile16(128, 128, 4, num_warps=4, epi_halves=2, separate_db=True),
    # fc_proj: db separate (its dy is narrow): 0.95x / 0.95x (fused 0.93x / 0.90x).
    ("16", "dW", (768, 3072)): replace(_DW, separate_db=True),
    # Deep dW (65536 rows: a K slice is four times as deep as at 16384, so more slices, fuller waves,
    # pay for their float32 partials; reports/train-h200/f3c5b97/matmul-b64.json, whole backward
    # against cuBLAS): fc in 7 slices, busy 0.95: 0.96x (3 slices: 0.92x); in the step (edb9c07/trace)
    # c_fc's dW and its slices' sum 645 us against 688. db separate: in the step (reports/train-h200/
    # eeba6cc/) the fused row sum cost c_fc's dW 143 us (583 -> 440 us without it), the column sum
    # over dy 116 us. (qkv as 128 x 256 tiles in 6 slices with db fused was 1.03x alone against
    # 0.98x, but 487 us in the step against 466: left out.)
    ("16", "dW_deep", (3072, 768)): replace(_DW, busy=0.95, separate_db=True),
    # attn_proj: 18 tiles of 128 x 256 cut into 7 slices (126 of 132 SMs busy) rather than 6 (108):
    # backward 1.24x / 1.19x.
    ("16", "dW", (768, 768)): replace(_DW, busy=0.9),
    # A decoding step reads W once and the training tiles spread it over few SMs (fc_proj at one row:
    # 3 programs of 128 x 256 for 132 SMs): narrow tiles, one program each, K cut into slices of at
    # least 512 (fc_proj: 12 tiles x 6 slices). Chosen from that arithmetic, not swept; the
    # conformance suite's one-row cases run it.
    ("16", "few_rows", ANY): _tile16(64, 64, 4, num_warps=4, ctas_per_sm=None, split_k=8, epi_halves=1,
                                     flatten=False, tma_store=False),
    # float32 (IEEE dots, no TMA): small tiles for the registers, one program per tile; not swept.
    ("32", "forward", ANY): _FLOAT32,
    ("32", "dx", ANY): _FLOAT32,
    ("32", "dW", ANY): _FLOAT32,
    ("32", "dW", (2304, 768)): replace(_FLOAT32, separate_db=True),   # as the 16-bit entries (not swept)
    ("32", "dW", (768, 3072)): replace(_FLOAT32, separate_db=True),
    ("32", "few_rows", ANY): replace(_FLOAT32, split_k=8),
}

# The bias gradient: fused into the dW kernel (`gemm(rowsum=)`) unless the dW entry says
# `separate_db` (`_reduce.colsum_into`). The fused row sum is one more wgmma per K step (A @ e0, 16
# columns): ~30 us on fc's dW, against 44 us for reading dy (100 MB) again; it loses where dy is
# narrow (fc_proj) or the dW tile is 128 x 128 on one warpgroup (qkv). Whole backward
# (notes-matmul.md, round 2): fc 0.96x / 0.94x fused (0.88x / 0.90x separate), attn_proj 1.24x /
# 1.19x (1.10x / 1.08x); fc_proj 0.95x / 0.95x separate (0.93x / 0.90x fused), qkv 0.94x / 1.00x
# separate (0.60x fused).


def _split(cfg: GemmConfig, block_k: int, tiles: int, K: int, sms: int) -> int:
    """K slice length. The persistent grid runs `slots` = SMs x ctas_per_sm work items at a time;
    tiles x S items fill ceil(tiles x S / slots) waves, so a small output (72 tiles on 132 SMs)
    leaves SMs idle. S is the fewest slices (at most split_k, each at least 512 deep) whose waves are
    at least `busy` (80%) busy, or the busiest; one slice whenever the tiles alone get there (every
    forward and dx product at GPT-2 shapes). Each extra slice costs a float32 (M, N) partial write
    and read."""
    steps = cdiv(K, block_k)
    slots = sms * (cfg.ctas_per_sm or sms)
    most = max(1, min(cfg.split_k, steps * block_k // 512))
    busy = [tiles * s / (slots * cdiv(tiles * s, slots)) for s in range(1, most + 1)]
    splits = next((s for s, b in enumerate(busy, 1) if b >= cfg.busy), busy.index(max(busy)) + 1)
    return cdiv(steps, splits) * block_k


class _Scratch:
    """Global memory for the kernel's device-side tensor descriptors (Triton asks for it per launch)."""

    def __init__(self, size: int):
        import cupy
        self.mem = cupy.cuda.alloc(size)

    def data_ptr(self) -> int:
        return self.mem.ptr


def _tma_ok(xp, dtype: str, *operands) -> bool:
    """TMA needs 16-bit data (here), a 16-byte-aligned base, 16-byte-aligned row strides and
    contiguous rows; operands are (array, row stride, stride along the row)."""
    if dtype == "float32":
        return False
    if xp.__name__ == "cupy" and not _SCRATCH:
        triton.set_allocator(lambda size, align, stream: _Scratch(size))
        _SCRATCH.append(True)
    for a, row_stride, inner_stride in operands:
        ptr = a.data.ptr if xp.__name__ == "cupy" else a.ctypes.data
        if ptr % 16 or (row_stride * a.itemsize) % 16 or inner_stride != 1:
            return False
    return True


_SCRATCH: list = []


def launch_config(dtype: str, product: str, weight_shape: tuple, rows: int) -> GemmConfig:
    """The entry of CONFIGS that `gemm` takes for `product` ("forward", "dx" or "dW") of a linear of
    `weight_shape` (out, in) over `rows` rows (the batch's: dW's K), unless it is given one."""
    kind = "32" if dtype == "float32" else "16"
    shape = tuple(weight_shape)
    if product == "forward" and rows <= FEW_ROWS:
        product = "few_rows"
    if product == "dW" and rows >= DEEP_ROWS and (kind, "dW_deep", shape) in CONFIGS:
        return CONFIGS[(kind, "dW_deep", shape)]
    return CONFIGS.get((kind, product, shape), CONFIGS[(kind, product, ANY)])


def tile_shape(dtype: str, M: int, N: int, K: int, product="forward", weight_shape=(), config=None) -> tuple:
    """(BLOCK_M, BLOCK_N, BLOCK_K) that `gemm` uses for these arguments: the configuration's tile,
    shrunk to small problems (tests, T=1), never below tl.dot's 16."""
    cfg = config or launch_config(dtype, product, weight_shape, K if product == "dW" else M)
    return tuple(min(b, max(16, next_pow2(n))) for b, n in ((cfg.block_m, M), (cfg.block_n, N), (cfg.block_k, K)))


def gemm(a, b, c, a_strides, b_strides, M, N, K, bias=None, accumulate=False, act=0, pre=None, rowsum=None,
         product="forward", weight_shape=(), config=None, pre_grad=False, scale_a=None, softmax_stats=None,
         gelu_grad_of=None):
    """c (M,N) (+)= a @ b (+ bias), with a and b given by (pointer array, element strides); with
    `rowsum` (M,), also rowsum += a.sum(axis=1) (the bias gradient when a = dy.T).
    act=1: c = gelu(a @ b + bias), and `pre` (M,N), when given, gets a @ b + bias (with pre_grad:
    gelu'(a @ b + bias)), rounded to pre's own dtype. `scale_a`, an array laid out as a (the same
    strides, any float dtype): a * scale_a elementwise stands for a, in the product and the row sums.
    softmax_stats=(stats, n_valid): c gets each row of each (BLOCK_M, BLOCK_N) tile minus its max m
    over the tile's columns below n_valid, and stats, a (2, M, tiles_n) float32 array (tiles_n =
    ceil(N / BLOCK_N), BLOCK_N from `tile_shape`), gets m and sum(exp(c - m)) per row and tile
    (the classifier's logits, classifier_crossentropy.py). `gelu_grad_of`, an array laid out as c
    (contiguous rows): c = (a @ b) * gelu'(gelu_grad_of) elementwise, in float32 before the one
    rounding (gelu_matmul's dx; never split along K).
    `product` and the linear's `weight_shape` (out, in) pick the launch configuration
    (`launch_config`); `config`, a GemmConfig, replaces that choice (matmul_gelu's backward, the
    classifier's logits, bench/tune/matmul_sweep.py's candidates)."""
    dt = str(a.dtype)
    xp = xp_of(a)
    cfg = config or launch_config(dt, product, weight_shape, K if product == "dW" else M)
    block_m, block_n, block_k = tile_shape(dt, M, N, K, config=cfg)
    sms = _common.num_sms(xp)
    tiles = cdiv(M, block_m) * cdiv(N, block_n)
    whole_k = act != 0 or softmax_stats is not None or gelu_grad_of is not None  # epilogues of the whole sum
    k_split = K if whole_k else _split(cfg, block_k, tiles, K, sms)
    splits = cdiv(K, k_split)
    programs = tiles * splits if cfg.ctas_per_sm is None else min(tiles * splits, cfg.ctas_per_sm * sms)
    a_t, b_t = a_strides[0] == 1 and a_strides[1] != 1, b_strides[0] == 1 and b_strides[1] != 1
    a_layout = a_strides[::-1] if a_t else a_strides
    tma = _tma_ok(xp, dt, (a, *a_layout), (b, *(b_strides[::-1] if b_t else b_strides)),
                  *([(scale_a, *a_layout)] if scale_a is not None else []))
    one = splits == 1
    out = c if one else xp.empty((splits, M, N), dtype="float32")
    laid_as_c = [(arr, N, 1) for arr in (pre, gelu_grad_of) if arr is not None]  # read or written beside C
    tma_c = tma and cfg.tma_store and _tma_ok(xp, dt, (out, N, 1), *laid_as_c)
    rows = xp.empty((splits, M), dtype="float32") if rowsum is not None else out
    second = next((arr for arr in (pre, scale_a, gelu_grad_of) if arr is not None), c)  # pre_ptr (one at most)
    stats, n_valid = softmax_stats if softmax_stats is not None else (out, N)
    launch(_gemm, (programs,), a, b, out, bias if bias is not None else c, second, rows, stats,
           M, N, K, k_split, a_strides[0], a_strides[1], b_strides[0], b_strides[1], n_valid,
           HAS_BIAS=one and bias is not None, ROWSUM=rowsum is not None, ACCUMULATE=one and accumulate, ACT=act,
           WRITE_PRE=pre is not None, PRE_GRAD=pre_grad, SCALE_A=scale_a is not None,
           SOFTMAX_STATS=softmax_stats is not None, GELU_GRAD=gelu_grad_of is not None,
           PRECISION=_common.dot_precision(dt), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
           GROUP_M=cfg.group_m, TMA=tma, A_T=tma and a_t, B_T=tma and b_t, TMA_C=tma_c,
           EPI_HALVES=cfg.epi_halves if tma_c else 1, FLATTEN=cfg.flatten,
           num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if not one:
        _reduce.splitk_finish_into(out, c, bias, accumulate)
    if rowsum is not None:
        _reduce.finish_into(rows, rowsum)
    return c


@dataclass
class Saved:
    x: object       # (N,K)
    weight: object  # (M,K)
    has_bias: bool


def check_operands(x, weight, bias, op="matmul"):
    """x, weight and bias (or None) share a float dtype of this backend and are contiguous."""
    dt = _common.check_float(op, "x", x)
    for name, a in (("weight", weight), ("bias", bias)):
        if a is not None and str(a.dtype) != dt:
            raise TypeError(f"{op}: '{name}' must have x's dtype {dt}, got {a.dtype}")
    _common.check_contiguous(op, x=x, weight=weight, bias=bias)


def forward(inputs, attrs, out=None):
    x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
    check_operands(x, weight, bias)
    N, K = x.shape
    M = weight.shape[0]
    y = _common.output("matmul", xp_of(x), out, (N, M), x.dtype)
    gemm(x, weight, y, (K, 1), (1, K), N, M, K, bias=bias, weight_shape=(M, K))   # B[k, m] = W[m, k]
    return y, Saved(x, weight, bias is not None)


def backward(saved, dout, grads, op="matmul"):
    """dx, dW (+)=, db (+)= of y = x @ W.T + b; `op` names the op in errors (matmul_gelu's epilogue
    variant ends with this backward)."""
    x, weight = saved.x, saved.weight
    _common.check_contiguous(op, dout=dout)
    N, K = x.shape
    M = weight.shape[0]
    xp = xp_of(x)
    dx = _common.grad_buffer(op, grads, "x", x, xp)
    dW = _common.param_grad(op, grads, "weight", (M, K), x.dtype)   # float32 for 16-bit x: mixed precision
    db = _common.param_grad(op, grads, "bias", (M,), x.dtype) if saved.has_bias else None
    gemm(dout, weight, dx, (M, 1), (K, 1), N, K, M, product="dx", weight_shape=(M, K))    # dx = dy @ W
    weight_grads(dout, x, dW, db)
    result = {"x": dx, "weight": dW}
    if saved.has_bias:
        result["bias"] = db
    return result


def weight_grads(dout, x, dW, db) -> None:
    """dW (M,K) += dout.T @ x and, unless db is None, db (M) += sum_n dout, of y = x @ W.T + b: db
    fused into the dW kernel (ROWSUM) unless the dW entry says separate_db."""
    N, K = x.shape
    M = dW.shape[0]
    separate = db is not None and launch_config(str(x.dtype), "dW", (M, K), N).separate_db
    gemm(dout, x, dW, (1, M), (K, 1), M, K, N, accumulate=True,                            # dW += dy.T @ x
         rowsum=None if separate else db, product="dW", weight_shape=(M, K))               # (db += sum_n dy)
    if separate:
        _reduce.colsum_into(dout, db, xp_of(x))                                # db += sum_n dy
