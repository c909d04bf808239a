"""matmul, cupy_raw: hand-written tensor-core GEMMs, and cuBLASLt called directly.

    y = x @ W.T + b                   x (N,K), W (M,K) (llm.c's (out, in) layout), b (M) -> y (N,M)

Backward, given dy (N,M):   dx = dy @ W (N,K);   dW += dy.T @ x (M,K);   db += sum_n dy (M)

Each product is one GEMM C[i, j] (+)= sum_k A(i, k) B(j, k) of matmul.cu, whose operands are read in
place, K-major (rows contiguous along k) or MN-major (stored transposed): no transposed copies.

    product   C          rows  cols  depth   A (major)      B (major)
    forward   y          N     M     K       x (K)          W (K)
    dx        dx         N     K     M       dy (K)         W (MN)
    dW        dW (+=)    M     K     N       dy (MN)        x (MN)

Variants (one object each, registered by plugin.py):

    tiled     gemm_mma: mma.sync.m16n8k16 on the tensor cores, a cp.async ring of 128-byte-swizzled
              shared-memory tiles (matmul_layout.cuh), ldmatrix fragments; any shape, with an
              element-wise loader where rows are not 16-byte aligned. What it adds to gemm_simt, the
              CUDA-core GEMM that float32 inputs get: tensor cores, asynchronous copies, a pipeline.
    wgmma     gemm_wgmma: Hopper's path. TMA copies whole tiles (tensor maps encoded on the host,
              _tma.py), a producer warp keeps a ring of them full behind mbarriers, two consumer
              warpgroups multiply with wgmma.mma_async straight from shared memory; one persistent
              block per SM walks the output tiles, so one tile's epilogue overlaps the next one's
              loads. Two schedules (matmul.cu says why): cooperative (both warpgroups on each
              128-row tile; the default) and pingpong (`pingpong=True` in the configuration: each
              warpgroup its own tile, taking turns at the tensor cores, so that one's epilogue
              overlaps the other's multiplies). The results leave by TMA too (store_cols in the
              configuration): each warpgroup rounds its share into a swizzled shared-memory image
              and one thread hands it to the copy engine (forward and dx: 16-bit C; dW: its float32
              split-K slices, or the product added to the float32 gradient by TMA's reduce-add), so
              the tensor cores go on to the next tile while it is written; the staged epilogue
              (threads' own stores) takes the rest (pre, unaligned or ragged widths). Where TMA
              cannot describe an operand (a row not 16-byte aligned: K or M not a multiple of 8) it
              runs gemm_mma instead, as tiled would. cupy_raw's default matmul.
    cublaslt  cuBLASLt's own kernel (_cublaslt.py: ctypes, a preallocated workspace, the heuristic's
              algorithm per shape), float32 compute: the reference point the hand-written ones are
              measured against, and usable inside a captured CUDA graph, which CuPy's cuBLAS is not.

All three: float32 inputs are multiplied in IEEE float32 (gemm_simt; cuBLASLt's CUBLAS_COMPUTE_32F),
16-bit ones on the tensor cores with float32 accumulation. Parameter gradients accumulate into
their buffers in the buffer's dtype: the inputs' or float32 (mixed precision). db, the column sums
of dy, comes out of wgmma's dW kernel itself (one more wgmma per step against a tile of ones, for
the blocks of tile column 0: dy is not read a second time); tiled and cublaslt run matmul.cu's
two-pass column sum. Everything is deterministic: split-K adds its slices in order, and wgmma's
reduce-add into a float32 gradient gives each element one addition per product or per k slice, in
slice order (no atomics that race).

Epilogues: the bias is added in the GEMM's epilogue (every variant); `forward_gelu` (tiled and
wgmma) applies GPT-2's tanh GELU there too and can store the pre-activation for the backward: the
fused first layer of the MLP, which matmul_gelu.py registers as the core's matmul_gelu. wgmma writes
pre through the TMA-store epilogue too (a second tensor map: each pass fills the image with pre,
hands it to the copy engine, then fills it with gelu(pre)).

Split-K: a product with few output tiles for its depth (dW: 768 x 768 from 16384 rows) is cut
along k into slices, each written as float32 to a (slices, rows, cols) buffer, then added in order
by splitk_finish (with the bias and the old C). `_split` picks the slice count. With `serial` in
its configuration (dW's), wgmma's dW into a float32 gradient skips the buffer and the pass: each
slice adds itself to the gradient with the copy engine's reduce-add, in slice order, slice s of a
64-row share of C waiting for a counter that slice s - 1 sets once its additions are done
(matmul.cu's FLAG_SERIAL) and the last slice sets back to zero: the counters are zeroed once, when
made (`_chain_counters`), not before each call. That is grad + s0 + s1 + ... where splitk_finish made grad + (s0 + s1 +
...): another rounding, as repeatable. It pays where a wave holds few slices of a tile
(SERIAL_SLICES_A_WAVE): GPT-2's dW but attn_proj's.

Launch configurations: CONFIGS per engine and product, SHAPE_CONFIGS for GPT-2 shapes that differ.
wgmma's are chosen on the H200 by bench/tune/cupy_raw_wgmma_probe.py (each candidate checked
against float64, then timed beside cuBLASLt: reports/cupy_raw-h200/gemm-43345c6/); mma's are
first guesses (from the triton backend's sweeps, reports/triton-h200/notes-matmul.md, and
CUTLASS's usual tiles; bench/tune/cupy_raw_matmul_sweep.py times neighbours).

Tested without a GPU (tests/test_cupy_raw_matmul.py): the index maps against an emulation of the
hardware, every variant's host side against a NumPy model of each kernel, and gemm_mma and
gemm_wgmma themselves in the CPU emulator; on the H200 by bench/device/cupy_raw.sh.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _common, _cublaslt, _tma
from . import _runtime as rt

# epilogue flags: the #defines of matmul.cu (tests/test_cupy_raw_matmul.py checks they agree)
FLAG_BIAS, FLAG_ACCUMULATE, FLAG_GELU, FLAG_PRE, FLAG_OUT_F32, FLAG_PARTIAL, FLAG_VEC = 1, 2, 4, 8, 16, 32, 64
FLAG_ROWSUM, FLAG_DGELU, FLAG_SERIAL, FLAG_RESIDUAL = 128, 256, 512, 1024

TILE_K = 64          # k per shared-memory tile (gemm_mma, gemm_wgmma); split-K slices are multiples of it
SIMT_TILE = 64       # gemm_simt's tile of C
WG_THREADS = 288     # two consumer warpgroups and a producer warp
WG_EPI_LDS = 40      # floats per row of gemm_wgmma's epilogue buffers (32 columns + 8 of padding)
COLSUM_GROUPS = 128  # row groups of the bias gradient's first pass


def _mma(bm=128, bn=128, warps_m=2, warps_n=4, stages=3, ctas=2, group_m=8, split_k=1, busy=0.8):
    return dict(engine="mma", bm=bm, bn=bn, warps_m=warps_m, warps_n=warps_n, stages=stages, ctas=ctas,
                group_m=group_m, split_k=split_k, busy=busy)


def _wg(bn=128, stages=4, ctas=1, persistent=True, group_m=8, split_k=1, busy=0.8, pingpong=False, bm=128,
        store_cols=0, store_buffers=1, cluster=1, bias_smem=False, serial=False):
    return dict(engine="wgmma", bn=bn, bm=bm, stages=stages, ctas=ctas, persistent=persistent, pingpong=pingpong,
                group_m=group_m, split_k=split_k, busy=busy, store_cols=store_cols, store_buffers=store_buffers,
                cluster=cluster, bias_smem=bias_smem, serial=serial)


#: (engine, product) -> launch configuration. bm x bn: the tile of C (wgmma cooperative: bm 128;
#: pingpong: 64 or 128, each consumer warpgroup's own tile); stages: the shared-memory ring;
#: ctas: blocks per SM the kernel's registers are budgeted for (__launch_bounds__) and split-K's
#: occupancy assumes; persistent (wgmma): a grid of ctas blocks per SM walking the work items, so that
#: one tile's epilogue overlaps the next one's loads (else one block per item); pingpong (wgmma): the
#: schedule of matmul.cu's gemm_wgmma (False: cooperative); group_m: tile rows
#: walked together (L2 reuse); split_k: the most k slices; busy: the wave occupancy that is enough
#: (see _split); store_cols (wgmma): 0, or the columns a consumer warpgroup stages per pass of the
#: TMA-store epilogue (matmul.cu), taken where C allows it (_tma_store_kind); store_buffers (wgmma): 1, or
#: 2 (those columns' shared memory as two buffers of half as many, filled in turn); cluster (wgmma): 1, or
#: 2 (blocks in clusters of two that multiply tiles one above the other and share their B tile, each
#: loading half of it for both: TMA multicast; persistent, either schedule, with the TMA-store epilogue;
#: right on the GPU; on an H100 (reports/train-h100/fe8f063/clusters, bench/tune/cupy_raw_wgmma_probe.py's
#: cluster2) as fast as one block alone at depth 768 (0.85-1.02x cuBLASLt against 0.89-1.02x) and
#: faster at lm_head's dx, depth 50304 (1.09x against 1.01x), but the B=64 step with lm_head's dx
#: clustered gained 0.14%, within its spread (reports/train-h100/ccce3ce); in the pingpong schedule
#: clusters lift the plain products (fc forward 0.79x to 0.85x) but not the GELU ones, whose epilogue
#: bounds them (0.70x either way, reports/train-h100/e0ce96d). So no configuration takes clusters:
#: the probe's cluster2 and pingpong_cluster2 variants do); bias_smem (wgmma, TMA-store epilogue): the
#: epilogue reads the bias from a copy in shared memory that each thread's one load, issued before the
#: main loop, fills (matmul.cu's WG_BIAS_SMEM; the probe's bias_smem: 0.94x cuBLASLt at attn_proj's forward
#: alone against the tree's 0.88x on an H100, but in the B=64 step the forward GEMMs were slower
#: with it, qkv's 404 to 411 us, c_fc's with GELU 684 to 715, the rest of the step 1% faster in the
#: same call: reports/train-h100/1d87fc9/, so only attn_proj's forward takes it, SHAPE_CONFIGS); serial (wgmma, dW into a float32
#: gradient, accumulated): split-K's slices added to C in order by the kernel (FLAG_SERIAL), no
#: splitk_finish, where C has tiles enough (SERIAL_SLICES_A_WAVE, below).
CONFIGS = {
    ("mma", "forward"): _mma(),
    # MN-major operands need more registers for their ldmatrix.trans addresses: at two blocks per SM
    # (128 registers) ptxas spills 4 (dx) and 60 (dW) bytes; one block per SM has room
    ("mma", "dx"): _mma(ctas=1),
    ("mma", "dW"): _mma(ctas=1, split_k=16),
    # 128 x 256 tiles, two m64n256 consumers, a 4-deep ring (192 KB), one persistent block per SM:
    # the layout CUTLASS's Hopper GEMMs favour for bf16 at these sizes. (Two blocks per SM leave a
    # consumer 96 registers - 18 warps over 4 schedulers - and gemm_wgmma spills there.)
    # Every product ends with a TMA-store epilogue (matmul.cu): forward and dx store 16-bit C in two
    # passes of 128 columns (the 4-deep ring leaves room for 2 x 16 KB images); measured against one
    # pass of 256 with a 3-deep ring and four of 64, and against the staged epilogue, at every GPT-2
    # product (reports/cupy_raw-h200/gemm-43345c6, probe.txt): the fastest or within 1% everywhere.
    ("wgmma", "forward"): _wg(bn=256, store_cols=128),
    ("wgmma", "dx"): _wg(bn=256, store_cols=128),
    # dW's output is small (768 x 768: 18 such tiles) but deep: split-K, and 128 x 256 tiles too (their
    # float32 results in four passes of 64 columns, all the ring leaves): 0.97-1.22x cuBLASLt at the
    # five linears' dW against 0.85-1.07x for 128 x 128 tiles (gemm-43345c6, probe.txt: dw256). Waves at
    # least 95% full: at B=64 (depth 65536) c_fc's and the projection's dW (72 tiles) then take 7 slices
    # (504 items, 4 waves of 132) where 90% took 5 (360 items, 3 waves, 615 k-steps an SM against 588):
    # 456 / 433 us against 470 / 440 with the finish, alone on the H200 (bench/tune/cupy_raw_step_gemm_sweep.py,
    # reports/cupy_raw-h200/step-gemm-585a744); more slices (9, 11) gained no more, the finish reading them
    ("wgmma", "dW"): _wg(bn=256, split_k=16, busy=0.95, store_cols=64, serial=True),
    # The two GELU epilogues take the pingpong schedule (each consumer warpgroup its own 64 x 256 tile,
    # its whole share in one image, a 4-deep ring): a warpgroup's GELU (or gelu') then runs while the
    # other's tile multiplies, which pays more than the smaller tiles cost, unlike at the plain products.
    # H200, 16384 rows (reports/train-h200/9a4640e/cupy_gemm/probe.txt): the cooperative 128 x 256
    # tile with a 3-deep ring 0.68x / 0.62x cuBLASLt's plain product, pingpong 0.73x / 0.71x.
    # matmul_gelu's forward (pre and gelu(pre), matmul.cu's WG_STORE_PRE)
    ("wgmma", "forward_pre"): _wg(bn=256, bm=64, stages=4, store_cols=256, pingpong=True),
    ("mma", "forward_pre"): _mma(),
    # the MLP projection's dx times gelu'(pre) (mlp.py): pre prefetched into the TMA store's image
    ("wgmma", "dx_dgelu"): _wg(bn=256, bm=64, stages=4, store_cols=256, pingpong=True),
    ("mma", "dx_dgelu"): _mma(ctas=1),
    # a projection's output added to the residual stream (matmul_residual, mlp's projection): the stream
    # prefetched into the store's image like dx_dgelu's pre, a warpgroup's whole 64 x 256 share in one
    # image, so the forward's ring is one stage shorter (3 x 48 KB beside 2 x 32 KB). The plain forward's
    # schedule. On an H100 at 16384 rows (reports/train-h100/4df7f1a, probe.txt) this ran 0.67x / 0.77x
    # cuBLASLt's plain forward at attn_proj / the MLP projection, pingpong 0.74x / 0.81x, 128 x 128 tiles
    # 0.66x / 0.78x, before the epilogue read its pairs ahead and the prefetch moved (843d0f8, untimed:
    # the probe's residual products judge both schedules again)
    ("wgmma", "forward_residual"): _wg(bn=256, stages=3, store_cols=256),
    ("mma", "forward_residual"): _mma(),
}

#: serial split-K only where a wave of the persistent grid holds at most this many k slices of one tile
#: of C (tiles x this >= blocks): slices of a tile in one wave finish their main loops together and
#: then add themselves one after another. In the B=64 step on an H100 (reports/train-h100/6d69c62) the
#: in-order adds beat the planes and their finish at c_fc's, the MLP projection's and qkv's dW (72, 72
#: and 54 tiles of 128 x 256 on 132 blocks: 482 / 452 / 378 us a call against 499 / 467 / 397) and lost
#: at attn_proj's (18 tiles, seven slices a wave: 150 us against 133); with this rule, 404 us a step
#: less over the three (reports/train-h100/e7e4e94)
SERIAL_SLICES_A_WAVE = 3

#: split-K in order's counters (one int32 per 64-row share of C's tiles), by (array module, device,
#: stream, count): zeroed when made, and zero again after every call (the last k slice of a share
#: resets its counter), so each is made once and reused, with no memset before each call, inside a
#: captured graph too. Kept per stream (calls on one stream never overlap) and never freed (a captured
#: graph holds their addresses).
_CHAINS: dict = {}


def _chain_counters(xp, count: int):
    """The zeroed int32 counters of split-K in order for `count` shares on the current stream."""
    where = (xp.cuda.Device().id, xp.cuda.get_current_stream().ptr) if xp is not np else ()
    key = (xp.__name__, *where, count)
    if key not in _CHAINS:
        _CHAINS[key] = xp.zeros(count, dtype=np.int32)
    return _CHAINS[key]

#: (engine, product, weight shape (out, in)) -> configuration, where a GPT-2 shape wants another
SHAPE_CONFIGS = {
    # lm_head: W (77 MB) is read from DRAM once per group of tile rows: walk 32 of them together
    ("wgmma", "forward", 50304, 768): _wg(bn=256, group_m=32, store_cols=128),
    ("mma", "forward", 50304, 768): _mma(group_m=32),
    # attn_proj's forward (768 x 768, depth 768: the shortest main loop, where the epilogue weighs most):
    # the bias from shared memory and the store's image as two buffers. Alone on an H100 at 16384 rows
    # 0.97x cuBLASLt against 0.88x (reports/train-h100/1d87fc9, probe.txt: bias_smem_double); in the
    # B=64 step 145 us a call against 144 (bsm2/: the other forward GEMMs lost there, so only this one)
    ("wgmma", "forward", 768, 768): _wg(bn=256, store_cols=128, store_buffers=2, bias_smem=True),
}

#: product -> gemm_wgmma's pingpong schedule (matmul.cu): each consumer warpgroup a 64-row tile of its
#: own, one more ring stage in the shared memory the smaller A tiles leave (5 x 40 KB at bn 256, 6 x 24
#: KB at dW's bn 128). Timed against CONFIGS by bench/tune/cupy_raw_wgmma_probe.py: slower at every
#: plain product (0.74-0.87x cuBLASLt against 0.76-0.96x, reports/cupy_raw-h200/pingpong-61e6ab8), so
#: CONFIGS' cooperative schedule is theirs (the GELU epilogues' CONFIGS are pingpong).
PINGPONG_CONFIGS = {
    "forward": _wg(bn=256, bm=64, stages=5, pingpong=True),
    "dx": _wg(bn=256, bm=64, stages=5, pingpong=True),
    "dW": _wg(bm=64, stages=6, split_k=16, busy=0.9, pingpong=True),
}

#: the unaligned gemm_mma (element-wise loads: awkward shapes, tests) budgets registers for one block per SM
UNALIGNED = _mma(ctas=1)


@dataclass(frozen=True)
class Operand:
    """A GEMM operand read in place: A(i, k) = array[i * ld + k] (kmajor) or array[k * ld + i]."""

    array: object
    ld: int
    kmajor: bool


def _pointer(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _rows_aligned(op: Operand, extent: int) -> bool:
    """Every row of the operand starts on a 16-byte boundary and holds whole 16-byte chunks along
    its contiguous direction (`extent` elements: depth for K-major, rows / cols for MN-major)."""
    size = op.array.dtype.itemsize
    return _pointer(op.array) % 16 == 0 and (op.ld * size) % 16 == 0 and (extent * size) % 16 == 0


def _split(cfg: dict, tiles: int, depth: int, sms: int) -> int:
    """The k slice length (a multiple of TILE_K). `slots` = SMs x ctas blocks run at a time; tiles x S
    work items fill ceil(tiles x S / slots) waves. S is the fewest slices (at most split_k, each at
    least 512 deep) whose waves are at least `busy` full, else the fullest; 1 whenever the tiles
    alone get there. Each extra slice costs a float32 (rows, cols) write and read."""
    steps = max(1, rt.cdiv(depth, TILE_K))
    slots = sms * cfg["ctas"]
    most = max(1, min(cfg["split_k"], steps * TILE_K // 512))
    busy = [tiles * s / (slots * rt.cdiv(tiles * s, slots)) for s in range(1, most + 1)]
    slices = next((s for s, b in enumerate(busy, 1) if b >= cfg["busy"]), busy.index(max(busy)) + 1)
    return rt.cdiv(steps, slices) * TILE_K


@dataclass(frozen=True)
class EpilogueRead:
    """An (rows, cols) array of C's dtype that the epilogue reads at every element it writes, through
    the kernel's pre pointer (and, in the TMA-store epilogue, prefetched into the image by its map):
    the GELU's input for FLAG_DGELU (gemm's dgelu_at), the residual stream for FLAG_RESIDUAL."""

    flag: int
    array: object


def _flags(c, bias, pre, accumulate: bool, gelu: bool, out_f32: bool, cols: int, read: EpilogueRead | None = None) -> int:
    flags = (FLAG_BIAS if bias is not None else 0) | (FLAG_ACCUMULATE if accumulate else 0)
    flags |= (FLAG_GELU if gelu else 0) | (FLAG_PRE if pre is not None else 0) | (FLAG_OUT_F32 if out_f32 else 0)
    flags |= read.flag if read is not None else 0
    read_in = read.array if read is not None else None
    if cols % 4 == 0 and all(_pointer(x) % 16 == 0 for x in (c, bias, pre, read_in) if x is not None):
        flags |= FLAG_VEC
    return flags


def _finish(partial, c, bias, rows: int, cols: int, accumulate: bool, out_f32: bool, dtype_of) -> None:
    """c (+)= sum of the split-K slices (+ bias), in slice order."""
    xp = _common.xp_of(c)
    flags = _flags(c, bias, None, accumulate, False, out_f32, cols)
    k = rt.function("matmul", "splitk_finish", {"GEMM_REDUCE": 1, "floatX": _common.ctype(dtype_of)})
    items = rows * cols // 4 if flags & FLAG_VEC else rows * cols
    rt.launch(k, _common.elementwise_grid(max(1, items), xp), _common.ELEMENTWISE_THREADS,
              (partial, c, bias if bias is not None else dtype_of, _common.i32(rows), _common.i32(cols),
               _common.i32(partial.shape[0]), np.int32(flags)))


def colsum_into(x, out) -> None:
    """out (M,) += x (N, M).sum(axis=0): float32 partial sums of COLSUM_GROUPS row groups, then the
    groups added in order (out in x's dtype or float32)."""
    N, M = x.shape
    xp = _common.xp_of(x)
    rows = rt.cdiv(N, min(COLSUM_GROUPS, max(N, 1)))
    groups = rt.cdiv(N, rows)
    partial = xp.empty((groups, M), dtype=np.float32)
    rt.launch(rt.function("matmul", "colsum_partial", {"GEMM_REDUCE": 1, "floatX": _common.ctype(x)}),
              (rt.cdiv(M, 64), groups), 256, (x, partial, _common.i32(N), _common.i32(M), _common.i32(rows)))
    _add_rows(partial, out, x)


def _add_rows(partial, out, dtype_of) -> None:
    """out (M,) += partial (G, M).sum(axis=0), the G float32 rows added in order."""
    G, M = partial.shape
    defines = {"GEMM_REDUCE": 1, "floatX": _common.ctype(dtype_of)}
    out_f32 = str(out.dtype) == "float32"
    rt.launch(rt.function("matmul", "colsum_finish", defines), rt.cdiv(M, 256), 256,
              (partial, out, _common.i32(G), _common.i32(M), np.int32(FLAG_OUT_F32 if out_f32 else 0)))


def _config(engine: str, product: str, weight_shape: tuple, config: dict | None) -> dict:
    """The launch configuration: `config` where given for this engine (a wgmma configuration does not
    carry over to the gemm_mma a TMA-less operand falls back to), else the product's."""
    if config is not None and config.get("engine", engine) == engine:
        return dict(config)
    return dict(SHAPE_CONFIGS.get((engine, product, *weight_shape), CONFIGS[(engine, product)]))


def gemm(engine: str, a: Operand, b: Operand, c, rows: int, cols: int, depth: int, bias=None,
         accumulate: bool = False, gelu: bool = False, pre=None, rowsum=None, product: str = "forward",
         weight_shape: tuple = (), config: dict | None = None, dgelu_at=None, residual=None):
    """c (rows, cols) (+)= A @ B^T (+ bias), GELU'd if asked, on engine "mma", "wgmma" or "cublaslt"
    ("simt" for float32 whatever the engine but cublaslt); with `rowsum` (rows,), also rowsum +=
    A.sum(axis=1) (dW's bias gradient: A = dy^T, MN-major), fused into gemm_wgmma, a column sum of
    A's array otherwise. With `dgelu_at` (rows, cols) in C's dtype, the GELU's input: c =
    gelu'(dgelu_at) * (A @ B^T) (FLAG_DGELU: the MLP projection's dx as d(c_fc's output), bitwise the
    plain product then gelu's backward; nothing else with it). With `residual` (rows, cols) in C's dtype:
    c = residual + (A @ B^T + bias) (FLAG_RESIDUAL: the residual add after a projection, bitwise the
    product as stored then residual's add; the bias alone with it). `product` and the linear's
    `weight_shape` (out, in) pick the launch configuration; `config` overrides it (sweeps). Returns c."""
    dt = str(a.array.dtype)
    if rowsum is not None and (a.kmajor or a.ld != rows):
        raise ValueError("matmul gemm: rowsum= sums the rows of an MN-major A stored as (depth, rows)")
    if dgelu_at is not None and residual is not None:
        raise ValueError("matmul gemm: dgelu_at= and residual= are two epilogues; pass one")
    if dgelu_at is not None and bias is not None:
        raise ValueError("matmul gemm: dgelu_at= (the GELU's backward in the epilogue) takes no bias with it")
    read = (EpilogueRead(FLAG_DGELU, dgelu_at) if dgelu_at is not None
            else EpilogueRead(FLAG_RESIDUAL, residual) if residual is not None else None)
    if read is not None:
        name = "dgelu_at" if dgelu_at is not None else "residual"
        if accumulate or gelu or pre is not None or rowsum is not None:
            raise ValueError(f"matmul gemm: {name}= (read by the epilogue) takes no accumulation, GELU, pre or row "
                             "sums with it")
        if tuple(read.array.shape) != (rows, cols) or str(read.array.dtype) != str(c.dtype) or str(c.dtype) != dt:
            raise ValueError(f"matmul gemm: {name} must be {dt} of C's shape {(rows, cols)} (C in the operands' "
                             f"dtype), got {read.array.dtype} {tuple(read.array.shape)} for C {c.dtype}")
    if rows == 0 or cols == 0:
        return c
    if engine == "wgmma" and dt != "float32" and _tma_ok(a, b, depth):
        return _launch_wgmma(a, b, c, rows, cols, depth, bias, accumulate, gelu, pre, rowsum,
                             _config("wgmma", product, weight_shape, config), read)
    if engine == "cublaslt":
        if dgelu_at is not None:  # (_cublaslt_gemm can: bench/tune's reference, checked before it is timed)
            raise ValueError("matmul cublaslt: no GELU backward in dx here: cuBLASLt's DGELU epilogue gave a wrong "
                             "dx for bf16 at depth 50304 on an H100 (reports/train-h100/fe8f063/fused/check.txt)")
        if residual is not None:
            raise ValueError("matmul cublaslt: no residual epilogue here (its C + D form rounds the sum once, not "
                             "as the product then residual's add): compose matmul and residual")
        if (pre is not None and not gelu) or (gelu and (accumulate or cols % 8)):
            raise ValueError("matmul cublaslt: its GELU epilogue writes C (no accumulation) of whole 8-column groups, "
                             "pre only with gelu")
        _cublaslt_gemm(a, b, c, rows, cols, depth, bias, accumulate, gelu, pre)
    elif dt == "float32":
        _launch_simt(a, b, c, rows, cols, depth, bias, accumulate, gelu, pre, read)
    elif engine in ("mma", "wgmma"):
        aligned = _rows_aligned(a, depth if a.kmajor else rows) and _rows_aligned(b, depth if b.kmajor else cols)
        cfg = _config("mma", product, weight_shape, config) if aligned else dict(UNALIGNED)
        _launch_mma(a, b, c, rows, cols, depth, bias, accumulate, gelu, pre, cfg, aligned, read)
    else:
        raise ValueError(f"matmul: unknown GEMM engine {engine!r}; engines are mma, wgmma, cublaslt")
    if rowsum is not None:
        colsum_into(a.array.reshape(depth, rows), rowsum)
    return c


def _k_split(cfg: dict, tiles: int, depth: int, gelu: bool, xp) -> int:
    """The k slice length: all of depth for the GELU epilogues (they need the whole sum), else _split's."""
    return TILE_K * rt.cdiv(max(depth, 1), TILE_K) if gelu else _split(cfg, tiles, depth, _common.num_sms(xp))


def _launch_gemm(kernel, tiles: int, threads: int, shared: int, cfg: dict, a: Operand, c, rows: int, cols: int,
                 depth: int, bias, accumulate: bool, gelu: bool, pre, lead: tuple, middle: tuple,
                 work_items: bool = False, k_split: int | None = None, flags: int = 0, partial=None,
                 read: EpilogueRead | None = None, cluster: int = 1, serial: bool = False) -> None:
    """Launch one of matmul.cu's GEMMs, whose arguments all read (lead..., c, bias, pre, rows, cols,
    depth, middle..., k_split, group_m, flags): over a (tiles, slices) grid, or (work_items, as
    gemm_wgmma takes them) over one block per (tile, slice) item, or with cfg["persistent"] at most
    ctas blocks per SM that walk the items. With more than one k slice (_split, or `k_split`), into
    float32 partials that splitk_finish then adds to c in order (into `partial`, (slices, rows, cols)
    float32, where the caller has it already). `flags`: more FLAG_ bits. `read`: the array read through
    the kernel's pre pointer (FLAG_DGELU's or FLAG_RESIDUAL's; gemm's). `cluster` > 1 (gemm_wgmma's WG_CLUSTER, persistent,
    `k_split` given): `tiles` counts the clusters' items of a k slice, and the grid is whole clusters."""
    xp = _common.xp_of(c)
    sms = _common.num_sms(xp)
    k_split = k_split or _k_split(cfg, tiles, depth, gelu or read is not None, xp)
    slices = rt.cdiv(max(depth, 1), k_split)
    if not work_items:
        grid = (tiles, slices)
    elif cluster > 1:  # (as many clusters as fit at once: rt.max_active_clusters)
        fit = rt.max_active_clusters(kernel, threads, shared, cluster, off_gpu=sms * cfg["ctas"] // cluster)
        grid = (cluster * min(tiles * slices, fit),)
    elif serial and rt.is_emulating():  # (blocks one after another there: each item its own, so that a
        grid = (tiles * slices,)         # slice's predecessor has always run: matmul.cu's chain_wait)
    else:
        grid = (min(tiles * slices, sms * cfg["ctas"]) if cfg.get("persistent") else tiles * slices,)
    out_f32 = str(c.dtype) == "float32"
    dummy = a.array  # for an absent bias / pre: a floatX pointer the kernel never reads
    if slices == 1 or serial:  # (always one, with read: _k_split's)
        target, flags = c, flags | _flags(c, bias, pre, accumulate, gelu, out_f32, cols, read)
        flags |= FLAG_SERIAL if serial else 0
    else:
        target = partial if partial is not None else xp.empty((slices, rows, cols), dtype=np.float32)
        flags |= FLAG_PARTIAL | (FLAG_VEC if cols % 4 == 0 else 0)
    # the kernel's pre: written (FLAG_PRE) or read (FLAG_DGELU, FLAG_RESIDUAL)
    pre_arg = pre if pre is not None else read.array if read is not None else None
    rt.launch(kernel, grid, threads,
              lead + (target, bias if bias is not None and slices == 1 else dummy,
                      pre_arg if pre_arg is not None else dummy, _common.i32(rows), _common.i32(cols), _common.i32(depth)) + middle
              + (_common.i32(k_split), _common.i32(cfg["group_m"]), np.int32(flags)),
              shared_mem=shared)
    if slices > 1 and not serial:
        _finish(target, c, bias, rows, cols, accumulate, out_f32, dummy)


def _launch_simt(a: Operand, b: Operand, c, rows, cols, depth, bias, accumulate, gelu, pre, read=None):
    kernel = rt.function("matmul", "gemm_simt", {"GEMM_SIMT": 1, "floatX": _common.ctype(a.array)})
    tiles = rt.cdiv(rows, SIMT_TILE) * rt.cdiv(cols, SIMT_TILE)
    cfg = {"group_m": 8, "split_k": 1, "ctas": 1, "busy": 0.8}
    _launch_gemm(kernel, tiles, 256, 0, cfg, a, c, rows, cols, depth, bias, accumulate, gelu, pre,
                 (a.array, b.array), (_common.i32(a.ld), _common.i32(b.ld), np.int32(a.kmajor), np.int32(b.kmajor)),
                 read=read)
    return c


def _launch_mma(a: Operand, b: Operand, c, rows, cols, depth, bias, accumulate, gelu, pre, cfg, aligned: bool,
                read=None):
    defines = {"GEMM_MMA": 1, "floatX": _common.ctype(a.array), "A_KMAJOR": int(a.kmajor), "B_KMAJOR": int(b.kmajor),
               "MMA_BM": cfg["bm"], "MMA_BN": cfg["bn"], "MMA_WARPS_M": cfg["warps_m"], "MMA_WARPS_N": cfg["warps_n"],
               "MMA_STAGES": cfg["stages"], "MMA_CTAS": cfg["ctas"], "ALIGNED": int(aligned)}
    kernel = rt.function("matmul", "gemm_mma", defines)
    tiles = rt.cdiv(rows, cfg["bm"]) * rt.cdiv(cols, cfg["bn"])
    shared = max(cfg["stages"] * (cfg["bm"] + cfg["bn"]) * 128, cfg["bm"] * (cfg["bn"] + 8) * 4)
    _launch_gemm(kernel, tiles, cfg["warps_m"] * cfg["warps_n"] * 32, shared, cfg, a, c, rows, cols, depth, bias,
                 accumulate, gelu, pre, (a.array, b.array), (_common.i32(a.ld), _common.i32(b.ld)), read=read)
    return c


def wgmma_shared_bytes(bn: int, stages: int, bm: int = 128, store_cols: int = 0, store_f32: bool = False,
                       prefetch: bool = False) -> int:
    """gemm_wgmma's dynamic shared memory: 1024 bytes of alignment slack, the ring of stages A (bm x
    64) and B (bn x 64) tiles, a 1 KB tile of ones (the row sums' B), the two consumer warpgroups'
    epilogue buffers (64 rows x WG_EPI_LDS floats each, or the TMA store's image of 64 x store_cols
    16-bit values, float32 with store_f32, where larger), a full and an empty mbarrier per slot, and
    with `prefetch` (WG_STORE_DGELU, WG_STORE_RESIDUAL) each warpgroup's prefetch mbarrier.
    219200 bytes at bm 128, bn 256, 4 stages; 231488 with store_cols 128 (16-bit) or 64 (float32);
    227408 at bm 64, bn 256, 5 stages (the H200's SM
    allows a block 232448)."""
    buffer = max(64 * WG_EPI_LDS * 4, 64 * store_cols * (4 if store_f32 else 2))
    return 1024 + stages * (bm + bn) * 128 + 1024 + 2 * buffer + 16 * stages + (16 if prefetch else 0)


def _tma_ok(a: Operand, b: Operand, depth: int) -> bool:
    """TMA can describe both operands: 16-byte-aligned bases and row strides (K, M multiples of 8)."""
    return depth > 0 and all(_pointer(op.array) % 16 == 0 and (op.ld * op.array.dtype.itemsize) % 16 == 0
                             for op in (a, b))


def _tma_store_kind(c, bias, pre, accumulate: bool, gelu: bool, rows: int, cols: int, slices: int,
                    dtype: str, read: EpilogueRead | None = None) -> str | None:
    """Which TMA-store epilogue of gemm_wgmma can write C, if any: "16bit" (one k slice, C 16-bit like
    the operands, written whole: no accumulate; rows of 16-byte multiples, the bias vector-aligned as
    FLAG_VEC asks; the GELU only after a bias, and pre (16-byte aligned, C's dtype) only with both: the
    flag sets the kernel's epilogue dispatch compiles), "float32" (dW: split-K's float32 slices, or the
    float32 C accumulated by the copy engine's reduce-add, with neither bias nor GELU in the GEMM), or
    None (the staged epilogue). With `read` (dgelu_at or residual: nothing else but residual's bias,
    gemm's check) "16bit" where it is 16-byte aligned too (its tensor map's), and the bias too."""
    if dtype == "float32" or rows == 0 or _pointer(c) % 16:
        return None
    if read is not None:
        aligned = _pointer(read.array) % 16 == 0 and (bias is None or _pointer(bias) % 16 == 0)
        return "16bit" if slices == 1 and cols % 8 == 0 and aligned else None
    if pre is not None and (not gelu or bias is None or _pointer(pre) % 16 or str(pre.dtype) != str(c.dtype)):
        return None
    if slices == 1 and str(c.dtype) == dtype and not accumulate:
        whole = cols % 8 == 0 and (bias is None or _pointer(bias) % 16 == 0) and (bias is not None or not gelu)
        return "16bit" if whole else None
    if pre is not None:
        return None
    if (slices > 1 or str(c.dtype) == "float32") and not gelu and (bias is None or slices > 1) and cols % 4 == 0:
        return "float32"
    return None


def _operand_map(op: Operand, mn_extent: int, depth: int, bmn: int):
    """The tensor map of one operand as it is stored: K-major rows of depth (boxes of 64 k x bmn
    rows), or MN-major rows of mn (boxes of 64 x 64), matching gemm_wgmma's tma_tile."""
    if op.kmajor:
        return _tma.tiled_2d(op.array, mn_extent, depth, op.ld, TILE_K, bmn)
    return _tma.tiled_2d(op.array, depth, mn_extent, op.ld, 64, TILE_K)


def _launch_wgmma(a: Operand, b: Operand, c, rows, cols, depth, bias, accumulate, gelu, pre, rowsum, cfg,
                  read: EpilogueRead | None = None):
    bm, pingpong = cfg.get("bm", 128), bool(cfg.get("pingpong"))
    if pingpong and not cfg.get("persistent"):
        raise ValueError("matmul wgmma: the pingpong schedule needs a persistent grid (one item a block "
                         "leaves one consumer warpgroup idle)")
    if bm not in ((64, 128) if pingpong else (128,)):
        raise ValueError(f"matmul wgmma: tile rows bm={bm}: 128 (cooperative) or 64 / 128 (pingpong)")
    store_cols, buffers = cfg.get("store_cols", 0), cfg.get("store_buffers", 1)
    if store_cols and (store_cols % 32 or cfg["bn"] % store_cols):
        raise ValueError(f"matmul wgmma: store_cols={store_cols} must be whole boxes (32 columns) dividing bn={cfg['bn']}")
    if buffers not in (1, 2):
        raise ValueError(f"matmul wgmma: store_buffers={buffers}: 1 or 2")
    cluster = cfg.get("cluster", 1)
    if cluster not in (1, 2) or (cluster == 2 and (not cfg.get("persistent") or not store_cols)):
        raise ValueError(f"matmul wgmma: cluster={cluster}: 1, or 2 with a persistent grid and the TMA-store "
                         "epilogue (store_cols)")
    xp = _common.xp_of(c)
    tiles = rt.cdiv(rows, bm) * rt.cdiv(cols, cfg["bn"])
    k_split = _k_split(cfg, tiles, depth, gelu or read is not None, xp)
    slices = rt.cdiv(depth, k_split)
    # the TMA-store epilogue where C allows it (a module with that epilogue alone), else the staged one
    store = (_tma_store_kind(c, bias, pre, accumulate, gelu, rows, cols, slices, str(a.array.dtype), read)
             if store_cols else None)
    box_cols = {"16bit": 64, "float32": 32}.get(store)  # a TMA box row: 128 bytes
    if box_cols and (store_cols // buffers) % box_cols:
        raise ValueError(f"matmul wgmma: store_cols={store_cols} in {buffers} buffer(s): {store} C is stored in "
                         f"boxes of {box_cols} columns")
    if store == "float32" and wgmma_shared_bytes(cfg["bn"], cfg["stages"], bm, store_cols, True) > rt.MAX_SHARED_PER_BLOCK:
        store = None  # (a forward's float32 split-K slices at bn 256: no room beside its ring)
    if store == "16bit" and pre is not None and ((pingpong and bm != 64) or (buffers != 1 and not pingpong)):
        store = None  # (pre's TMA-store epilogue takes 64-row shares, and one buffer where its GELU is deferred)
    if store == "16bit" and read is not None and ((pingpong and bm != 64) or buffers != 1 or store_cols != cfg["bn"]):
        store = None  # (the prefetch fills one image with a warpgroup's whole 64-row share: else staged)
    if store is None:  # (the staged epilogue, and alone: clusters need the TMA store, matmul.cu's static_assert)
        store_cols, cluster = 0, 1
    f32 = store == "float32"
    defines = {"GEMM_WGMMA": 1, "floatX": _common.ctype(a.array), "A_KMAJOR": int(a.kmajor),
               "B_KMAJOR": int(b.kmajor), "WG_BM": bm, "WG_BN": cfg["bn"], "WG_STAGES": cfg["stages"],
               "WG_CTAS": cfg["ctas"], "WG_PINGPONG": int(pingpong), "WG_STORE_COLS": store_cols,
               "WG_STORE_F32": int(f32), "WG_STORE_PRE": int(store == "16bit" and pre is not None),
               "WG_STORE_DGELU": int(store == "16bit" and read is not None and read.flag == FLAG_DGELU),
               "WG_STORE_RESIDUAL": int(store == "16bit" and read is not None and read.flag == FLAG_RESIDUAL),
               "WG_STORE_BUFFERS": buffers if store_cols else 1}
    if cluster > 1:
        defines["WG_CLUSTER"] = cluster
    if cfg.get("bias_smem") and store_cols and bias is not None:  # (its copy takes the tile of ones' shared
        defines["WG_BIAS_SMEM"] = 1                                  # memory: only dW has row sums, and no bias)
    kernel = rt.function("matmul", "gemm_wgmma", defines, arch="sm_90a")
    # the row sums: one float32 row per k slice (tile column 0's blocks write them), added to rowsum after
    sums = xp.empty((slices, rows), dtype=np.float32) if rowsum is not None else None
    # (in a cluster each block loads 1 / cluster of B's tile: K-major, boxes of that many rows)
    maps = (_operand_map(a, rows, depth, bm), _operand_map(b, cols, depth, cfg["bn"] // cluster))
    # split-K in order (cfg["serial"]): each k slice adds itself to the float32 C (dW, accumulated) by the
    # copy engine, after the slices before it (a counter per 64-row share of C, _chain_counters'), where C
    # has tiles enough (SERIAL_SLICES_A_WAVE); else the slices go to float32 planes that splitk_finish adds
    serial = (bool(cfg.get("serial")) and slices > 1 and f32 and accumulate and bias is None
              and str(c.dtype) == "float32" and tiles * SERIAL_SLICES_A_WAVE >= _common.num_sms(xp) * cfg["ctas"])
    chain = _chain_counters(xp, rt.cdiv(rows, bm) * (bm // 64) * rt.cdiv(cols, cfg["bn"])) if serial else None
    partial = xp.empty((slices, rows, cols), dtype=np.float32) if slices > 1 and not serial else None
    # tma_c: what the kernel writes (C, or the split-K slices as planes) in boxes of 64 rows x 128 bytes,
    # as the TMA store's image holds them; without that epilogue it is never read: any map fills it
    target = partial if partial is not None else c
    planes = slices if partial is not None else 1
    maps += (_tma.tiled_planes(target, planes, rows, cols, 32 if f32 else 64, 64) if store_cols else maps[0],)
    # tma_pre: pre's, as C's, where the TMA-store epilogue writes it too, or loads it (read); else never read
    pre_read = pre if pre is not None else read.array if read is not None else None
    maps += (_tma.tiled_planes(pre_read, 1, rows, cols, 64, 64) if store_cols and pre_read is not None else maps[2],)
    shared = wgmma_shared_bytes(cfg["bn"], cfg["stages"], bm, store_cols, f32,
                                defines["WG_STORE_DGELU"] == 1 or defines["WG_STORE_RESIDUAL"] == 1)
    items = tiles if cluster == 1 else rt.cdiv(rt.cdiv(rows, bm), cluster) * rt.cdiv(cols, cfg["bn"])  # a k slice's
    _launch_gemm(kernel, items, WG_THREADS, shared, cfg, a, c, rows, cols, depth, bias, accumulate, gelu, pre, maps,
                 (sums if sums is not None else c, chain if chain is not None else c), work_items=True, k_split=k_split,
                 flags=FLAG_ROWSUM if sums is not None else 0, partial=partial, read=read, cluster=cluster,
                 serial=serial)
    if sums is not None:
        _add_rows(sums, rowsum, a.array)
    return c


def _cublaslt_gemm(a: Operand, b: Operand, c, rows, cols, depth, bias, accumulate, gelu=False, pre=None,
                   dgelu_at=None) -> None:
    """Row-major C (rows x cols) is column-major C^T (cols x rows), C^T = op(B) op(A) with cuBLAS's
    m = cols, n = rows, k = depth: a K-major B is stored as column-major (depth x cols), so op = T;
    an MN-major one as (cols x depth), op = N; A the other way round. The bias (over cols) is
    cuBLASLt's BIAS epilogue, added to each row of D = each column index j of C; gelu and pre its
    GELU_AUX epilogue's (pre the aux matrix, laid out as C), dgelu_at its DGELU's (bench/tune's
    probe only: gemm does not offer it, _cublaslt.py says why)."""
    _cublaslt.matmul(c, b.array, _cublaslt.OP_T if b.kmajor else _cublaslt.OP_N,
                     a.array, _cublaslt.OP_N if a.kmajor else _cublaslt.OP_T,
                     cols, rows, depth, b.ld, a.ld, cols, bias=bias, beta=1.0 if accumulate else 0.0,
                     gelu=gelu, dgelu=dgelu_at is not None, aux=pre if pre is not None else dgelu_at)


@dataclass
class Saved:
    x: object        # (N,K)
    weight: object   # (M,K)
    bias: object     # (M) or None: its shape and dtype check the bias gradient's buffer


def check_operands(x, weight, bias, op: str = "matmul") -> str:
    """x (N,K), weight (M,K) and bias (M) or None: one float dtype, contiguous, shapes that agree;
    returns the dtype. `op`: the op the errors name (matmul_gelu checks through this too)."""
    dt = _common.check_float(op, "x", x)
    for name, arr in (("weight", weight), ("bias", bias)):
        if arr is not None and str(arr.dtype) != dt:
            raise TypeError(f"{op}: '{name}' must have x's dtype {dt}, got {arr.dtype}")
    _common.check_contiguous(op, x=x, weight=weight, bias=bias)
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"{op}: x (N,K) and weight (M,K) must share K, got {tuple(x.shape)} and {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{op}: bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}")
    return dt


class Matmul:
    """One registered variant: matmul's forward and backward on one GEMM engine."""

    def __init__(self, engine: str):
        self.engine = engine

    def forward(self, inputs, attrs, out=None):
        x, weight, bias = inputs["x"], inputs["weight"], inputs.get("bias")
        check_operands(x, weight, bias)
        N, K = x.shape
        M = weight.shape[0]
        y = _common.output("matmul", _common.xp_of(x), out, (N, M), str(x.dtype))      # (N,M)
        gemm(self.engine, Operand(x, K, True), Operand(weight, K, True), y, N, M, K, bias=bias,
             weight_shape=(M, K))
        return y, Saved(x, weight, bias)

    def forward_residual(self, x, weight, bias, residual, out=None):
        """out = residual + (x @ W.T + bias) in one GEMM, the residual stream (N, M) read by the epilogue
        (matmul_residual's forward, mlp's projection): bitwise matmul then residual. Returns (out, Saved),
        the Saved matmul's backward takes."""
        check_operands(x, weight, bias)
        N, K = x.shape
        M = weight.shape[0]
        if str(residual.dtype) != str(x.dtype) or tuple(residual.shape) != (N, M):
            raise ValueError(f"matmul: residual must be {x.dtype} of shape {(N, M)}, got {residual.dtype} "
                             f"{tuple(residual.shape)}")
        _common.check_contiguous("matmul", residual=residual)
        y = _common.output("matmul", _common.xp_of(x), out, (N, M), str(x.dtype))      # (N,M)
        gemm(self.engine, Operand(x, K, True), Operand(weight, K, True), y, N, M, K, bias=bias,
             residual=residual, product="forward_residual", weight_shape=(M, K))
        return y, Saved(x, weight, bias)

    def forward_gelu(self, x, weight, bias=None, out=None, pre=None):
        """out = gelu(x @ W.T + bias) in one GEMM; pre (when given) = x @ W.T + bias, for the backward
        (cublaslt: cuBLASLt's GELU_AUX_BIAS epilogue, the reference for tiled's and wgmma's)."""
        check_operands(x, weight, bias)
        N, K = x.shape
        M = weight.shape[0]
        xp = _common.xp_of(x)
        y = _common.output("matmul", xp, out, (N, M), str(x.dtype))
        if pre is not None:
            _common.output("matmul", xp, pre, (N, M), str(x.dtype), name="pre")
        gemm(self.engine, Operand(x, K, True), Operand(weight, K, True), y, N, M, K, bias=bias, gelu=True,
             pre=pre, weight_shape=(M, K), product="forward" if pre is None else "forward_pre")
        return y

    def backward(self, saved, dout, grads, dgelu_at=None):
        """dx = dout @ W, dW += dout.T @ x, db += sum_n dout. With `dgelu_at` (x's shape and dtype: the
        GELU's input where x is its output, as in GPT-2's MLP projection), dx = (dout @ W) *
        gelu'(dgelu_at) instead: the GELU's backward in the dx GEMM's epilogue (mlp.py)."""
        x, weight = saved.x, saved.weight
        N, K = x.shape
        M = weight.shape[0]
        if str(dout.dtype) != str(x.dtype) or tuple(dout.shape) != (N, M):
            raise ValueError(f"matmul: dout must be {x.dtype} of shape {(N, M)}, got {dout.dtype} {tuple(dout.shape)}")
        _common.check_contiguous("matmul", dout=dout)
        xp = _common.xp_of(x)
        dx = _common.grad_buffer("matmul", grads, "x", x, xp)                               # (N,K)
        dw, db = grads["weight"], grads["bias"] if saved.bias is not None else None
        _common.check_param_grad("matmul", "weight", dw, weight)
        if db is not None:
            _common.check_param_grad("matmul", "bias", db, saved.bias)
        if dgelu_at is not None:
            _common.check_contiguous("matmul", dgelu_at=dgelu_at)
        gemm(self.engine, Operand(dout, M, True), Operand(weight, K, False), dx, N, K, M,   # dx = dy @ W
             product="dx" if dgelu_at is None else "dx_dgelu", weight_shape=(M, K), dgelu_at=dgelu_at)
        gemm(self.engine, Operand(dout, M, False), Operand(x, K, False), dw, M, K, N,      # dW += dy.T @ x
             accumulate=True, rowsum=db, product="dW", weight_shape=(M, K))                # db += sum_n dy
        result = {"x": dx, "weight": dw}
        if db is not None:
            result["bias"] = db
        return result


tiled = Matmul("mma")
wgmma = Matmul("wgmma")
cublaslt = Matmul("cublaslt")


def cublaslt_unavailable() -> str | None:
    """None when libcublasLt can be found here, else why not (the cublaslt variant's probe)."""
    try:
        _cublaslt.library_path()
    except OSError as e:
        return str(e)
    return None
