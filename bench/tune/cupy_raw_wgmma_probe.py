"""Where gemm_wgmma's time per output tile goes: variants of it at three GPT-2 products, beside cuBLASLt.

    python3 bench/tune/cupy_raw_wgmma_probe.py --out $OUT/probe.json     # the H200, ~3 min
    python3 bench/tune/cupy_raw_wgmma_probe.py --out $OUT/probe.json --variants tree,pingpong
    python3 bench/tune/cupy_raw_wgmma_probe.py --dry                     # the CPU: plan, compile, emulate

Products (bf16, N = 16384), chosen so that the depth K per tile varies while the kernel does not:
    fc_fwd        y (N, 3072) = x (N, 768) W^T + b      K = 768    (1536 tiles of 128 x 256)
    fc_proj_fwd   y (N, 768) = x (N, 3072) W^T + b      K = 3072   (384 tiles)
    lm_head_dx    dx (N, 768) = dy (N, 50304) W         K = 50304  (384 tiles)
then the rest of the depth-768 products, where the epilogue weighs most: qkv_fwd, attn_proj_fwd,
lm_head_fwd (forward, K = 768), attn_proj_dx and fc_proj_dx (dx, depth M = 768); and the dW
products fc_proj_dW, lm_head_dW (0.82x / 0.81x cuBLASLt at gemm-253b27c) and attn_proj_dW;
and, for the variants of DW_VARIANTS only (the others probe the forward's epilogue), the weight
gradients, float32 as mixed precision keeps them, with db's fused row sums:
    qkv_dW        dW (2304, 768) += dy^T x, db += sum dy     depth N = 16384 (split-K)
    fc_dW         dW (3072, 768) += dy^T x, db += sum dy
and matmul_gelu's forward at c_fc (fc_fwd_pre: pre and gelu(pre), the tree's pingpong schedule against
`cooperative` and `pre128`; its ratio is against cuBLASLt's plain forward, what the fused GELU costs); and mlp's
projection dx with the GELU's backward at fc_proj (fc_proj_dx_dgelu: dx (N, 3072) * gelu'(pre), pre
prefetched into the store image; the tree, `cooperative`, the staged epilogue `store_off` and
`dgelu_tanh`; its ratio is against cuBLASLt's plain dx, what the fused GELU backward costs); and the
projections with the residual add in the epilogue (attn_proj_fwd_residual, fc_proj_fwd_residual:
y = r + x W^T + b, the stream r prefetched into the store image; the tree, `pingpong_store`, `bn128`,
`bias_smem` and the staged `store_off`; their ratio is against cuBLASLt's plain forward, what the add costs).
Measured at b51b176 (reports/cupy_raw-h200/bench-b51b176/matmul_bench.txt): ~150 TFLOP/s at K = 768,
~270 at 3072, 674 at 50304, i.e. ~12 ns per unit of K per tile but ~35-60 us more per tile.

Variants (all through matmul.gemm, the launcher the product uses):
    tree            the kernel as committed, its default launch configuration
    runtime_flags   every tile through the epilogue's default case: the same shared-memory staging,
                    then element by element with the flags read at run time (the unaligned/ragged
                    path; against 7ce4f9f's register epilogue this edit rebuilt b51b176's ~300 KB
                    runtime-flag one, the instruction-cache finding, whose numbers stay in
                    reports/cupy_raw-h200/ under 7ce4f9f); built by switching
                    the tree's per-flag-set dispatch to its FLAGS_RUNTIME default (a source edit made
                    here, not a switch in matmul.cu)
    no_store        (runtime_flags and no_store: on the staged epilogue, store_cols 0, whose dispatch
                    they edit) the tree with the tile's epilogue skipped (the shared-memory staging and the
                    stores): the accumulators are summed and stored
                    only if the sum is a magic value, so the multiplies stay; output NOT checked
                    (nothing is written, by design: the poison must survive instead)
    no_bias         forward without the bias (flags VEC only; checked against the bias-free product)
    store_off       the staged epilogue (the threads' own stores; store_cols 0), as before the TMA
                    stores: the tree's 4-deep ring (at dW too: its float32 slices and accumulation)
    store256_s3     the TMA store of the whole 64 x 256 share in one pass (64 KB of images), a
                    3-deep ring to make room
    store64         the TMA store in four passes of 64 columns (8 KB images, the staged epilogue's
                    shared memory)
    dw256           dW in 128 x 256 tiles (two m64n256 consumers, as forward and dx) instead of 128 x
                    128: fewer operand bytes per result, half the tiles (more k slices where few); its
                    float32 stores in four passes of 64 columns (what fits beside the 192 KB ring)
    stages3         WG_STAGES 3 instead of 4 (config=)
    one_block       one block per tile instead of a persistent grid of one per SM (config=)
    group_m16       16 tile rows walked together instead of 8 (config=)
    pingpong        the pingpong schedule (matmul.cu): each consumer warpgroup its own 64 x 256 tile
                    (dW: 64 x 128), turns at the tensor cores, so one's epilogue overlaps the
                    other's multiplies; matmul.PINGPONG_CONFIGS (one more ring stage)
    pingpong_128x128  the same with 128 x 128 tiles per warpgroup (two m64n128 per k step, 6 stages):
                    fewer operand bytes per result than 64 x 256; forward and dx only (at dW's
                    MN-major operands and row sums ptxas spills 44 bytes there)
    store_double    the TMA store's image as two buffers of half the columns, filled in turn, so that a
                    pass waits only for the pass before the last to have been read (store_buffers 2;
                    forward / dx: two 64-column buffers, dW: two of 32 float32 columns; fc_fwd_pre,
                    pingpong: two of 128 columns, pre into one while gelu(pre) of the pass before is
                    read from the other, where one buffer waits for pre's read before gelu(pre); 0 spills
                    since gelu(pre)'s fill reads pre from the accumulators, 76 bytes before)
    store256_double the same at store_cols 256 with a 3-deep ring: two 128-column buffers
    cluster2        blocks in clusters of two taking tiles one above the other, which share their B
                    tile: each block loads half of it and TMA multicasts it into both (WG_CLUSTER 2);
                    a third less operand traffic from L2 a tile; forward and dx
    cluster2_no_multicast  the same clusters, each block loading the whole B tile itself: the blocks
                    still wait for each other's consumers at every slot (what the multicast costs,
                    against what the coupling costs; a source edit)
                    At fc_fwd_pre and fc_proj_dx_dgelu, cluster2 is their pingpong tree in clusters:
                    a block's L2 reads a k step 24 KB instead of 40 at 64 x 256 tiles
    bn128           128 x 128 tiles (two m64n128 consumers) with a 6-deep ring, the whole tile in one TMA
                    store pass: twice the tiles, 2/3 of the operand bytes per result (for attn_proj's
                    768 columns: 6 tile columns, 5.8 waves of 132 at 16384 rows against 2.9)
    bn128_s4        the same with a 4-deep ring
    bias_smem       the TMA-store epilogue's bias from a copy in shared memory (WG_BIAS_SMEM: one load a
                    thread before the main loop) instead of a global load per 8-column group
    bias_smem_cluster2  bias_smem in clusters of two (cluster2's TMA multicast)
    bias_smem_double    bias_smem with the two-buffer TMA store (store_double)
    forward_config  the forward's configuration (CONFIGS'): the bias by global loads, one store image;
                    where a shape takes another (SHAPE_CONFIGS: attn_proj's bias_smem_double) the tree's before it
    bias_l1         the tile's bias lines prefetched into L1 before the main loop (prefetch.global.L1 by
                    five threads of each consumer warpgroup, a source edit), so that the epilogue's global
                    loads of it hit L1 instead of waiting on L2 (their long_sb stalls, ../../reports/train-h100/12814eb)
    pingpong_store  pingpong (64 x 256 a warpgroup) with the TMA store of its whole tile in one pass
                    and a 4-deep ring: the plain product in the GELU products' configuration
    pingpong_cluster2  the same in clusters of two (a third of pingpong's operand traffic saved):
                    does the traffic explain pingpong's loss at the plain products?
    cooperative     (fc_fwd_pre and fc_proj_dx_dgelu only; their tree is the pingpong schedule, each
                    warpgroup's 64 x 256 tile, its share in one image, 4-deep ring, the GELU in the
                    epilogue while the other warpgroup multiplies) the cooperative schedule's 128 x 256
                    tile, the share in one image, a 3-deep ring; at fc_fwd_pre the GELU deferred to the
                    next tile's main loop (DeferredGelu): the configuration until 9a4640e
    pre128          (fc_fwd_pre only) cooperative, pre and gelu(pre) in two passes of 128 columns beside
                    a 4-deep ring, the first pass's GELU in the epilogue, the second's deferred
    gelu_tanh       (fc_fwd_pre only) the GELU from one MUFU.TANH (0.5 x (1 + tanh u)) instead of an exp2
                    and a reciprocal, as dgelu_tanh does gelu' (a source edit): the epilogue's SFU share
    dgelu_tanh      (fc_proj_dx_dgelu only) gelu' from one MUFU.TANH (tanh.approx.f32: sigmoid(2u) =
                    (1 + tanh u) / 2) instead of an exp2 and a reciprocal: does the epilogue's SFU work
                    show? (a source edit; the kernel's arithmetic is then no longer gelu.cu's)
    planes          (dW only) split-K's float32 slices as planes that splitk_finish then adds to dW (the
                    time includes the finish), instead of the tree's in-order reduce-add of each slice
                    into dW after the slice before it (FLAG_SERIAL; where C has tiles enough)
    cublaslt        the cublaslt variant's call, the reference the ratios divide by
    cublaslt_fused  (fc_fwd_pre and fc_proj_dx_dgelu only) cuBLASLt with the fused epilogue itself:
                    GELU_AUX_BIAS (pre and gelu(pre)) and DGELU (times gelu'(pre); _cublaslt.py says
                    why the product does not offer it), what llm.c calls;
                    its ratio to cublaslt is what cuBLASLt's own fusion costs, the fair reference
                    for the tree's fused kernels
    read_inline     (fc_proj_dx_dgelu and the residual products only) the epilogue's reads of pre or the
                    residual from the image where each is used, behind the store before it (a source
                    edit: READ_AHEAD 0), as before the tree read them two groups ahead
    prefetch_first  (the residual products only) the cooperative schedule's prefetch issued at the first
                    k-block, as before the tree moved it to the middle one (a source edit)

Every variant is first run on inputs whose output is poisoned with NaN (dW, which accumulates: from
zeros) and checked against a float64 reference of the same rounded inputs (the conformance bf16
bound, as the sweeps hold it); only then timed with euler_core.measure.timing (batches behind a spin
kernel, CUDA events, two input sets). The variants of ISOLATED (a new schedule, never run on a GPU
before it was added) run in a child process of this script under --child-timeout seconds: a kernel
that hangs is killed with its process, recorded as an error, and the probe goes on (that variant
is not tried again at the later products).
With --sustained S, each checked variant is also run for S seconds back to back (a CUDA graph of
SUSTAINED_CALLS calls, replayed), nvidia-smi sampling the SM clock and the power every 100 ms: the
card holds its 700 W cap by lowering the clock under sustained tensor-core work, so a kernel's rate at
the cap (and its TFLOP per joule) is what a training step gets, which the short timed batches above
do not show (reports/train-h200/, da47edb: GEMM benches at 1,500-1,900 MHz, reason "SW power cap").
The modules of the source-edited variants are compiled first in parallel processes (CuPy's disk
cache), so that compiling does not eat the time budget. Records go to --out as JSON after each
measurement; a table is printed. Each record's us_per_tile_wave is p50 / ceil(tiles / SMs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.cupy_raw import _common, _source  # noqa: E402
from backends.cupy_raw import _runtime as rt  # noqa: E402
from backends.cupy_raw import matmul as mm  # noqa: E402
from euler_core.measure.timing import CudaTimer, TimingConfig, measure  # noqa: E402

ROWS = 16384
SUSTAIN_S = 0.0   # --sustained
#: name -> (product, K (x's width), M (W's rows), bias)
PRODUCTS = {"fc_fwd": ("forward", 768, 3072, True), "fc_proj_fwd": ("forward", 3072, 768, True),
            "lm_head_dx": ("dx", 768, 50304, False), "qkv_dW": ("dW", 768, 2304, True),
            "fc_dW": ("dW", 768, 3072, True),
            # the other products of depth 768, which the TMA-store epilogue is for
            "qkv_fwd": ("forward", 768, 2304, True), "attn_proj_fwd": ("forward", 768, 768, True),
            "lm_head_fwd": ("forward", 768, 50304, True), "attn_proj_dx": ("dx", 768, 768, False),
            "fc_proj_dx": ("dx", 3072, 768, False),
            # the two dW products short of 0.9x cuBLASLt at gemm-253b27c, and attn_proj's
            "fc_proj_dW": ("dW", 3072, 768, True), "lm_head_dW": ("dW", 768, 50304, False),
            "attn_proj_dW": ("dW", 768, 768, True),
            # matmul_gelu's forward at c_fc: pre and gelu(pre) (its ratio: against cuBLASLt's plain forward)
            "fc_fwd_pre": ("forward_pre", 768, 3072, True),
            # mlp's projection dx times gelu'(pre), pre (N, 3072) prefetched into the store image (the
            # product's x stands in for pre; its ratio: against cuBLASLt's plain dx)
            "fc_proj_dx_dgelu": ("dx_dgelu", 3072, 768, False),
            # the projections with the residual add in the epilogue (matmul_residual's, mlp's projection:
            # the stream (N, 768) prefetched into the store image; the product's dy stands in for it;
            # the ratio: against cuBLASLt's plain forward)
            "attn_proj_fwd_residual": ("forward_residual", 768, 768, True),
            "fc_proj_fwd_residual": ("forward_residual", 3072, 768, True)}

_DISPATCH = "switch (flags & ~FLAG_ROWSUM) {"
#: variant -> source edits of matmul.cu's gemm_wgmma ((old, new), old found exactly once)
EDITS = {
    "runtime_flags": [(_DISPATCH, "switch (FLAGS_RUNTIME) {")],
    # gelu'(pre) from one MUFU.TANH instead of exp2 and a reciprocal (s = sigmoid(2u) = (1 + tanh u) / 2)
    "dgelu_tanh": [("    const float s = __fdividef(1.0f, 1.0f + exp2f(x * (GELU_A + GELU_B * x2)));",
                    "    float tanh_u;\n"
                    "    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(tanh_u)\n"
                    "        : \"f\"(x * (0.7978845608f + 0.0356774081f * x2)));\n"
                    "    const float s = 0.5f + 0.5f * tanh_u;")],
    "gelu_tanh": [("    return __fdividef(x, 1.0f + exp2f(x * (GELU_A + GELU_B * x * x)));",
                   "    float tanh_u;\n"
                   "    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(tanh_u) : \"f\"(x * (0.7978845608f + 0.0356774081f * x * x)));\n"
                   "    return 0.5f * x * (1.0f + tanh_u);")],
    # the tile's bias lines into L1 before the main loop (five threads of each consumer warpgroup), for the
    # epilogue's bias loads
    "bias_l1": [("        if (with_sums)\n            consume_item<true>(",
                 "#ifndef CUPY_RAW_EMULATOR\n"
                 "        if ((flags & FLAG_BIAS) && t <= WG_BN * (int)sizeof(floatX) / 128) {\n"
                 "            const int j_line = min(w.tn * WG_BN + t * (128 / (int)sizeof(floatX)), min(cols, (w.tn + 1) * WG_BN) - 1);\n"
                 "            asm volatile(\"prefetch.global.L1 [%0];\" ::\"l\"(bias + j_line));\n"
                 "        }\n"
                 "#endif\n"
                 "        if (with_sums)\n            consume_item<true>(")],
    # clusters of two without the multicast: each block loads the whole B tile itself (two boxes of the
    # cluster's map), the slots' empty barriers still counting both blocks' consumers
    "cluster_no_multicast": [
        ("        tma_load_2d_multicast(dst + rank * SHARE * TILE_ROW_BYTES, map, k0, mn0 + rank * SHARE, bar, EVERY_BLOCK);",
         "        for (int r = 0; r < WG_CLUSTER; ++r) tma_load_2d(dst + r * SHARE * TILE_ROW_BYTES, map, k0, mn0 + r * SHARE, bar);"),
        ("        for (int p = rank * SHARE / 64; p < (rank + 1) * SHARE / 64; ++p)\n"
         "            tma_load_2d_multicast(dst + p * PANEL_BYTES, map, mn0 + 64 * p, k0, bar, EVERY_BLOCK);",
         "        for (int p = 0; p < BMN / 64; ++p)\n            tma_load_2d(dst + p * PANEL_BYTES, map, mn0 + 64 * p, k0, bar);")],
    # the epilogue's reads of the image's input (pre, the residual) where each is used, behind the store
    # before it, as before the read-ahead (a ring of none)
    "read_inline": [("        constexpr int READ_AHEAD = 2;", "        constexpr int READ_AHEAD = 0;")],
    # the cooperative schedule's prefetch from the first k-block, as before it moved to the middle one
    "prefetch_first": [("        if (kb == (WG_PINGPONG ? 0 : nk / 2)) prefetch_pre(", "        if (kb == 0) prefetch_pre(")],
    "no_store": [(_DISPATCH, "float probe_sum = 0.0f;\n#pragma unroll\n"
                             "            for (int q = 0; q < WG_BN / 2; ++q) probe_sum += acc[h][q];\n"
                             "        if (probe_sum == 1234.5678f) switch (FLAGS_RUNTIME) {")],
}
#: variant -> (launch configuration change, source edit, bias override); a change with "pingpong"
#: starts from matmul.PINGPONG_CONFIGS instead of the product's configuration
VARIANTS = {
    "tree": ({}, None, None),
    "runtime_flags": ({"store_cols": 0}, "runtime_flags", None),   # edits of the staged epilogue's module
    "no_store": ({"store_cols": 0}, "no_store", None),
    "no_bias": ({}, None, False),
    "store_off": ({"store_cols": 0}, None, None),
    "store256_s3": ({"store_cols": 256, "stages": 3}, None, None),
    "store64": ({"store_cols": 64}, None, None),
    "dw256": ({"bn": 256, "store_cols": 64}, None, None),
    "stages3": ({"stages": 3}, None, None),
    "one_block": ({"persistent": False}, None, None),
    "group_m16": ({"group_m": 16}, None, None),
    "pingpong": ({"pingpong": True}, None, None),
    "pingpong_128x128": ({"pingpong": True, "bm": 128, "bn": 128, "stages": 6}, None, None),
    "store_double": ({"store_buffers": 2}, None, None),
    "store256_double": ({"store_cols": 256, "stages": 3, "store_buffers": 2}, None, None),
    "cluster2": ({"cluster": 2}, None, None),
    "cluster2_no_multicast": ({"cluster": 2}, "cluster_no_multicast", None),
    "pingpong_store": ({"pingpong": True, "store_cols": 256, "stages": 4}, None, None),
    "bn128": ({"bn": 128, "store_cols": 128, "stages": 6}, None, None),
    "bn128_s4": ({"bn": 128, "store_cols": 128, "stages": 4}, None, None),
    "pingpong_cluster2": ({"pingpong": True, "store_cols": 256, "stages": 4, "cluster": 2}, None, None),
    "cooperative": ({"pingpong": False, "bm": 128, "stages": 3}, None, None),
    "pre128": ({"pingpong": False, "bm": 128, "store_cols": 128, "stages": 4}, None, None),
    "dgelu_tanh": ({}, "dgelu_tanh", None),
    "gelu_tanh": ({}, "gelu_tanh", None),
    "bias_smem": ({"bias_smem": True}, None, None),
    "bias_smem_cluster2": ({"bias_smem": True, "cluster": 2}, None, None),
    "bias_smem_double": ({"bias_smem": True, "store_buffers": 2}, None, None),
    "bias_l1": ({}, "bias_l1", None),
    "forward_config": ({"bias_smem": False, "store_buffers": 1}, None, None),
    "cublaslt_fused": ({}, None, None),
    "planes": ({"serial": False}, None, None),
    "read_inline": ({}, "read_inline", None),
    "prefetch_first": ({}, "prefetch_first", None),
}
#: the variants also run at the dW products
DW_VARIANTS = ("tree", "pingpong", "dw256", "store_off", "store_double", "planes")
#: the variants run at the products with a GELU epilogue, by direction: matmul_gelu's forward, mlp's
#: dx with gelu'(pre) (store_off: the staged epilogue's)
EPILOGUE_VARIANTS = {"forward_pre": ("tree", "cooperative", "pre128", "stages3", "cluster2", "gelu_tanh",
                                     "bias_smem", "bias_l1", "store_double", "cublaslt_fused"),
                     "dx_dgelu": ("tree", "cooperative", "store_off", "dgelu_tanh", "stages3", "cluster2",
                                  "cublaslt_fused", "read_inline"),
                     "forward_residual": ("tree", "pingpong_store", "bn128", "bias_smem", "store_off", "read_inline",
                                          "prefetch_first")}
#: the variants run there only
EPILOGUE_ONLY = ("cooperative", "pre128", "dgelu_tanh", "gelu_tanh", "cublaslt_fused", "read_inline", "prefetch_first")
#: the variants run in a child process under a time limit (a hang costs that variant only)
ISOLATED = ("pingpong", "pingpong_128x128", "store_double", "store256_double", "cluster2", "cluster2_no_multicast",
            "pingpong_store", "pingpong_cluster2", "bias_smem_cluster2", "bias_smem_double")


def edited_source(edit: str | None, name: str, defines: dict | None) -> str:
    src = _ORIGINAL_SOURCE(name, defines)
    if edit is None or name != "matmul" or not (defines or {}).get("GEMM_WGMMA"):
        return src
    for old, new in EDITS[edit]:
        if src.count(old) != 1:
            raise RuntimeError(f"probe edit {edit!r}: {old!r} occurs {src.count(old)} times in matmul.cu, not once")
        src = src.replace(old, new)
    return src


_ORIGINAL_SOURCE = _source.source
_CACHES: dict = {}


@contextlib.contextmanager
def source_edit(edit: str | None):
    """matmul.cu's gemm_wgmma modules built from the edited source while inside; the runtime's
    module caches swapped per edit, so that kernels of different sources never mix."""
    def patched(name, defines=None):
        return edited_source(edit, name, defines)
    saved = (rt._MODULES.copy(), rt._FUNCTIONS.copy())
    mine = _CACHES.setdefault(edit, ({}, {}))
    rt._MODULES.clear(), rt._FUNCTIONS.clear()
    rt._MODULES.update(mine[0]), rt._FUNCTIONS.update(mine[1])
    _source.source = rt.source = patched
    try:
        yield
    finally:
        _source.source = rt.source = _ORIGINAL_SOURCE
        mine[0].update(rt._MODULES), mine[1].update(rt._FUNCTIONS)
        rt._MODULES.clear(), rt._FUNCTIONS.clear()
        rt._MODULES.update(saved[0]), rt._FUNCTIONS.update(saved[1])


def _config(product: str, M: int, K: int, change: dict) -> dict:
    pingpong_of = {"forward_residual": "forward"}.get(product, product)  # (the residual's: the forward's tiles)
    cfg = dict(mm.PINGPONG_CONFIGS[pingpong_of]) if change.get("pingpong") else mm._config("wgmma", product, (M, K), None)
    if "store_cols" in change and "store_buffers" not in change:
        cfg["store_buffers"] = 1  # (a shape's two-buffer image, SHAPE_CONFIGS', may not split the variant's passes)
    cfg.update(change)
    return cfg


def _runs_at(variant: str, pname: str) -> bool:
    direction = PRODUCTS[pname][0]
    if direction in EPILOGUE_VARIANTS:
        return variant in EPILOGUE_VARIANTS[direction] + ("cublaslt",)
    if variant in EPILOGUE_ONLY:
        return False
    return direction != "dW" or variant in DW_VARIANTS + ("cublaslt",)


def _output_shape(product: str, rows: int, K: int, M: int) -> tuple:
    return {"forward": (rows, M), "forward_pre": (rows, M), "forward_residual": (rows, M), "dx": (rows, K),
            "dx_dgelu": (rows, K), "dW": (M, K)}[product]


def _call(engine, cfg, product, x, w, b, dy, out, rows, K, M):
    """The product on `engine`; dW accumulates into out (M, K) and, given b (M), db into b; forward_pre
    also writes pre, dx_dgelu multiplies by gelu'(x), forward_residual adds the forward to dy (engine
    "cublaslt": the plain forward, the plain dx, the ratios' denominators; "cublaslt_fused": cuBLASLt's
    own GELU epilogues)."""
    fused = engine != "cublaslt"
    engine = "cublaslt" if engine == "cublaslt_fused" else engine
    if product == "forward_pre" and fused:
        mm.gemm(engine, mm.Operand(x, K, True), mm.Operand(w, K, True), out[0], rows, M, K, bias=b, gelu=True,
                pre=out[1], product="forward_pre", weight_shape=(M, K), config=cfg)
    elif product == "forward_residual" and fused:
        mm.gemm(engine, mm.Operand(x, K, True), mm.Operand(w, K, True), out, rows, M, K, bias=b, residual=dy,
                product="forward_residual", weight_shape=(M, K), config=cfg)
    elif product in ("forward", "forward_pre", "forward_residual"):
        out = out[0] if product == "forward_pre" else out
        mm.gemm(engine, mm.Operand(x, K, True), mm.Operand(w, K, True), out, rows, M, K, bias=b,
                product="forward", weight_shape=(M, K), config=cfg)
    elif product == "dx_dgelu" and engine == "cublaslt" and fused:  # (DGELU: matmul.gemm does not offer it)
        mm._cublaslt_gemm(mm.Operand(dy, M, True), mm.Operand(w, K, False), out, rows, K, M, None, False, dgelu_at=x)
    elif product in ("dx", "dx_dgelu"):
        dgelu = product == "dx_dgelu" and fused
        mm.gemm(engine, mm.Operand(dy, M, True), mm.Operand(w, K, False), out, rows, K, M,
                product="dx_dgelu" if dgelu else "dx", weight_shape=(M, K), config=cfg, dgelu_at=x if dgelu else None)
    else:
        mm.gemm(engine, mm.Operand(dy, M, False), mm.Operand(x, K, False), out, M, K, rows, accumulate=True,
                rowsum=b, product="dW", weight_shape=(M, K), config=cfg)


def plan(rows: int = 256) -> list[tuple[str, str, dict]]:
    """(variant, product name, defines of each gemm_wgmma launch), recorded with NumPy stand-ins."""
    out = []
    bf16 = _common.np_dtype("bfloat16")
    for variant, (change, edit, bias_override) in VARIANTS.items():
        for pname, (product, K, M, with_bias) in PRODUCTS.items():
            if variant == "cublaslt_fused" or not _runs_at(variant, pname):  # (cuBLASLt's: no module of ours)
                continue
            x, w, dy = np.zeros((rows, K), bf16), np.zeros((M, K), bf16), np.zeros((rows, M), bf16)
            gdt = np.float32 if product == "dW" else bf16   # dW, db: mixed precision's float32
            b = np.zeros(M, gdt) if (with_bias if bias_override is None else bias_override) else None
            c = np.zeros(_output_shape(product, rows, K, M), gdt)
            if product == "forward_pre":
                c = (c, np.zeros_like(c))
            with rt.recording() as rec, source_edit(edit):
                _call("wgmma", _config(product, M, K, change), product, x, w, b, dy, c, rows, K, M)
            for launch in rec:
                if launch.kernel == "gemm_wgmma":
                    out.append((variant, pname, dict(launch.defines)))
    return out


def _modules(variants=tuple(VARIANTS)) -> list[tuple[str | None, dict]]:
    """(source edit, defines) of each distinct module the variants launch."""
    seen = {}
    for variant, _, defines in plan():
        if variant not in variants:
            continue
        edit = VARIANTS[variant][1]
        seen[(edit, tuple(sorted(defines.items())))] = (edit, defines)
    return list(seen.values())


def _module_name(d: dict) -> str:
    return (f"{'pingpong' if d['WG_PINGPONG'] else 'cooperative':11s} A_KMAJOR={d['A_KMAJOR']} "
            f"B_KMAJOR={d['B_KMAJOR']} {d['WG_BM']}x{d['WG_BN']} stages={d['WG_STAGES']} store_cols={d['WG_STORE_COLS']}"
            f"{' float32' if d['WG_STORE_F32'] else ''}{' pre' if d['WG_STORE_PRE'] else ''}"
            f"{' dgelu' if d.get('WG_STORE_DGELU') else ''}{' residual' if d.get('WG_STORE_RESIDUAL') else ''}")


def _compile_on_gpu(job) -> str:
    """(worker) compile one module into CuPy's disk cache."""
    edit, defines = job
    t = time.perf_counter()
    with source_edit(edit):
        rt.function("matmul", "gemm_wgmma", defines, arch="sm_90a")
    return f"{edit or 'tree':14s} {_module_name(defines)}: {time.perf_counter() - t:.1f} s"


def _nvcc(job) -> str:
    """(worker, --dry) nvcc for sm_90a with ptxas's registers and spills."""
    edit, defines = job
    src = edited_source(edit, "matmul", defines)
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "matmul.cu"
        cu.write_text(src)
        proc = subprocess.run([rt.nvcc_path(), "-arch=sm_90a", "-cubin", "-std=c++17", "-lineinfo", "-ftz=true",
                               "-Xptxas", "-v", "-o", str(Path(tmp) / "m.cubin"), str(cu)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{edit} {defines}: nvcc failed\n{proc.stderr[-3000:]}")
    res = rt._parse_ptxas(proc.stderr + proc.stdout)["gemm_wgmma"]
    serial = " wgmma SERIALIZED" if res.wgmma_serialized else ""
    return f"{edit or 'tree':14s} {_module_name(defines)}: {res.registers} registers, {res.spill_bytes} bytes spilled{serial}"


def _emulate() -> int:
    """--dry: each variant on the CPU emulator at a small shape (the probe's own plumbing and checks),
    two "SMs", so that the persistent blocks walk several work items (pingpong's turns)."""
    bad = 0
    rng = np.random.default_rng(1)
    bf16 = _common.np_dtype("bfloat16")
    rows, K, M = 192, 128, 320   # two tile rows (one ragged), two tile columns (one ragged)
    x = rng.standard_normal((rows, K)).astype(bf16)
    w = (rng.standard_normal((M, K)) * K ** -0.5).astype(bf16)
    b = rng.standard_normal(M).astype(bf16)
    dy = rng.standard_normal((rows, M)).astype(bf16)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    real_sms, _common.num_sms = _common.num_sms, lambda xp: 2
    try:
        for variant in ("tree", "runtime_flags", "no_store", "no_bias", "store_off", "store256_s3", "store64",
                        "pingpong", "pingpong_128x128", "store_double", "store256_double", "cluster2",
                        "pingpong_store", "pingpong_cluster2", "bn128", "bias_smem", "bias_smem_cluster2",
                        "bias_smem_double"):
            change, edit, bias_override = VARIANTS[variant]
            with_bias = True if bias_override is None else bias_override
            out = np.full((rows, M), np.nan, dtype=bf16)
            with rt.emulation(), source_edit(edit):
                _call("wgmma", _config("forward", M, K, change), "forward", x, w, b if with_bias else None, None,
                      out, rows, K, M)
            ok, err = _verdict(np, variant, out, ref + (b.astype(np.float64) if with_bias else 0.0))
            print(f"emulated {variant:16s} forward {'ok' if ok else 'FAIL'} ({err})")
            bad += not ok
        for variant in DW_VARIANTS:
            change, edit, _ = VARIANTS[variant]
            dw, db = np.zeros((M, K), np.float32), np.zeros(M, np.float32)
            with rt.emulation(), source_edit(edit):
                _call("wgmma", _config("dW", M, K, change), "dW", x, w, db, dy, dw, rows, K, M)
            ok, err = _verdict(np, variant, dw, dy.astype(np.float64).T @ x.astype(np.float64))
            ok_b, err_b = _verdict(np, variant, db, dy.astype(np.float64).sum(axis=0))
            print(f"emulated {variant:16s} dW      {'ok' if ok and ok_b else 'FAIL'} (dW {err}, db {err_b})")
            bad += not (ok and ok_b)
        pre_ref = ref + b.astype(np.float64)
        gelu_ref = 0.5 * pre_ref * (1.0 + np.tanh(0.7978845608028654 * (pre_ref + 0.044715 * pre_ref ** 3)))
        for variant in (v for v in EPILOGUE_VARIANTS["forward_pre"] if v != "gelu_tanh"):  # (its PTX asm: nvcc only)
            out = (np.full((rows, M), np.nan, dtype=bf16), np.full((rows, M), np.nan, dtype=bf16))
            with rt.emulation():
                _call("wgmma", _config("forward_pre", M, K, VARIANTS[variant][0]), "forward_pre", x, w, b, None,
                      out, rows, K, M)
            (ok, err), (ok_g, err_g) = _verdict(np, variant, out[1], pre_ref), _verdict(np, variant, out[0], gelu_ref)
            print(f"emulated {variant:16s} pre     {'ok' if ok and ok_g else 'FAIL'} (pre {err}, gelu {err_g})")
            bad += not (ok and ok_g)
        dgelu_ref = (dy.astype(np.float64) @ w.astype(np.float64)) * _gelu_grad(np, x.astype(np.float64))
        for variant in ("tree", "cooperative", "store_off", "stages3", "cluster2"):  # (dgelu_tanh's PTX asm has no CPU
            # emulation: nvcc above only)
            out = np.full((rows, K), np.nan, dtype=bf16)
            with rt.emulation():
                _call("wgmma", _config("dx_dgelu", M, K, VARIANTS[variant][0]), "dx_dgelu", x, w, None, dy,
                      out, rows, K, M)
            ok, err = _verdict(np, variant, out, dgelu_ref)
            print(f"emulated {variant:16s} dx*gelu' {'ok' if ok else 'FAIL'} ({err})")
            bad += not ok
    finally:
        _common.num_sms = real_sms
    return bad


def _gelu_grad(xp, v):
    """d gelu / dv (float64): 0.5 (1 + tanh u) + 0.5 v sech^2(u) du/dv, u = sqrt(2/pi) (v + 0.044715 v^3)."""
    c = 0.7978845608028654
    t = xp.tanh(c * (v + 0.044715 * v ** 3))
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v)


def _verdict(xp, variant, out, ref):
    got = out.astype(xp.float64)
    if variant == "no_store":
        return bool(xp.isnan(got).all()), "output left as poisoned: nothing stored, as intended"
    scale = float(xp.sqrt(xp.mean(ref * ref)))
    err = float(xp.abs(got - ref).max()) / scale if bool(xp.isfinite(got).all()) else float("inf")
    return bool(xp.all(xp.abs(got - ref) <= 4e-2 * xp.abs(ref) + 2e-2 * scale)), f"max err {err:.2e} rms"


def dry(variants: list[str]) -> int:
    print("plan (variant, product: gemm_wgmma defines):")
    for variant, pname, d in plan():
        if variant in variants:
            print(f"  {variant:16s} {pname:12s} {_module_name(d)}")
    jobs = _modules(variants)
    print(f"{len(jobs)} distinct modules; nvcc:")
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
        for line in ex.map(_nvcc, jobs):
            print("  " + line, flush=True)
    return _emulate()


class _Product:
    """One product's inputs on the GPU (two sets, seeded by the product's name: a child process
    makes the same ones) and its float64 reference from set 0 (without the forward's bias)."""

    def __init__(self, cp, pname: str):
        bf16 = _common.np_dtype("bfloat16")
        self.name = pname
        self.product, self.K, self.M, self.with_bias = PRODUCTS[pname]
        cp.random.seed(5 + list(PRODUCTS).index(pname))

        def normal(shape, scale=1.0):
            return (cp.random.standard_normal(shape, dtype=cp.float32) * scale).astype(bf16)

        K, M, product = self.K, self.M, self.product
        self.sets = [(normal((ROWS, K)), normal((M, K), K ** -0.5), normal((M,)),
                      normal((ROWS, M)) if product not in ("forward", "forward_pre") else None) for _ in range(2)]
        x, w, b, dy = self.sets[0]
        self.shape = _output_shape(product, ROWS, K, M)
        self.depth = {"forward": K, "forward_pre": K, "forward_residual": K, "dx": M, "dx_dgelu": M, "dW": ROWS}[product]
        self.flops = 2.0 * self.shape[0] * self.shape[1] * self.depth
        if product in ("forward", "forward_pre", "forward_residual"):
            self.ref = x.astype(cp.float64) @ w.astype(cp.float64).T
        elif product in ("dx", "dx_dgelu"):
            self.ref = dy.astype(cp.float64) @ w.astype(cp.float64)
            if product == "dx_dgelu":  # gelu'(pre), pre = x
                self.dgelu = _gelu_grad(cp, x.astype(cp.float64))
        else:
            self.ref = dy.astype(cp.float64).T @ x.astype(cp.float64)
            self.ref_db = dy.astype(cp.float64).sum(axis=0)
        self.b64 = b.astype(cp.float64)
        dt = cp.float32 if product == "dW" else bf16   # dW, db: mixed precision's float32
        self.out = cp.empty(self.shape, dtype=dt)
        if product == "forward_pre":   # (out, pre)
            self.out = (self.out, cp.empty(self.shape, dtype=dt))
        self.db = cp.zeros((M,), dtype=cp.float32) if product == "dW" else None

    def call(self, engine, cfg, bias: bool):
        def run(i):
            x, w, b, dy = self.sets[i]
            b = (self.db if self.product == "dW" else b) if bias else None   # dW's: db, accumulated
            _call(engine, cfg, self.product, x, w, b, dy, self.out, ROWS, self.K, self.M)
        return run

    def check(self, cp, variant, run, bias: bool) -> tuple[bool, str]:
        """run(0) on a poisoned output (dW and db, which accumulate: on zeros) against the reference."""
        if self.product == "dW":
            self.out.fill(0)
            self.db.fill(0)
        elif self.product == "forward_pre":
            for a in self.out:
                a.fill(cp.nan)
        else:
            self.out.fill(cp.nan)
        run(0)
        if self.product == "forward_pre":
            pre = self.ref + self.b64
            if variant == "cublaslt":   # the plain forward
                return _verdict(cp, variant, self.out[0], pre)
            ok, why = _verdict(cp, variant, self.out[1], pre)
            u = 0.7978845608028654 * (pre + 0.044715 * pre ** 3)
            ok_g, why_g = _verdict(cp, variant, self.out[0], 0.5 * pre * (1.0 + cp.tanh(u)))
            return ok and ok_g, f"pre {why}; gelu {why_g}"
        if self.product == "dx_dgelu":
            return _verdict(cp, variant, self.out, self.ref if variant == "cublaslt" else self.ref * self.dgelu)
        if self.product == "forward_residual" and variant != "cublaslt":  # (cuBLASLt's: the plain forward)
            stream = self.sets[0][3].astype(cp.float64)
            return _verdict(cp, variant, self.out, stream + self.ref + self.b64 if bias else stream + self.ref)
        if self.product == "dW":
            ok, why = _verdict(cp, variant, self.out, self.ref)
            if bias:
                ok_b, why_b = _verdict(cp, variant, self.db, self.ref_db)
                ok, why = ok and ok_b, f"dW {why}; db {why_b}"
            return ok, why
        return _verdict(cp, variant, self.out, self.ref + self.b64 if bias else self.ref)


def _measure(cp, data: _Product, variant: str, base: float, meta: dict, timer, tcfg) -> dict:
    """One variant at one product: checked, then timed; the record."""
    change, edit, bias_override = VARIANTS.get(variant, ({}, None, None))
    bias = data.with_bias if bias_override is None else bias_override
    engine, cfg = (variant, None) if variant in ("cublaslt", "cublaslt_fused") else \
        ("wgmma", _config(data.product, data.M, data.K, change))
    rec = dict(op="matmul", variant=variant, product=data.name, direction=data.product, rows=data.shape[0],
               cols=data.shape[1], depth=data.depth, dtype="bfloat16", bias=bias, cfg=cfg, cublaslt_s=base, **meta)
    if cfg is not None:
        tiles = rt.cdiv(data.shape[0], cfg.get("bm", 128)) * rt.cdiv(data.shape[1], cfg["bn"])
        rec.update(tiles=tiles, tile_waves=rt.cdiv(tiles, meta["sms"]))
    try:
        with source_edit(edit):
            run = data.call(engine, cfg, bias)
            ok, why = data.check(cp, variant, run, bias)
            rec.update(checked=variant != "no_store", correct=ok, check=why)
            if ok:
                t = measure(run, 2, timer, tcfg)
                rec.update(p20_s=t.p20, p50_s=t.p50, p80_s=t.p80, tflops=data.flops / t.p50 / 1e12,
                           vs_cublaslt=base / t.p50)
                if "tile_waves" in rec:
                    rec["us_per_tile_wave"] = t.p50 / rec["tile_waves"] * 1e6
                if SUSTAIN_S > 0:
                    rec.update(_sustained(cp, run, SUSTAIN_S, data.flops))
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    return rec


SUSTAINED_CALLS = 20


def _sustained(cp, run, seconds: float, flops: float) -> dict:
    """run (alternating the two input sets) for `seconds` as replays of one captured graph, with
    nvidia-smi sampling meanwhile; the rate and the clock and power over the second half."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for i in range(SUSTAINED_CALLS):
            run(i % 2)
        graph = stream.end_capture()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    marks = []   # (host time, event) after each replay
    with stream:
        while time.perf_counter() - t0 < seconds:
            graph.launch(stream)
            ev = cp.cuda.Event()
            ev.record(stream)
            marks.append((time.perf_counter() - t0, ev))
            if len(marks) > 4:
                marks[-5][1].synchronize()   # at most a few replays queued ahead
        stream.synchronize()
    smi.terminate()
    samples = [tuple(float(v) for v in line.split(",")) for line in smi.communicate()[0].splitlines()
               if line.count(",") == 1]
    half = [m for m in marks if m[0] >= seconds / 2]
    gpu_s = cp.cuda.get_elapsed_time(half[0][1], half[-1][1]) / 1e3
    late = samples[len(samples) // 2:]
    mhz = float(np.median([m for m, _ in late])) if late else float("nan")
    watts = float(np.median([w for _, w in late])) if late else float("nan")
    tflops = flops * SUSTAINED_CALLS * (len(half) - 1) / gpu_s / 1e12
    return dict(sustained_s=seconds, sustained_tflops=tflops, sustained_mhz=mhz, sustained_w=watts,
                sustained_tflop_per_j=tflops / watts if watts == watts else float("nan"))


def _timing():
    return CudaTimer(), TimingConfig(min_time_s=0.15, max_time_s=0.6, max_samples=20)


def _meta(cp) -> dict:
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return dict(device=dev["name"].decode(), sms=_common.num_sms(cp), cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
                cupy=cp.__version__, git_sha=os.environ.get("GIT_SHA", ""))


def _isolated(pname: str, variant: str, base: float, limit: float) -> dict:
    """_measure in a child process of this script, killed after `limit` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", pname, variant, "--base", repr(base),
               "--out", str(out), "--sustained", repr(SUSTAIN_S)]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return dict(op="matmul", variant=variant, product=pname, isolated=True,
                        error=f"timed out after {limit:.0f} s in a child process (a hang?): killed")
        if proc.returncode or not out.exists():
            return dict(op="matmul", variant=variant, product=pname, isolated=True,
                        error=f"child process exited {proc.returncode}: {(proc.stderr or proc.stdout)[-600:]}")
        rec = json.loads(out.read_text())
        rec.update(isolated=True, child_s=time.perf_counter() - t)
        return rec


def child(pname: str, variant: str, base: float, out_path: str) -> int:
    import cupy as cp
    timer, tcfg = _timing()
    data = _Product(cp, pname)
    rec = _measure(cp, data, variant, base, _meta(cp), timer, tcfg)
    Path(out_path).write_text(json.dumps(rec))
    return 0


def run(out_path: str, variants: list[str], products: list[str], limit: float) -> int:
    import multiprocessing as mp

    import cupy as cp
    t0 = time.perf_counter()
    jobs = _modules(variants)
    with ProcessPoolExecutor(max_workers=min(len(jobs), 12), mp_context=mp.get_context("spawn")) as ex:
        for line in ex.map(_compile_on_gpu, jobs):
            print("compiled " + line, flush=True)
    print(f"compile: {time.perf_counter() - t0:.1f} s", flush=True)
    timer, tcfg = _timing()
    meta = _meta(cp)
    records, hung = [], {}   # hung: variant -> the product its child process timed out at
    for pname in products:
        data = _Product(cp, pname)
        base = measure(data.call("cublaslt", None, data.with_bias), 2, timer, tcfg).p50
        for variant in ["cublaslt"] + [v for v in variants if _runs_at(v, pname)]:
            if variant in hung:  # a hang is the kernel's, not the shape's: not another `limit` seconds
                rec = dict(op="matmul", variant=variant, product=pname, isolated=True,
                           error=f"not run: timed out at {hung[variant]}")
            elif variant in ISOLATED:
                rec = _isolated(pname, variant, base, limit)
                if "timed out" in rec.get("error", ""):
                    hung[variant] = pname
            else:
                rec = _measure(cp, data, variant, base, meta, timer, tcfg)
            records.append(rec)
            Path(out_path).parent.mkdir(parents=True, exist_ok=True)
            with open(out_path, "w") as f:
                json.dump(records, f, indent=1)
            what = (f"{rec['tflops']:6.0f} TFLOP/s {rec['vs_cublaslt']:5.2f}x"
                    + (f" {rec['us_per_tile_wave']:7.1f} us/tile-wave" if "us_per_tile_wave" in rec else "")
                    + (f" | sustained {rec['sustained_tflops']:4.0f} TFLOP/s at {rec['sustained_mhz']:4.0f} MHz"
                       f" {rec['sustained_w']:3.0f} W" if "sustained_tflops" in rec else "")
                    if "tflops" in rec else rec.get("error", f"WRONG ({rec.get('check')})"))
            print(f"{pname:12s} {variant:16s} {what}", flush=True)
        del data
        cp.get_default_memory_pool().free_all_blocks()
    print(f"probe: {len(records)} records, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="wgmma-probe.json")
    parser.add_argument("--dry", action="store_true", help="on the CPU: the plan, nvcc for every module, the emulator")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, from: " + ", ".join(VARIANTS) + " (cublaslt always runs)")
    parser.add_argument("--products", default=",".join(PRODUCTS), help="comma-separated, from: " + ", ".join(PRODUCTS))
    parser.add_argument("--child-timeout", type=float, default=90.0,
                        help="seconds an ISOLATED variant's child process may take (compiled modules cached)")
    parser.add_argument("--sustained", type=float, default=0.0, metavar="S",
                        help="also run each checked variant S seconds back to back: its rate, clock and power at the cap")
    parser.add_argument("--child", nargs=2, metavar=("PRODUCT", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--base", type=float, help=argparse.SUPPRESS)  # the child's cuBLASLt time
    args = parser.parse_args(argv)
    variants, products = args.variants.split(","), args.products.split(",")
    unknown = [v for v in variants if v not in VARIANTS] + [p for p in products if p not in PRODUCTS]
    if unknown:
        parser.error(f"unknown variants / products: {', '.join(unknown)}")
    if args.sustained < 0:
        parser.error(f"--sustained takes seconds >= 0, got {args.sustained}")
    global SUSTAIN_S
    SUSTAIN_S = args.sustained
    if args.child:
        return child(*args.child, args.base, args.out)
    return dry(variants) if args.dry else run(args.out, variants, products, args.child_timeout)


if __name__ == "__main__":
    sys.exit(main())
