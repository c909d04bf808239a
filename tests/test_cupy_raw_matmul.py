"""cupy_raw matmul without a GPU.

1. The index maps of the tensor-core GEMMs (backends/cupy_raw/matmul_layout.cuh), compiled for the
   CPU with nvcc and run against emulations of ldmatrix, mma.sync, TMA and the wgmma descriptors
   (tests/cupy_raw_matmul_layout.cu).
2. The host side of every variant, in recording mode (NumPy arrays stand in for device arrays):
   each launch is checked against its kernel's C signature by the runtime, then carried out by a
   NumPy model of what that kernel computes (`_KernelModel`, from the contract written at the top
   of matmul.cu), and forward and backward are compared with the float64 naive backend. This checks
   the mapping of forward / dx / dW onto GEMM operands, the epilogue flags, split-K and its
   finish, the bias gradient, float32 parameter-gradient buffers, the tensor maps' geometry and
   the cuBLASLt column-major mapping (its call carried out by a NumPy model too).
   And the kernels themselves (gemm_mma, gemm_wgmma, gemm_simt, the reductions) run by the CPU
   emulator (backends/cupy_raw/_emulator.py; TMA, mbarriers and wgmma by matmul.cu's emulated
   branch) against the same reference.
3. Every (kernel group, defines) the launchers use at GPT-2's shapes and the awkward test shapes
   compiles for sm_90 (sm_90a for wgmma) with nvcc, and with NVRTC using RawModule's own options.

What only the GPU can show (the hardware's own TMA, wgmma and timing; cuBLASLt) is checked there:
bench/device/cupy_raw.sh.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from backends.cupy_raw import _common, _cublaslt, _emulator, _tma
from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import matmul as mm
from backends.naive import matmul as naive
from conformance.tolerances import tolerance

ROOT = Path(__file__).resolve().parents[1]
NVCC = rt.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH or /usr/local/cuda/bin)")
VARIANTS = {"tiled": mm.tiled, "wgmma": mm.wgmma, "cublaslt": mm.cublaslt}


# ---- 1. index maps ------------------------------------------------------------------------------
@needs_nvcc
def test_layout_maps_against_an_emulation_of_the_hardware(tmp_path):
    exe = tmp_path / "layout"
    build = subprocess.run([NVCC, "-std=c++17", "-O1", "-o", str(exe), str(ROOT / "tests/cupy_raw_matmul_layout.cu")],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr + build.stdout
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout[-4000:]


def test_epilogue_flags_match_the_source():
    text = (ROOT / "backends/cupy_raw/matmul.cu").read_text()
    defined = {name: int(value) for name, value in re.findall(r"#define FLAG_(\w+) (\d+)", text)}
    assert defined == {name[5:]: getattr(mm, name) for name in dir(mm) if name.startswith("FLAG_")}


def test_wgmma_epilogue_buffer_matches_the_source():
    # wgmma_shared_bytes counts gemm_wgmma's two epilogue buffers of 64 rows x WG_EPI_LDS floats
    text = (ROOT / "backends/cupy_raw/matmul.cu").read_text()
    cols = int(re.search(r"constexpr int WG_EPI_COLS = (\d+);", text).group(1))
    assert re.search(r"constexpr int WG_EPI_LDS = WG_EPI_COLS \+ (\d+);", text) and \
        cols + int(re.search(r"constexpr int WG_EPI_LDS = WG_EPI_COLS \+ (\d+);", text).group(1)) == mm.WG_EPI_LDS
    assert "constexpr int WG_EPI_BYTES = 64 * WG_EPI_LDS * 4;" in text


# ---- 2. the host side against a model of the kernels -------------------------------------------
def _gelu(v):
    return 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))


def _gelu_grad(v):
    """d gelu / dv in float64: 0.5 (1 + tanh u) + 0.5 v sech^2(u) du/dv, u = sqrt(2/pi) (v + 0.044715 v^3)."""
    c = 0.7978845608028654
    t = np.tanh(c * (v + 0.044715 * v ** 3))
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * v * v)


class _KernelModel:
    """What each kernel of matmul.cu computes, in float64 NumPy, from its launch arguments (and the
    tensor maps' geometry, which `tiled_2d` is made to remember)."""

    def __init__(self):
        self.maps: list = []
        self.kernels: list = []
        self.compute = True  # False: record the launches (checked as ever) without their arithmetic

    def tiled_2d(self, a, rows, cols, row_stride, box_cols, box_rows):
        _real_tiled_2d(a, rows, cols, row_stride, box_cols, box_rows)  # the real checks
        self.maps.append((a, rows, cols, row_stride, box_cols, box_rows))
        return rt.ByValue(_tma.CTYPE, (len(self.maps) - 1).to_bytes(8, "little") + bytes(_tma.MAP_BYTES - 8))

    def tiled_planes(self, a, planes, rows, cols, box_cols, box_rows):
        _real_tiled_planes(a, planes, rows, cols, box_cols, box_rows)  # the real checks
        self.maps.append((a, planes, rows, cols, box_cols, box_rows))
        return rt.ByValue(_tma.CTYPE, (len(self.maps) - 1).to_bytes(8, "little") + bytes(_tma.MAP_BYTES - 8))

    def launch(self, k, grid, block, args, shared_mem=0):
        _real_launch(k, grid, block, args, shared_mem)  # recording: signature and limits checked
        self.kernels.append((k.name, dict(k.defines)))
        grid = tuple(grid) if isinstance(grid, tuple) else (grid,)
        block = tuple(block) if isinstance(block, tuple) else (block,)
        if self.compute:
            getattr(self, k.name)(k.defines, grid + (1,) * (3 - len(grid)), block, args, shared_mem)

    @staticmethod
    def _operand(a, ld, kmajor, extent, depth):
        flat = a.reshape(-1)
        i, k = np.arange(extent)[:, None], np.arange(depth)[None, :]
        return flat[i * ld + k if kmajor else k * ld + i].astype(np.float64)  # (extent, depth)

    def _map_operand(self, handle, kmajor, extent, depth, box_mn):
        a, rows, cols, stride, box_cols, box_rows = self.maps[int.from_bytes(handle.data[:8], "little")]
        view = self._operand(a, stride, True, rows, cols)  # the map's rows x cols
        if kmajor:
            assert (rows, cols, box_cols, box_rows) == (extent, depth, 64, box_mn)
            return view
        assert (rows, cols, box_cols, box_rows) == (depth, extent, 64, 64)
        return view.T

    @staticmethod
    def _epilogue(c, v, bias, pre, flags, floatx):
        if not flags & mm.FLAG_PARTIAL:
            if floatx != "float32":  # 16-bit inputs: float32 C only through FLAG_OUT_F32
                assert bool(flags & mm.FLAG_OUT_F32) == (str(c.dtype) == "float32")
        if flags & mm.FLAG_VEC:
            assert c.shape[-1] % 4 == 0 and all(x.ctypes.data % 16 == 0 for x in (c, bias, pre) if x is not None)
        if flags & mm.FLAG_BIAS:
            v = v + bias.astype(np.float64)
        if flags & mm.FLAG_PRE:
            pre[...] = v.astype(pre.dtype)
        if flags & mm.FLAG_GELU:
            v = _gelu(v)
        if flags & mm.FLAG_DGELU:  # the GELU's backward, of the product as the plain dx stores it
            assert not flags & (mm.FLAG_BIAS | mm.FLAG_PRE | mm.FLAG_GELU | mm.FLAG_ACCUMULATE)
            assert floatx == "float32" or not flags & mm.FLAG_OUT_F32  # (C in the operands' dtype)
            assert pre.shape == c.shape and pre.dtype == c.dtype
            v = _gelu_grad(pre.astype(np.float64)) * v.astype(c.dtype).astype(np.float64)
        if flags & mm.FLAG_RESIDUAL:  # the residual add, of the product as matmul stores it
            assert not flags & (mm.FLAG_PRE | mm.FLAG_GELU | mm.FLAG_DGELU | mm.FLAG_ACCUMULATE | mm.FLAG_OUT_F32)
            assert pre.shape == c.shape and pre.dtype == c.dtype
            v = pre.astype(np.float64) + v.astype(c.dtype).astype(np.float64)
        if flags & mm.FLAG_ACCUMULATE:
            v = v + c.astype(np.float64)
        c[...] = v.astype(c.dtype)

    def _gemm(self, defines, grid, A, B, c, bias, pre, rows, cols, depth, k_split, flags, tile, items=None,
              rowsum=None):
        tiles, slices = rt.cdiv(rows, tile[0]) * rt.cdiv(cols, tile[1]), rt.cdiv(max(depth, 1), k_split)
        if items is None:  # a (tiles, slices) grid
            assert grid[:2] == (tiles, slices), (grid, rows, cols, tile)
        else:              # blocks walking the tiles x slices work items (or clusters: gemm_wgmma checks them)
            assert grid[1:] == (1, 1) and 1 <= grid[0]
            assert items == "clusters" or (grid[0] <= tiles * slices and (grid[0] == tiles * slices or items))
        floatx = {"float": "float32", "__half": "float16", "__nv_bfloat16": "bfloat16"}[defines["floatX"]]
        if flags & mm.FLAG_ROWSUM:
            assert not defines["A_KMAJOR"] and rowsum.shape == (slices, rows) and str(rowsum.dtype) == "float32"
        for s in range(slices):
            lo, hi = s * k_split, min(depth, (s + 1) * k_split)
            v = A[:, lo:hi] @ B[:, lo:hi].T
            if flags & mm.FLAG_ROWSUM:
                rowsum[s] = A[:, lo:hi].sum(axis=1)
            if flags & mm.FLAG_PARTIAL:
                assert c.shape == (slices, rows, cols) and str(c.dtype) == "float32"
                c[s] = v
            elif flags & mm.FLAG_SERIAL:  # each k slice added to the float32 C in turn (dW's gradient)
                assert str(c.dtype) == "float32" and c.shape == (rows, cols)
                assert flags & mm.FLAG_ACCUMULATE and flags & mm.FLAG_OUT_F32 and not flags & mm.FLAG_BIAS
                c += v.astype(np.float32)
            else:
                assert slices == 1
                self._epilogue(c.reshape(rows, cols), v, bias if flags & mm.FLAG_BIAS else None,
                               pre.reshape(rows, cols) if flags & (mm.FLAG_PRE | mm.FLAG_DGELU | mm.FLAG_RESIDUAL) else None,
                               flags, floatx)

    def gemm_simt(self, d, grid, block, args, shared):
        a, b, c, bias, pre, rows, cols, depth, lda, ldb, ak, bk, k_split, group_m, flags = args
        self._gemm(d, grid, self._operand(a, lda, ak, rows, depth), self._operand(b, ldb, bk, cols, depth), c, bias,
                   pre, rows, cols, depth, k_split, flags, (64, 64))

    def gemm_mma(self, d, grid, block, args, shared):
        a, b, c, bias, pre, rows, cols, depth, lda, ldb, k_split, group_m, flags = args
        assert k_split % 64 == 0 and block[0] == d["MMA_WARPS_M"] * d["MMA_WARPS_N"] * 32
        assert shared >= d["MMA_STAGES"] * (d["MMA_BM"] + d["MMA_BN"]) * 128 and shared <= rt.MAX_SHARED_PER_BLOCK
        if d["ALIGNED"]:  # what cp.async's whole 16-byte chunks need
            for arr, ld, kmajor, extent in ((a, lda, d["A_KMAJOR"], depth if d["A_KMAJOR"] else rows),
                                            (b, ldb, d["B_KMAJOR"], depth if d["B_KMAJOR"] else cols)):
                assert arr.ctypes.data % 16 == 0 and (ld * 2) % 16 == 0 and (extent * 2) % 16 == 0
        self._gemm(d, grid, self._operand(a, lda, d["A_KMAJOR"], rows, depth),
                   self._operand(b, ldb, d["B_KMAJOR"], cols, depth), c, bias, pre, rows, cols, depth, k_split,
                   flags, (d["MMA_BM"], d["MMA_BN"]))

    def gemm_wgmma(self, d, grid, block, args, shared):
        ta, tb, tc, tpre, c, bias, pre, rows, cols, depth, rowsum, chain, k_split, group_m, flags = args
        assert k_split % 64 == 0 and block[0] == mm.WG_THREADS and shared <= rt.MAX_SHARED_PER_BLOCK
        assert shared == mm.wgmma_shared_bytes(d["WG_BN"], d["WG_STAGES"], d["WG_BM"], d["WG_STORE_COLS"],
                                               d["WG_STORE_F32"], d["WG_STORE_DGELU"])
        bm, cluster = d["WG_BM"], d.get("WG_CLUSTER", 1)
        A = self._map_operand(ta, d["A_KMAJOR"], rows, depth, bm)
        # in a cluster each block loads its share of B's tile: K-major boxes of WG_BN / cluster rows
        B = self._map_operand(tb, d["B_KMAJOR"], cols, depth, d["WG_BN"] // cluster)
        if d["WG_STORE_COLS"]:  # a TMA-store epilogue: C (or split-K's slices) through its own map
            target, *geometry = self.maps[int.from_bytes(tc.data[:8], "little")]
            assert target is c and flags & mm.FLAG_VEC
            if flags & mm.FLAG_PRE:  # pre through its own map, shaped as C's; only with the bias and GELU
                pre_target, *pre_geometry = self.maps[int.from_bytes(tpre.data[:8], "little")]
                assert pre_target is pre and pre_geometry == geometry and flags & mm.FLAG_BIAS and flags & mm.FLAG_GELU
            # FLAG_DGELU's pre is loaded through its own map (shaped as C's) into the image: one pass of the whole tile
            assert bool(d["WG_STORE_DGELU"]) == bool(flags & mm.FLAG_DGELU)
            if d["WG_STORE_DGELU"]:
                pre_target, *pre_geometry = self.maps[int.from_bytes(tpre.data[:8], "little")]
                assert pre_target is pre and pre_geometry == geometry and d["WG_STORE_COLS"] == d["WG_BN"]
            if d["WG_STORE_F32"]:  # float32: the slices as planes, or C accumulated (reduce-add)
                assert str(c.dtype) == "float32" and not flags & (mm.FLAG_BIAS | mm.FLAG_GELU)
                planes = c.shape[0] if flags & mm.FLAG_PARTIAL else 1
                assert flags & (mm.FLAG_PARTIAL | mm.FLAG_OUT_F32) and geometry == [planes, rows, cols, 32, 64]
            else:                  # 16-bit C, whole
                assert cols % 8 == 0 and not flags & (mm.FLAG_ACCUMULATE | mm.FLAG_OUT_F32 | mm.FLAG_PARTIAL)
                assert geometry == [1, rows, cols, 64, 64]
        slices = rt.cdiv(max(depth, 1), k_split)
        if flags & mm.FLAG_SERIAL:  # a zeroed counter per 64-row share of C's tiles, the TMA store's reduce-add
            assert slices > 1 and d["WG_STORE_F32"] and str(chain.dtype) == "int32" and not chain.any()
            assert chain.shape == (rt.cdiv(rows, bm) * (bm // 64) * rt.cdiv(cols, d["WG_BN"]),)
        if cluster > 1:  # whole clusters, a persistent grid over the clusters' items (two tile rows each)
            assert cluster == 2 and d["WG_STORE_COLS"]
            cluster_items = rt.cdiv(rt.cdiv(rows, bm), cluster) * rt.cdiv(cols, d["WG_BN"]) * slices
            assert grid[0] == cluster * min(cluster_items, _common.H200_SMS * d["WG_CTAS"] // cluster), grid
            persistent = "clusters"
        else:
            persistent = grid[0] == min(rt.cdiv(rows, bm) * rt.cdiv(cols, d["WG_BN"]) * slices,
                                        _common.H200_SMS * d["WG_CTAS"])
        assert persistent or not d["WG_PINGPONG"]
        self._gemm(d, grid, A, B, c, bias, pre, rows, cols, depth, k_split, flags, (bm, d["WG_BN"]), items=persistent,
                   rowsum=rowsum)

    def splitk_finish(self, d, grid, block, args, shared):
        partial, c, bias, rows, cols, splits, flags = args
        floatx = {"float": "float32", "__half": "float16", "__nv_bfloat16": "bfloat16"}[d["floatX"]]
        self._epilogue(c, partial[:splits].astype(np.float64).sum(axis=0),
                       bias if flags & mm.FLAG_BIAS else None, None, flags, floatx)

    def colsum_partial(self, d, grid, block, args, shared):
        x, partial, n, m, per_group = args
        assert grid[0] * 64 >= m and grid[1] * per_group >= n
        for g in range(grid[1]):
            partial[g] = x[g * per_group:min(n, (g + 1) * per_group)].astype(np.float64).sum(axis=0)

    def colsum_finish(self, d, grid, block, args, shared):
        partial, out, groups, m, flags = args
        assert grid[0] * block[0] >= m and bool(flags & mm.FLAG_OUT_F32) == (str(out.dtype) == "float32")
        out[...] = (out.astype(np.float64) + partial[:groups].astype(np.float64).sum(axis=0)).astype(out.dtype)

    @staticmethod
    def cublaslt(c, a, transa, b, transb, m, n, k, lda, ldb, ldc, bias=None, beta=0.0, gelu=False, dgelu=False,
                 aux=None):
        _real_cublaslt(c, a, transa, b, transb, m, n, k, lda, ldb, ldc, bias=bias, beta=beta, gelu=gelu, dgelu=dgelu,
                       aux=aux)  # its checks

        def column_major(x, r, cc, ld):  # the r x cc column-major matrix at x with leading dimension ld
            return x.reshape(-1)[np.arange(r)[:, None] + np.arange(cc)[None, :] * ld].astype(np.float64)

        A = column_major(a, k, m, lda).T if transa == _cublaslt.OP_T else column_major(a, m, k, lda)
        B = column_major(b, n, k, ldb).T if transb == _cublaslt.OP_T else column_major(b, k, n, ldb)
        D = A @ B + (beta * column_major(c, m, n, ldc) if beta else 0.0)
        if bias is not None:
            D += bias.astype(np.float64)[:, None]
        at = np.arange(m)[:, None] + np.arange(n)[None, :] * ldc
        if gelu:
            if aux is not None:
                aux.reshape(-1)[at] = D.astype(aux.dtype)
            D = _gelu(D)
        if dgelu:
            D = D * _gelu_grad(aux.reshape(-1)[at].astype(np.float64))
        c.reshape(-1)[at] = D.astype(c.dtype)


_real_launch, _real_tiled_2d, _real_tiled_planes, _real_cublaslt = rt.launch, _tma.tiled_2d, _tma.tiled_planes, _cublaslt.matmul


@pytest.fixture
def model(monkeypatch):
    m = _KernelModel()
    monkeypatch.setattr(rt, "launch", m.launch)
    monkeypatch.setattr(_tma, "tiled_2d", m.tiled_2d)
    monkeypatch.setattr(_tma, "tiled_planes", m.tiled_planes)
    monkeypatch.setattr(_cublaslt, "matmul", m.cublaslt)
    with rt.recording():
        yield m


def _inputs(rng, N, K, M, dtype, bias=True):
    dt = _common.np_dtype(dtype)
    x = rng.standard_normal((N, K)).astype(dt)
    w = (rng.standard_normal((M, K)) * K ** -0.5).astype(dt)
    b = rng.standard_normal(M).astype(dt) if bias else None
    return x, w, b


def _close(got, ref, dtype, kind, what):
    tol = tolerance(dtype, kind)
    got = np.asarray(got).astype(np.float64)
    scale = max(float(np.sqrt(np.mean(ref ** 2))), 1e-30)
    bad = np.abs(got - ref) > tol.rtol * np.abs(ref) + tol.atol * scale
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} elements off, worst {np.abs(got - ref).max():.3g}"


SHAPES = [(4, 8, 6), (1, 20, 36), (17, 36, 20), (13, 37, 11), (128, 64, 96), (40, 192, 136), (2048, 768, 768)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_and_backward_match_naive(model, variant, dtype):
    _check_against_naive(VARIANTS[variant], variant, dtype, SHAPES, np.random.default_rng(0))


def _check_against_naive(impl, variant, dtype, shapes, rng, biases=(True, False)):
    """forward (out= poisoned) and backward (dx poisoned, dW / db from random non-zero starts, in
    float32 for 16-bit inputs) of `impl` against float64 naive on the same rounded inputs."""
    for N, K, M in shapes:
        for with_bias in biases:
            if N * K * M > 1e8 and (dtype != "bfloat16" or not with_bias):
                continue  # the split-K shape once is enough
            x, w, b = _inputs(rng, N, K, M, dtype, with_bias)
            inputs = {"x": x, "weight": w, **({"bias": b} if with_bias else {})}
            ref_inputs = {k: v.astype(np.float64) for k, v in inputs.items()}
            what = f"{variant} {dtype} N={N} K={K} M={M} bias={with_bias}"
            out = np.full((N, M), np.nan, dtype=x.dtype)
            y, saved = impl.forward(inputs, {}, out=out)
            ref_y, ref_saved = naive.forward(ref_inputs, {})
            assert y is out
            _close(y, ref_y, dtype, "forward", what + " y")
            dy = rng.standard_normal((N, M)).astype(x.dtype)
            gdt = np.float32 if dtype != "float32" else x.dtype   # mixed precision's float32 gradients
            start_w = rng.standard_normal((M, K)).astype(gdt)
            grads = {"x": np.full((N, K), np.nan, dtype=x.dtype), "weight": start_w.copy()}
            ref_grads = {"weight": start_w.astype(np.float64)}
            if with_bias:
                start_b = rng.standard_normal(M).astype(gdt)
                grads["bias"], ref_grads["bias"] = start_b.copy(), start_b.astype(np.float64)
            got = impl.backward(saved, dy, grads)
            ref = naive.backward(ref_saved, dy.astype(np.float64), ref_grads)
            assert got["x"] is grads["x"] and got["weight"] is grads["weight"]
            for name in ("x", "weight") + (("bias",) if with_bias else ()):
                _close(got[name], ref[name], dtype, "gradient", f"{what} d{name}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_gelu_epilogue(model, variant):
    """pre and gelu(pre) from one GEMM; cuBLASLt's GELU_AUX_BIAS (the reference) on whole 8-column
    groups, the hand-written epilogues on ragged widths too."""
    rng = np.random.default_rng(1)
    for N, K, M in [(17, 36, 24 if variant == "cublaslt" else 20), (128, 64, 96)]:
        x, w, b = _inputs(rng, N, K, M, "float16")
        pre = np.full((N, M), np.nan, dtype=x.dtype)
        y = VARIANTS[variant].forward_gelu(x, w, b, pre=pre)
        ref = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
        _close(pre, ref, "float16", "forward", f"{variant} pre N={N}")
        _close(y, _gelu(ref), "float16", "forward", f"{variant} gelu N={N}")


def _check_dx_dgelu(impl, label: str, dtype: str, shapes, rng) -> None:
    """backward with dgelu_at (the MLP projection's: x = gelu(pre)) against float64: dx =
    (dy @ W) * gelu'(pre), dx poisoned first; dW and db exactly what the plain backward makes of
    the same inputs (the GELU touches dx alone)."""
    for N, H, M in shapes:
        pre = (rng.standard_normal((N, H)) * 2).astype(_common.np_dtype(dtype))
        h = _gelu(pre.astype(np.float64)).astype(pre.dtype)
        _, w, b = _inputs(rng, N, H, M, dtype)
        _, saved = impl.forward({"x": h, "weight": w, "bias": b}, {})
        dy = rng.standard_normal((N, M)).astype(pre.dtype)
        gdt = np.float32 if dtype != "float32" else pre.dtype
        fused = {"x": np.full((N, H), np.nan, dtype=pre.dtype), "weight": np.ones((M, H), gdt), "bias": np.ones(M, gdt)}
        plain = {"weight": np.ones((M, H), gdt), "bias": np.ones(M, gdt)}
        got = impl.backward(saved, dy, fused, dgelu_at=pre)
        want = impl.backward(saved, dy, plain)
        assert got["x"] is fused["x"]
        ref = (dy.astype(np.float64) @ w.astype(np.float64)) * _gelu_grad(pre.astype(np.float64))
        _close(got["x"], ref, dtype, "gradient", f"{label} {dtype} dx*gelu' N={N} H={H} M={M}")
        for name in ("weight", "bias"):
            assert np.array_equal(got[name], want[name]), f"{label}: d{name} differs from the plain backward's"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("variant", ["tiled", "wgmma"])
def test_dx_with_the_gelu_backward_matches_float64(model, variant, dtype):
    """FLAG_DGELU through every epilogue the launchers pick: wgmma's TMA store with pre prefetched
    (GPT-2's projection, 3072 -> 768, and a ragged 520 x 264), its staged epilogue and gemm_mma where
    TMA cannot describe C (H = 130), gemm_simt for float32."""
    _check_dx_dgelu(VARIANTS[variant], variant, dtype, [(256, 3072, 768), (520, 264, 64), (17, 130, 20)],
                    np.random.default_rng(3))
    prefetched = [d for name, d in model.kernels if d.get("WG_STORE_DGELU")]
    assert bool(prefetched) == (variant == "wgmma" and dtype != "float32"), model.kernels


def test_cublaslt_epilogue_codes_are_the_headers():
    """cublasLtEpilogue_t as cublasLt.h numbers it: DEFAULT 1, BIAS 4, GELU 32, GELU_AUX 160,
    GELU_BIAS 36, GELU_AUX_BIAS 164, DGELU 192 (a wrong code runs another epilogue, silently)."""
    codes = {(bias, gelu, aux, dgelu): _cublaslt._epilogue(bias, gelu, aux, dgelu)
             for bias in (False, True) for gelu in (False, True) for aux in (False, True) for dgelu in (False,)}
    assert codes[(False, False, False, False)] == 1 and codes[(True, False, False, False)] == 4
    assert codes[(False, True, False, False)] == 32 and codes[(True, True, False, False)] == 36
    assert codes[(False, True, True, False)] == 160 and codes[(True, True, True, False)] == 164
    assert _cublaslt._epilogue(False, False, True, True) == 192


def test_dx_with_the_gelu_backward_is_refused_where_it_cannot_run(model):
    rng = np.random.default_rng(4)
    x, w, b = _inputs(rng, 16, 64, 32, "bfloat16")
    _, saved = mm.cublaslt.forward({"x": x, "weight": w, "bias": b}, {})
    grads = {"weight": np.zeros(w.shape, np.float32), "bias": np.zeros(b.shape, np.float32)}
    dy = np.ones((16, 32), x.dtype)
    with pytest.raises(ValueError, match="cublaslt: no GELU backward in dx here: cuBLASLt's DGELU"):
        mm.cublaslt.backward(saved, dy, grads, dgelu_at=np.zeros_like(x))
    with pytest.raises(ValueError, match="cublaslt: its GELU epilogue writes C .* whole 8-column groups"):
        mm.cublaslt.forward_gelu(x, w[:30], b[:30])
    _, saved = mm.wgmma.forward({"x": x, "weight": w, "bias": b}, {})
    launched = len(model.kernels)
    for bad, match in ((np.zeros((16, 63), x.dtype), "dgelu_at must be"), (np.zeros((16, 64), np.float32), "dgelu_at must be")):
        with pytest.raises(ValueError, match=match):
            mm.wgmma.backward(saved, dy, dict(grads), dgelu_at=bad)
    with pytest.raises(ValueError, match="takes no bias"):
        mm.gemm("wgmma", mm.Operand(dy, 32, True), mm.Operand(w, 64, False), np.empty_like(x), 16, 64, 32,
                bias=b, dgelu_at=np.zeros_like(x))
    assert len(model.kernels) == launched, "a refused call launched a kernel"


# ---- 2b. the tiled variant's kernels themselves, in the CPU emulator -----------------------------
@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("dtype,shapes", [
    # every operand 16-byte aligned (cp.async path) in all three products; then split-K's dW (N =
    # 1024 over one 128 x 128 tile: two slices and splitk_finish); then element-wise loads (K = 37)
    ("bfloat16", [(16, 64, 128), (1024, 128, 128), (13, 37, 11)]),
    ("float16", [(16, 64, 128)]),
    ("float32", [(17, 36, 20), (64, 40, 72)]),
], ids=["bfloat16", "float16", "float32"])
def test_tiled_kernels_in_the_emulator(dtype, shapes):
    """gemm_mma (mma.sync, the cp.async ring, ldmatrix), gemm_simt and the reductions, run on the CPU
    by the emulator (cp.async a copy, ldmatrix from warp shuffles, mma.sync by its fragment table)."""
    with rt.emulation():
        _check_against_naive(mm.tiled, "tiled (emulated)", dtype, shapes, np.random.default_rng(5), biases=(True,))
        if dtype == "bfloat16":
            x, w, b = _inputs(np.random.default_rng(6), 40, 64, 136, dtype)
            pre = np.full((40, 136), np.nan, dtype=x.dtype)
            y = mm.tiled.forward_gelu(x, w, b, pre=pre)
            ref = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
            _close(pre, ref, dtype, "forward", "emulated pre")
            _close(y, _gelu(ref), dtype, "forward", "emulated gelu")


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
def test_simt_sums_each_64_deep_block_apart():
    """gemm_simt's float32 sum over k is blocked (64 deep), so a long sum loses little to rounding: 2^24
    then 1023 ones, where every + 1 onto 2^24 rounds away (a tie, to even). A sequential sum returns
    2^24 (1023 lost, the kind of error that failed lm_head's float32 dx at depth 50304); blocks of 64
    lose only the 63 ones that share the first block with 2^24."""
    depth = 1024
    x = np.ones((1, depth), np.float32)
    x[0, 0] = 2.0 ** 24
    w = np.ones((1, depth), np.float32)
    y = np.full((1, 1), np.nan, np.float32)
    with rt.emulation():
        mm.gemm("mma", mm.Operand(x, depth, True), mm.Operand(w, depth, True), y, 1, 1, depth)
    exact = 2.0 ** 24 + depth - 1
    assert exact - 64 <= float(y[0, 0]) <= exact, f"float32 sum of depth {depth}: {float(y[0, 0])}, exact {exact}"


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
def test_wgmma_kernel_in_the_emulator(monkeypatch):
    """gemm_wgmma's own loops on the CPU: the producer's and consumers' walk over work items, the
    ring's slots and mbarrier phases (a missed release deadlocks, and the emulator says so), TMA
    coordinates and boxes, the descriptors' addresses, split-K, the epilogue staged through shared
    memory (its named barriers, FLAG_VEC's quads and the element-by-element fallback). The emulator
    does TMA and wgmma by the PTX ISA's definitions (matmul.cu's CUPY_RAW_EMULATOR branch). Two
    "SMs", so that each persistent block walks several work items and the ring wraps across them."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    with rt.emulation():
        x, w, _ = _inputs(np.random.default_rng(10), 16, 64, 128, "bfloat16", bias=False)
        try:
            mm.wgmma.forward({"x": x, "weight": w}, {})
        except KeyError as e:  # the emulator's launcher has no C type for a struct passed by value
            if "TmaDescriptor" not in str(e):
                raise
            pytest.skip("the CPU emulator does not pass struct parameters (TMA descriptors) by value yet: "
                        "backends/cupy_raw/_emulator.py needs E2's change (NOTES-E1-emulator.patch)")
        # K-major / MN-major operands in all three products, 128 x 256 and 128 x 128 tiles, ragged
        # edges, dW's split-K (N = 1024 over one tile); the GELU epilogue; 130 output columns: not
        # FLAG_VEC, the epilogue's element-by-element path (dx and dW, whose rows of 130 TMA cannot
        # describe, go to gemm_mma there)
        _check_against_naive(mm.wgmma, "wgmma (emulated)", "bfloat16",
                             [(16, 64, 128), (520, 64, 520), (1024, 128, 128), (130, 192, 264), (70, 64, 130)],
                             np.random.default_rng(7))
        _check_against_naive(mm.wgmma, "wgmma (emulated)", "float16", [(64, 64, 256)], np.random.default_rng(8),
                             biases=(True,))
        _check_wgmma_gelu(np.random.default_rng(9), 40, "emulated wgmma")



@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("bn, store_cols, stages, buffers", [(256, 256, 3, 1), (256, 128, 4, 1), (128, 64, 4, 1),
                                                        (256, 128, 4, 2), (256, 256, 3, 2)],
                         ids=["256-in-one-pass", "256-in-two-passes", "128-in-two-passes",
                              "256-two-buffers-of-64", "256-two-buffers-of-128"])
def test_wgmma_tma_store_epilogue_in_the_emulator(monkeypatch, bn, store_cols, stages, buffers):
    """The TMA-store epilogues: forward and dx (16-bit: the accumulators rounded into the swizzled
    image, the boxes stored through C's tensor map and clipped at its edges: 520 and 130 rows, 264
    columns, a ragged last tile both ways; several passes of one tile waiting on the last one's
    reads; the bias and GELU), and dW's float32 ones (split-K's slices stored as planes of one map,
    N = 1024 over one tile; the whole product added to the float32 gradient by the reduce-add), and
    the forward with pre (each pass's image filled twice: pre through its own map, then gelu(pre)).
    130 columns (not a multiple of 8) keep the staged epilogue. With two buffers (store_buffers 2,
    dW's too) the passes fill the image's halves in turn: each box must land at its own columns."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    for product in ("forward", "dx"):
        cfg = dict(mm.CONFIGS[("wgmma", product)], bn=bn, store_cols=store_cols, stages=stages, store_buffers=buffers)
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), cfg)
    monkeypatch.setitem(mm.CONFIGS, ("wgmma", "dW"), dict(mm.CONFIGS[("wgmma", "dW")], store_buffers=buffers))
    monkeypatch.setitem(mm.SHAPE_CONFIGS, ("wgmma", "forward", 50304, 768), mm.CONFIGS[("wgmma", "forward")])
    taken = []
    real_kind = mm._tma_store_kind
    monkeypatch.setattr(mm, "_tma_store_kind", lambda *args: taken.append(real_kind(*args)) or taken[-1])
    with rt.emulation():
        _check_against_naive(mm.wgmma, f"wgmma TMA store {bn}/{store_cols} (emulated)", "bfloat16",
                             [(16, 64, 128), (520, 64, 520), (1024, 128, 128), (130, 192, 264), (70, 64, 130)],
                             np.random.default_rng(14))
        _check_wgmma_gelu(np.random.default_rng(15), 72, "emulated TMA store", with_pre=False)
        _check_wgmma_gelu(np.random.default_rng(16), 72, "emulated TMA store, pre and gelu(pre)")
        _check_wgmma_gelu(np.random.default_rng(17), 72, "emulated, GELU without a bias (staged)", bias=False)
    assert {"16bit", "float32", None} <= set(taken), taken  # every epilogue ran


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("bn", [256, 128])
def test_wgmma_clusters_in_the_emulator(monkeypatch, bn):
    """Clusters of two (WG_CLUSTER 2; the emulator runs a cluster's blocks together, each its own
    shared memory): each block multicasts half of the shared B tile into both (K-major: a box of half
    the rows; MN-major, dx: half the 64-wide panels), each consumer warp releases a slot at both
    blocks' empty barriers (a missed or doubled arrival deadlocks, and the emulator says so), the
    cluster barriers at the start and the end. Four "SMs": two clusters, each walking several items;
    520 rows are 5 tile rows, so the last cluster's second block multiplies a row past C (zeros) whose
    stores the TMA clips. The forward and dx products in clusters, dW (split-K) alone."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 4)
    for product in ("forward", "dx"):
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), dict(mm.CONFIGS[("wgmma", product)], bn=bn, cluster=2))
    launched = []
    real_launch = rt.launch
    monkeypatch.setattr(rt, "launch", lambda k, *a, **kw: launched.append(k.defines.get("WG_CLUSTER")) or real_launch(k, *a, **kw))
    with rt.emulation():
        _check_against_naive(mm.wgmma, f"wgmma in clusters of two, bn {bn} (emulated)", "bfloat16",
                             [(16, 64, 128), (520, 64, 520), (130, 192, 264)], np.random.default_rng(18))
    assert 2 in launched


def _check_wgmma_gelu(rng, rows: int, label: str, with_pre: bool = True, bias: bool = True) -> None:
    """wgmma's forward with the GELU epilogue at (rows, 64) x (136, 64): pre (poisoned first, unless
    not `with_pre`) and gelu(pre) against float64."""
    x, w, b = _inputs(rng, rows, 64, 136, "bfloat16", bias=bias)
    pre = np.full((rows, 136), np.nan, dtype=x.dtype) if with_pre else None
    y = mm.wgmma.forward_gelu(x, w, b, out=np.full((rows, 136), np.nan, dtype=x.dtype), pre=pre)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + (b.astype(np.float64) if bias else 0.0)
    if with_pre:
        _close(pre, ref, "bfloat16", "forward", f"{label} pre")
    _close(y, _gelu(ref), "bfloat16", "forward", f"{label} gelu")


def _check_pre_and_gelu_bitwise(rng, rows: int, K: int, M: int, label: str):
    """wgmma's forward with pre (poisoned first) at (rows, K) x (M, K): pre against float64, and
    gelu(pre) bitwise what gelu's kernel makes of the stored pre (the composition's arithmetic)."""
    from backends.cupy_raw import gelu
    x, w, b = _inputs(rng, rows, K, M, "bfloat16")
    pre = np.full((rows, M), np.nan, dtype=x.dtype)
    y = mm.wgmma.forward_gelu(x, w, b, out=np.full((rows, M), np.nan, dtype=x.dtype), pre=pre)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    _close(pre, ref, "bfloat16", "forward", f"{label} pre {rows}x{K}x{M}")
    composed, _ = gelu.forward({"x": pre}, {})
    bad = np.flatnonzero(y.view(np.uint16) != composed.view(np.uint16))
    assert bad.size == 0, (f"{label} {rows}x{K}x{M}: gelu(pre) differs from gelu's kernel at {bad.size} elements, "
                           f"first {np.unravel_index(bad[0], y.shape)}")


def _flagged_gemms(monkeypatch, flag: int) -> list:
    """A list that fills with (kernel, defines) of every GEMM launched with `flag` among its epilogue
    flags (the launches themselves go on as ever)."""
    fused = []
    real_launch = rt.launch

    def launch(k, grid, block, args, shared_mem=0):
        if k.name.startswith("gemm_") and int(args[-1]) & flag:
            fused.append((k.name, dict(k.defines)))
        return real_launch(k, grid, block, args, shared_mem)

    monkeypatch.setattr(rt, "launch", launch)
    return fused


def _check_dx_dgelu_bitwise(impl, rng, N: int, H: int, M: int, label: str) -> None:
    """impl's dx times gelu'(pre) (dgelu_at) of a (N, H) x (M, H) projection with pre random: bitwise
    the composition it replaces (the plain dx, then gelu's backward kernel on its rounded output), and
    against float64."""
    from backends.cupy_raw import gelu
    pre = (rng.standard_normal((N, H)) * 2).astype(_common.np_dtype("bfloat16"))
    h, _ = gelu.forward({"x": pre}, {})
    _, w, b = _inputs(rng, N, H, M, "bfloat16")
    _, saved = impl.forward({"x": h, "weight": w, "bias": b}, {})
    dy = rng.standard_normal((N, M)).astype(pre.dtype)
    grads = {"x": np.full((N, H), np.nan, dtype=pre.dtype), "weight": np.zeros((M, H), np.float32),
             "bias": np.zeros(M, np.float32)}
    dpre = impl.backward(saved, dy, grads, dgelu_at=pre)["x"]
    plain = impl.backward(saved, dy, {"weight": np.zeros((M, H), np.float32), "bias": np.zeros(M, np.float32)})
    composed = gelu.backward(gelu.Saved(pre), plain["x"], {})["x"]
    bad = np.flatnonzero(dpre.view(np.uint16) != composed.view(np.uint16))
    assert bad.size == 0, (f"{label} {N}x{H}x{M}: dx * gelu' differs from the composition at {bad.size} "
                           f"elements, first {np.unravel_index(bad[0], dpre.shape)}")
    ref = (dy.astype(np.float64) @ w.astype(np.float64)) * _gelu_grad(pre.astype(np.float64))
    _close(dpre, ref, "bfloat16", "gradient", f"{label} {N}x{H}x{M} against float64")


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("store_cols, stages, pingpong", [(256, 3, False), (128, 4, False), (256, 4, True)],
                         ids=["all-deferred", "last-pass-deferred", "pingpong"])
def test_wgmma_deferred_gelu_in_the_emulator(monkeypatch, store_cols, stages, pingpong):
    """matmul_gelu's forward through the TMA store (WG_STORE_PRE): the last pass's GELU deferred into
    the next tile's main loop, a step a k-block. Two blocks (two SMs) walk 3 x 2 and 2 x 2 tiles of
    128 x 256, ragged at both edges: main loops longer than the steps (K = 576: 9 k-blocks) and shorter (K = 64:
    the steps finished after the loop), and each block's last tile finished after its items. In the
    pingpong schedule (matmul.CONFIGS, the product's: 64 x 256 tiles a warpgroup, 6 x 2 and 4 x 2 of them)
    nothing is deferred: the epilogue stores pre, then gelu(pre) from the same image. pre must
    match float64, and gelu(pre) must be bitwise gelu's kernel applied to the stored pre (the
    composition's arithmetic)."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    if not pingpong:  # (the product's configuration is the pingpong one: matmul.CONFIGS)
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", "forward_pre"),
                            dict(mm.CONFIGS[("wgmma", "forward_pre")], pingpong=False, bm=128,
                                 store_cols=store_cols, stages=stages))
    modules = []
    real_function = rt.function
    monkeypatch.setattr(rt, "function", lambda name, kernel, defines=None, **kw:
                        modules.append(dict(defines or {})) or real_function(name, kernel, defines, **kw))
    taken = []
    real_kind = mm._tma_store_kind
    monkeypatch.setattr(mm, "_tma_store_kind", lambda *args: taken.append(real_kind(*args)) or taken[-1])
    rng = np.random.default_rng(18)
    with rt.emulation():
        for rows, K, M in [(330, 576, 392), (200, 64, 312)]:
            _check_pre_and_gelu_bitwise(rng, rows, K, M, f"deferred GELU {store_cols}/{stages}")
    assert taken and set(taken) == {"16bit"}, taken
    assert {(d.get("WG_STORE_PRE"), d.get("WG_PINGPONG")) for d in modules if d.get("GEMM_WGMMA")} == {(1, int(pingpong))}


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("epilogue", ["prefetched", "pingpong", "staged", "mma"])
def test_dx_with_the_gelu_backward_in_the_emulator(monkeypatch, epilogue):
    """FLAG_DGELU's kernels on the CPU, bitwise against the composition they replace (the plain dx
    GEMM, then gelu's backward kernel on its rounded output): wgmma's TMA store with pre prefetched
    into the image (WG_STORE_DGELU: two blocks walking 3 x 2 tiles of 128 x 256, so each warpgroup's
    mbarrier goes through several phases; ragged at both edges, boxes wholly outside pre not loaded,
    at 40 rows a warpgroup's whole share; main loops of 9 k-blocks and of one: the cooperative
    schedule), the same in the pingpong schedule (matmul.CONFIGS, the product's: each warpgroup its own
    64 x 256 tiles, 6 x 2 of them, so each block's two warpgroups take several turns and prefetches
    each), wgmma's staged epilogue (store_cols 128: not the whole tile, so not prefetched) and gemm_mma."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    cooperative = dict(mm.CONFIGS[("wgmma", "dx_dgelu")], pingpong=False, bm=128, stages=3)
    if epilogue in ("prefetched", "staged"):
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", "dx_dgelu"),
                            dict(cooperative, store_cols=128) if epilogue == "staged" else cooperative)
    impl = mm.tiled if epilogue == "mma" else mm.wgmma
    fused = _flagged_gemms(monkeypatch, mm.FLAG_DGELU)
    rng = np.random.default_rng(19)
    with rt.emulation():
        for N, H, M in [(330, 392, 576), (200, 312, 64), (40, 136, 64)]:
            _check_dx_dgelu_bitwise(impl, rng, N, H, M, epilogue)
    kinds = {(name, d.get("WG_STORE_DGELU"), d.get("WG_STORE_COLS"), d.get("WG_PINGPONG")) for name, d in fused}
    assert kinds == {"prefetched": {("gemm_wgmma", 1, 256, 0)}, "pingpong": {("gemm_wgmma", 1, 256, 1)},
                     "staged": {("gemm_wgmma", 0, 0, 0)}, "mma": {("gemm_mma", None, None, None)}}[epilogue], kinds


def _check_residual_bitwise(impl, rng, N: int, K: int, M: int, dtype: str, label: str) -> None:
    """impl's forward_residual of a (N, K) x (M, K) projection, with a bias and without, into a poisoned
    output: bitwise the composition it replaces (impl's plain forward, then residual's kernel adding
    its stored product to the stream), and against float64."""
    from backends.cupy_raw import residual
    for with_bias in (True, False):
        x, w, b = _inputs(rng, N, K, M, dtype)
        b = b if with_bias else None
        stream = (rng.standard_normal((N, M)) * 3).astype(x.dtype)
        y, saved = impl.forward_residual(x, w, b, stream, out=np.full((N, M), np.nan, dtype=x.dtype))
        assert saved.x is x and saved.weight is w and saved.bias is b
        plain, _ = impl.forward({"x": x, "weight": w, "bias": b}, {})
        composed, _ = residual.forward({"a": stream, "b": plain}, {})
        bits = np.uint16 if x.dtype.itemsize == 2 else np.uint32
        bad = np.flatnonzero(y.view(bits) != composed.view(bits))
        assert bad.size == 0, (f"{label} {N}x{K}x{M} bias={with_bias}: the residual epilogue differs from the "
                               f"composition at {bad.size} elements, first {np.unravel_index(bad[0], y.shape)}")
        ref = stream.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64).T
        ref += b.astype(np.float64) if b is not None else 0.0
        _close(y, ref, dtype, "forward", f"{label} {N}x{K}x{M} bias={with_bias} against float64")


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("epilogue", ["prefetched", "pingpong", "staged", "mma", "simt"])
def test_residual_epilogue_in_the_emulator(monkeypatch, epilogue):
    """FLAG_RESIDUAL's kernels on the CPU (matmul_residual's forward, mlp's projection), bitwise against
    matmul then residual: wgmma's TMA store with the stream prefetched into the image (WG_STORE_RESIDUAL,
    the product's configuration: two blocks walking 3 x 2 tiles of 128 x 256, so each warpgroup's
    mbarrier goes through several phases; ragged at both edges, boxes wholly outside the stream not
    loaded, at 40 rows a warpgroup's whole share; main loops of 9 k-blocks and of one), the same in the
    pingpong schedule (64 x 256 tiles a warpgroup), wgmma's staged epilogue (store_cols 128: not the
    whole tile, so not prefetched), gemm_mma, and gemm_simt (float32)."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    base = mm.CONFIGS[("wgmma", "forward_residual")]
    changes = {"pingpong": dict(base, pingpong=True, bm=64, stages=4), "staged": dict(base, store_cols=128)}
    if epilogue in changes:
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", "forward_residual"), changes[epilogue])
    impl = mm.tiled if epilogue == "mma" else mm.wgmma
    fused = _flagged_gemms(monkeypatch, mm.FLAG_RESIDUAL)
    rng = np.random.default_rng(23)
    dtype = "float32" if epilogue == "simt" else "bfloat16"
    with rt.emulation():
        for N, K, M in [(330, 576, 392), (200, 64, 312), (40, 136, 64)]:
            _check_residual_bitwise(impl, rng, N, K, M, dtype, epilogue)
    kinds = {(name, d.get("WG_STORE_RESIDUAL"), d.get("WG_STORE_COLS"), d.get("WG_PINGPONG")) for name, d in fused}
    assert kinds == {"prefetched": {("gemm_wgmma", 1, 256, 0)}, "pingpong": {("gemm_wgmma", 1, 256, 1)},
                     "staged": {("gemm_wgmma", 0, 0, 0)}, "mma": {("gemm_mma", None, None, None)},
                     "simt": {("gemm_simt", None, None, None)}}[epilogue], kinds


def test_the_residual_epilogue_is_refused_where_it_cannot_run(model):
    """Bad residual inputs are refused before any launch, naming what was wrong; cuBLASLt has no such
    epilogue here (its C + D form would round once, not as the composition)."""
    rng = np.random.default_rng(5)
    x, w, b = _inputs(rng, 16, 64, 32, "bfloat16")
    launched = len(model.kernels)
    for bad in (np.zeros((16, 31), x.dtype), np.zeros((16, 32), np.float32)):
        with pytest.raises(ValueError, match="residual must be"):
            mm.wgmma.forward_residual(x, w, b, bad)
    with pytest.raises(ValueError, match="cublaslt: no residual epilogue"):
        mm.cublaslt.forward_residual(x, w, b, np.zeros((16, 32), x.dtype))
    with pytest.raises(ValueError, match="two epilogues"):
        mm.gemm("wgmma", mm.Operand(x, 64, True), mm.Operand(w, 64, True), np.empty((16, 32), x.dtype), 16, 32, 64,
                dgelu_at=np.zeros((16, 32), x.dtype), residual=np.zeros((16, 32), x.dtype))
    assert len(model.kernels) == launched, "a refused call launched a kernel"


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("bm, bn, stages", [(64, 256, 3), (128, 128, 5)], ids=["64x256", "128x128"])
def test_wgmma_pingpong_in_the_emulator(monkeypatch, bm, bn, stages):
    """The pingpong schedule (each consumer warpgroup its own items, turns at the tensor cores by
    named barriers 3 and 4) on the CPU, every product: blocks with one item, an odd and an even
    number of items (the turns must balance: a missing or extra arrival deadlocks the next block,
    and the emulator says so), the ring wrapping across items each warpgroup steps over, dW's
    split-K and row sums (64-row tiles there: bn 128), ragged edges, the GELU epilogue."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    for product in ("forward", "dx", "dW"):
        base = mm.CONFIGS[("wgmma", product)]
        cfg = dict(base, pingpong=True, bm=bm if product != "dW" else 64, bn=bn if product != "dW" else 128,
                   stages=stages)
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), cfg)
    # matmul_gelu's forward too: pre's TMA-store epilogue is the cooperative one, so the staged one here
    monkeypatch.setitem(mm.CONFIGS, ("wgmma", "forward_pre"), mm.CONFIGS[("wgmma", "forward")])
    with rt.emulation():
        _check_against_naive(mm.wgmma, f"wgmma pingpong {bm}x{bn} (emulated)", "bfloat16",
                             [(16, 64, 128), (520, 64, 520), (1024, 128, 128), (130, 192, 264)],
                             np.random.default_rng(11))
        _check_wgmma_gelu(np.random.default_rng(12), 200, "emulated pingpong")


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
def test_wgmma_pingpong_clusters_in_the_emulator(monkeypatch):
    """The pingpong schedule in clusters of two (WG_PINGPONG and WG_CLUSTER 2): the blocks'
    warpgroups of one parity take a pair's item together, so a slot is released by one warpgroup of
    each block (8 warp arrivals at each block's barrier: one missed or doubled deadlocks, and the
    emulator says so) while the other warpgroups step over it. Four "SMs" (two clusters walking
    several items each, turns taken in both blocks), 64-row tiles: 330 and 200 rows are 6 and 4 tile
    rows, 40 rows one (the cluster's second block multiplies rows past C whose stores the TMA clips).
    The plain forward and dx against float64; the two GELU epilogues of the product's own
    configuration (matmul.CONFIGS, pingpong) in clusters: matmul_gelu's pre and gelu(pre) (gelu(pre)
    bitwise gelu's kernel on the stored pre) and dx * gelu'(pre) with pre prefetched into the image
    (bitwise the composition it replaces)."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 4)
    for product in ("forward", "dx"):
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), dict(mm.PINGPONG_CONFIGS[product], store_cols=256,
                                                                 stages=4, cluster=2))
    for product in ("forward_pre", "dx_dgelu"):
        assert mm.CONFIGS[("wgmma", product)]["pingpong"]
        monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), dict(mm.CONFIGS[("wgmma", product)], cluster=2))
    launched = []
    real_launch = rt.launch
    monkeypatch.setattr(rt, "launch", lambda k, *a, **kw: launched.append(
        (k.defines.get("WG_PINGPONG"), k.defines.get("WG_CLUSTER"), k.defines.get("WG_STORE_PRE"),
         k.defines.get("WG_STORE_DGELU"))) or real_launch(k, *a, **kw))
    rng = np.random.default_rng(20)
    with rt.emulation():
        _check_against_naive(mm.wgmma, "wgmma pingpong in clusters of two (emulated)", "bfloat16",
                             [(40, 64, 264), (330, 128, 520)], rng)
        for N, H, M in [(330, 392, 576), (200, 312, 64), (40, 136, 64)]:
            _check_pre_and_gelu_bitwise(rng, N, M, H, "pingpong clusters")
            _check_dx_dgelu_bitwise(mm.wgmma, rng, N, H, M, "pingpong clusters")
    assert {(1, 2, 0, 0), (1, 2, 1, 0), (1, 2, 0, 1)} <= set(launched), launched


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
@pytest.mark.parametrize("option, change, products, define, value", [
    ("bias from shared memory", {"bias_smem": True}, ("forward", "forward_pre"), "WG_BIAS_SMEM", 1),
    ("pre and gelu(pre) in two buffers", {"store_buffers": 2}, ("forward_pre",), "WG_STORE_BUFFERS", 2),
])
def test_wgmma_epilogue_options_in_the_emulator(monkeypatch, option, change, products, define, value):
    """Epilogue options that change where the TMA-store epilogue stages things, not its arithmetic, so
    their results are bitwise the default configuration's: bias_smem (WG_BIAS_SMEM: each thread's pair
    of the tile's bias, loaded before the main loop, put into the warpgroup's 512 bytes of shared
    memory), at the forward (cooperative, two passes) and matmul_gelu's forward (pingpong, pre and
    gelu(pre)); and matmul_gelu's pingpong forward with its image as two buffers (pre into one while
    the copy engine reads gelu(pre) of the pass before from the other: four fills a tile, so the next
    tile starts in the other buffer). Two blocks walking several tiles each (a stale bias copy gives
    the last tile's bias; a fill into the wrong buffer or columns stores the wrong pass), ragged rows and
    columns. (The emulator's TMA stores complete at once, so whether a buffer is refilled only after
    the copy engine has read it is the GPU's to show.)"""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 2)
    launched = []
    real_launch = rt.launch
    monkeypatch.setattr(rt, "launch", lambda k, *a, **kw: launched.append((k.defines.get("WG_STORE_PRE"), k.defines.get(define)))
                        or real_launch(k, *a, **kw))
    results = {}
    with rt.emulation():
        for on in (False, True):
            for product in products:
                monkeypatch.setitem(mm.CONFIGS, ("wgmma", product), {**mm.CONFIGS[("wgmma", product)], **(change if on else {})})
            launched.clear()
            x, w, b = _inputs(np.random.default_rng(22), 330, 128, 776, "bfloat16")
            y, _ = mm.wgmma.forward({"x": x, "weight": w, "bias": b}, {})
            pre = np.full((330, 776), np.nan, dtype=x.dtype)
            h = mm.wgmma.forward_gelu(x, w, b, out=np.full((330, 776), np.nan, dtype=x.dtype), pre=pre)
            results[on] = (y, pre, h)
            with_option = {(store_pre, v) for store_pre, v in launched if v == value}
            assert bool(with_option) == on and (not on or {(1, value)} <= with_option), (option, launched)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    _close(results[True][0], ref, "bfloat16", "forward", option)
    for got, want, what in zip(results[True], results[False], ("y", "pre", "gelu(pre)")):
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (option, what)


@pytest.mark.skipif(_emulator.unavailable_reason() is not None, reason=str(_emulator.unavailable_reason()))
def test_wgmma_split_k_in_order_in_the_emulator(monkeypatch):
    """dW's split-K in order (CONFIGS' serial, matmul.cu's FLAG_SERIAL): each k slice adds itself to the
    float32 gradient by the copy engine's reduce-add once the slices before it have (a counter per
    64-row share of C: chain_wait, chain_release), so no splitk_finish. Bitwise the old gradient plus
    the slices one after another in slice order, the slices being exactly what the planes path
    (serial off) hands splitk_finish. 200 rows: the last tile's second 64-row share lies wholly
    outside C (its counter exists, its boxes write nothing). In the emulator, which runs one block
    after another, each work item gets its own block (a persistent block would wait for an item of
    a block that has not run, and the emulator would report the wait that never ends). Three "SMs":
    two tiles of dW take three slices, six items, which a persistent grid would walk in two waves.
    The counters are made zeroed once and left at zero by every call (the last slice resets its
    share's): a second call takes the same ones, with no memset, and adds the same bits."""
    monkeypatch.setattr(_common, "num_sms", lambda xp: 3)
    planes, launches = [], []
    real_finish, real_launch = mm._finish, rt.launch
    monkeypatch.setattr(mm, "_finish", lambda partial, *a: planes.append(partial.copy()) or real_finish(partial, *a))
    monkeypatch.setattr(rt, "launch", lambda k, grid, *a, **kw: launches.append((k.name, grid, k.defines, a))
                        or real_launch(k, grid, *a, **kw))
    monkeypatch.setattr(mm, "_CHAINS", {})
    rng = np.random.default_rng(23)
    N, K, M = 2048, 136, 200
    x, w, _ = _inputs(rng, N, K, M, "bfloat16", bias=False)
    dy = rng.standard_normal((N, M)).astype(x.dtype)
    start = rng.standard_normal((M, K)).astype(np.float32)
    dw = {}
    with rt.emulation():
        _, saved = mm.wgmma.forward({"x": x, "weight": w}, {})
        for serial in (False, True):
            monkeypatch.setitem(mm.CONFIGS, ("wgmma", "dW"), dict(mm.CONFIGS[("wgmma", "dW")], serial=serial))
            launches.clear()
            grads = {"x": np.full((N, K), np.nan, dtype=x.dtype), "weight": start.copy()}
            dw[serial] = mm.wgmma.backward(saved, dy, grads)["weight"]
            names = [name for name, _, _, _ in launches]
            assert ("splitk_finish" in names) != serial, names
        (counters,) = mm._CHAINS.values()
        assert not counters.any(), counters  # every share's last slice set its counter back to 0
        launches.clear()
        again = mm.wgmma.backward(saved, dy, {"x": np.full((N, K), np.nan, dtype=x.dtype), "weight": start.copy()})
        assert np.array_equal(again["weight"].view(np.uint32), dw[True].view(np.uint32))
        (dw_args,) = [args for name, _, d, args in launches if name == "gemm_wgmma" and not d["A_KMAJOR"]]
        assert any(arg is counters for arg in dw_args[1]), "the second call made new counters"
        assert list(mm._CHAINS.values()) == [counters] and not counters.any()
    (slice_planes,) = planes  # the planes path's one splitk_finish: (slices, rows, cols)
    slices = slice_planes.shape[0]
    assert slices >= 3, slices
    tiles = rt.cdiv(M, 128) * rt.cdiv(K, 256)
    (dw_grid,) = [grid for name, grid, d, _ in launches if name == "gemm_wgmma" and not d["A_KMAJOR"]]
    assert dw_grid[0] == tiles * slices > 3, dw_grid  # one block an item (a persistent grid: 3)
    want = start.copy()
    for s in slice_planes:
        want += s
    assert np.array_equal(dw[True].view(np.uint32), want.view(np.uint32))
    ref = start.astype(np.float64) + dy.astype(np.float64).T @ x.astype(np.float64)
    _close(dw[True], ref, "bfloat16", "gradient", "dW split-K in order (emulated)")


def test_pingpong_needs_a_persistent_grid(model):
    x, w, _ = _inputs(np.random.default_rng(13), 64, 64, 64, "bfloat16", bias=False)
    y = np.empty((64, 64), dtype=x.dtype)
    for bad in (dict(persistent=False), dict(bm=256)):
        cfg = {**mm.CONFIGS[("wgmma", "forward")], "pingpong": True, "bm": 64, **bad}
        with pytest.raises(ValueError, match="pingpong|bm="):
            mm.gemm("wgmma", mm.Operand(x, 64, True), mm.Operand(w, 64, True), y, 64, 64, 64, config=cfg)


@pytest.mark.parametrize("kmajor_b", [True, False], ids=["forward", "dx"])
def test_wgmma_clusters_host_side(model, kmajor_b):
    """Clusters of two (TMA multicast of the shared B tile; matmul.cu's WG_CLUSTER), the host side:
    the module, B's tensor map cut for the cluster's shares, a grid of whole clusters over their items
    (the kernel model checks it: 5 tile rows are 3 cluster rows, the last cluster's second block a row
    past C), and the product the model computes from those arguments; a C that only the staged
    epilogue can write (36 columns) runs alone."""
    rows, depth, cols = 4 * 128 + 5, 192, 384  # 5 tile rows, 2 tile columns at bn 256
    rng = np.random.default_rng(21)
    bf16 = _common.np_dtype("bfloat16")
    x = rng.standard_normal((rows, depth)).astype(bf16)
    cfg = {**mm.CONFIGS[("wgmma", "forward")], "cluster": 2}
    for width, clustered in ((cols, 2), (36, None)):
        # (MN-major: rows of 40, so that TMA can still read B where only 36 of its columns are C's)
        w = rng.standard_normal((width, depth) if kmajor_b else (depth, 40 if width == 36 else width)).astype(bf16)
        b = mm.Operand(w, depth, True) if kmajor_b else mm.Operand(w, w.shape[1], False)
        y = np.full((rows, width), np.nan, dtype=bf16)
        model.kernels.clear()
        model.maps.clear()
        mm.gemm("wgmma", mm.Operand(x, depth, True), b, y, rows, width, depth, config=cfg)
        (name, defines), = model.kernels
        assert name == "gemm_wgmma" and defines.get("WG_CLUSTER") == clustered
        if kmajor_b and clustered:  # B's map: boxes of 128 of the tile's 256 rows
            assert model.maps[1][4:] == (64, 128)
        ref = x.astype(np.float64) @ (w.astype(np.float64).T if kmajor_b else w[:, :width].astype(np.float64))
        _close(y, ref, "bfloat16", "forward", f"wgmma, cluster {clustered}, {width} columns")


def test_wgmma_cluster_configurations_are_checked(model):
    x, w, _ = _inputs(np.random.default_rng(13), 64, 64, 256, "bfloat16", bias=False)
    y = np.empty((64, 256), dtype=x.dtype)
    for bad in (dict(cluster=3), dict(cluster=2, persistent=False), dict(cluster=2, store_cols=0),
                dict(cluster=2, pingpong=True, bm=64, store_cols=0)):
        cfg = {**mm.CONFIGS[("wgmma", "forward")], **bad}
        with pytest.raises(ValueError, match="cluster="):
            mm.gemm("wgmma", mm.Operand(x, 64, True), mm.Operand(w, 64, True), y, 64, 256, 64, config=cfg)


def test_tma_store_configurations_are_checked(model):
    # store_cols: whole boxes that divide the tile; 16-bit C goes out in boxes of 64 columns
    x, w, _ = _inputs(np.random.default_rng(13), 64, 64, 128, "bfloat16", bias=False)
    y = np.empty((64, 128), dtype=x.dtype)
    # (store_buffers: 1 or 2, each buffer of whole boxes)
    for store_cols, buffers, match in ((48, 1, "whole boxes"), (96, 1, "whole boxes"), (32, 1, "boxes of 64 columns"),
                                       (128, 3, "store_buffers=3: 1 or 2"), (64, 2, "in 2 buffer.*boxes of 64 columns")):
        cfg = {**mm.CONFIGS[("wgmma", "forward")], "store_cols": store_cols, "bn": 128, "store_buffers": buffers}
        with pytest.raises(ValueError, match=match):
            mm.gemm("wgmma", mm.Operand(x, 64, True), mm.Operand(w, 64, True), y, 64, 128, 64, config=cfg)
    # a forward split along k writes float32 slices, whose image would not fit beside its 4-deep
    # ring at bn 256: the staged epilogue takes them (no error), and splitk_finish adds them
    cfg = {**mm.CONFIGS[("wgmma", "forward")], "split_k": 4}
    assert mm.wgmma_shared_bytes(cfg["bn"], cfg["stages"], 128, cfg["store_cols"], True) > rt.MAX_SHARED_PER_BLOCK
    x, w, _ = _inputs(np.random.default_rng(13), 64, 2048, 128, "bfloat16", bias=False)
    model.kernels.clear()
    mm.gemm("wgmma", mm.Operand(x, 2048, True), mm.Operand(w, 2048, True), y, 64, 128, 2048, config=cfg)
    assert [(name, d.get("WG_STORE_COLS")) for name, d in model.kernels] == [("gemm_wgmma", 0), ("splitk_finish", None)]
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    _close(y, ref, "bfloat16", "forward", "split-K forward")


def test_tensor_maps_of_planes_refuse_what_tma_cannot_describe():
    with pytest.raises(ValueError, match="stride must be a multiple of 16 bytes"):
        _tma.tiled_planes(np.zeros((2, 5, 6), dtype=np.float32), 2, 5, 6, 32, 64)  # rows of 24 bytes
    _tma.tiled_planes(np.zeros((3, 70, 36), dtype=np.float32), 3, 70, 36, 32, 64)  # rows of 144 bytes: fine


def _kernels_of(model, variant, N, K, M, dtype="bfloat16"):
    x, w, b = _inputs(np.random.default_rng(2), N, K, M, dtype)
    y, saved = VARIANTS[variant].forward({"x": x, "weight": w, "bias": b}, {})
    model.kernels.clear()
    VARIANTS[variant].backward(saved, np.ones_like(y), {"weight": np.zeros_like(w, dtype=np.float32),
                                                        "bias": np.zeros_like(b, dtype=np.float32)})
    return [name for name, _ in model.kernels]


def test_each_variant_runs_the_kernels_it_says(model):
    # GPT-2's attention projection at N=4096: wgmma for all three products, dW split along k, db's
    # row sums fused into dW's kernel (their slices added by colsum_finish); its 18 tiles are too few
    # for the in-order adds (SERIAL_SLICES_A_WAVE), so splitk_finish adds the slices; c_fc's 72 tiles
    # add theirs in the kernel
    assert _kernels_of(model, "wgmma", 4096, 768, 768) == ["gemm_wgmma", "gemm_wgmma", "splitk_finish",
                                                           "colsum_finish"]
    assert _kernels_of(model, "wgmma", 4096, 768, 3072) == ["gemm_wgmma", "gemm_wgmma", "colsum_finish"]
    assert _kernels_of(model, "tiled", 4096, 768, 768)[:3] == ["gemm_mma", "gemm_mma", "splitk_finish"]
    # K = 37: rows not 16-byte aligned, so no TMA: wgmma falls back to the element-wise gemm_mma
    assert _kernels_of(model, "wgmma", 64, 37, 64)[:2] == ["gemm_mma", "gemm_mma"]
    assert all(d["ALIGNED"] == 0 for name, d in model.kernels if name == "gemm_mma")
    assert _kernels_of(model, "tiled", 64, 40, 64, "float32")[:2] == ["gemm_simt", "gemm_simt"]
    assert _kernels_of(model, "cublaslt", 64, 40, 64) == ["colsum_partial", "colsum_finish"]


def test_wgmma_is_the_backends_default_matmul():
    # the first variant listed is the default (plugin.py): the Hopper GEMM, not the mma.sync one
    # (tiled, 0.33-0.53x cuBLASLt, was first until 253b27c and so was what --backend cupy_raw trained with)
    from euler_core.registry import get_registry
    assert [v.name for v in get_registry().backend("cupy_raw").variants_of("matmul")][0] == "wgmma"


def test_cupy_raw_takes_its_mlp_where_its_primitives_are_its_own():
    # cupy_raw's mlp (FLAG_DGELU's op) measured faster in the B=64 and B=16 steps than matmul_gelu +
    # matmul (reports/train-h200/c8e250b), so --backend cupy_raw takes it, the cooperative variant first
    # (test_selection.py: a fused op that is not opt-in is taken where its primitives' backend offers it)
    from euler_core.registry import get_registry
    variants = get_registry().backend("cupy_raw").variants_of("mlp")
    assert [v.name for v in variants] == ["epilogues"] and not variants[0].opt_in


def test_a_wgmma_configuration_does_not_reach_the_mma_fallback():
    # config= names one engine's launch: where TMA cannot describe an operand (K = 20: 40-byte rows)
    # gemm(engine="wgmma") falls back to gemm_mma, which must take its own product configuration
    rng = np.random.default_rng(3)
    x, w, _ = _inputs(rng, 64, 20, 48, "bfloat16", bias=False)
    with rt.recording() as rec:
        mm.gemm("wgmma", mm.Operand(x, 20, True), mm.Operand(w, 20, True), np.empty((64, 48), x.dtype), 64, 48, 20,
                config=mm.PINGPONG_CONFIGS["forward"])
    assert [launch.kernel for launch in rec] == ["gemm_mma"]
    assert mm._config("mma", "forward", (), mm.PINGPONG_CONFIGS["forward"]) == mm.CONFIGS[("mma", "forward")]


def test_split_k_slices():
    cfg = mm.CONFIGS[("wgmma", "dW")]
    # attn_proj's dW at 16384 rows: 36 tiles of 128 x 128 on 264 slots; slices of whole 64-deep tiles
    k_split = mm._split(cfg, 36, 16384, 132)
    slices = rt.cdiv(16384, k_split)
    assert k_split % 64 == 0 and 1 < slices <= cfg["split_k"]
    assert 36 * slices / (264 * rt.cdiv(36 * slices, 264)) >= cfg["busy"]
    assert mm._split(mm.CONFIGS[("wgmma", "forward")], 2304, 768, 132) == 768   # enough tiles: one slice
    assert mm._split(cfg, 1, 100, 132) == 128                                    # never below 512 deep per slice


def test_tensor_maps_refuse_what_tma_cannot_describe():
    a = np.zeros((64, 40), dtype=np.float16)
    with pytest.raises(ValueError, match="stride must be a multiple of 16 bytes"):
        _tma.tiled_2d(np.zeros((64, 37), dtype=np.float16), 64, 37, 37, 64, 64)
    with pytest.raises(ValueError, match="box"):
        _tma.tiled_2d(a, 64, 40, 40, 128, 64)    # 256 bytes: wider than the 128-byte swizzle
    with pytest.raises(ValueError, match="16-byte boundary"):
        _tma.tiled_2d(np.zeros(2600, dtype=np.float16)[1:2561].reshape(64, 40), 64, 40, 40, 64, 64)
    with pytest.raises(ValueError, match="dtype"):
        _tma.tiled_2d(np.zeros((64, 40), dtype=np.float64), 64, 40, 40, 64, 64)
    assert _tma.tiled_2d(a, 64, 40, 40, 64, 64).data == bytes(128)  # recording: checked, not encoded
    # the attention kernels' maps: (B, T, columns) planes, and rows of floats in packed boxes
    qkv = np.zeros((2, 100, 192), dtype=np.float16)
    assert _tma.tiled(qkv, (192, 100, 2), (192, 100 * 192), (64, 64, 1)).data == bytes(128)
    with pytest.raises(ValueError, match="one plane at a time"):
        _tma.tiled(qkv, (192, 100, 2), (192, 100 * 192), (64, 64, 2))
    with pytest.raises(ValueError, match="span of the dimensions inside it"):
        _tma.tiled(qkv, (192, 100, 2), (192, 99 * 192), (64, 64, 1))   # planes overlap
    with pytest.raises(ValueError, match="reach element"):
        _tma.tiled(qkv, (192, 100, 3), (192, 100 * 192), (64, 64, 1))  # a plane past the array
    with pytest.raises(ValueError, match="as many extents"):
        _tma.tiled(qkv, (192, 100, 2), (192,), (64, 64, 1))
    lse = np.zeros((24, 260), dtype=np.float32)
    assert _tma.tiled(lse, (257, 24), (260,), (64, 1), swizzle=False).data == bytes(128)  # 256-byte boxes, packed
    with pytest.raises(ValueError, match="exactly 128"):
        _tma.tiled(lse, (257, 24), (260,), (64, 1))                                     # swizzled rows are 128 bytes
    with pytest.raises(ValueError, match="stride must be a multiple of 16 bytes"):
        _tma.tiled(lse, (257, 24), (257,), (64, 1), swizzle=False)                      # rows must start on 16 bytes


def test_bad_inputs_are_refused_before_any_launch(model):
    x, w, b = _inputs(np.random.default_rng(3), 4, 8, 6, "float16")
    with pytest.raises(TypeError, match="weight"):
        mm.tiled.forward({"x": x, "weight": w.astype(np.float32)}, {})
    with pytest.raises(ValueError, match="K"):
        mm.wgmma.forward({"x": x, "weight": w[:, :-1].copy()}, {})
    with pytest.raises(ValueError, match="cublaslt"):
        mm.cublaslt.forward_gelu(x, w, b)
    y, saved = mm.tiled.forward({"x": x, "weight": w, "bias": b}, {})
    with pytest.raises(TypeError, match="grads\\['weight'\\]"):
        mm.tiled.backward(saved, np.ones_like(y), {"weight": np.zeros((6, 8), dtype=np.float64), "bias": b.copy()})
    assert not model.kernels[1:]  # nothing launched after the forward


# ---- 3. every module the launchers use compiles -------------------------------------------------
#: GPT-2 124M's linear layers (out, in) and the awkward test shapes, each dtype
_COMPILE_SHAPES = [(4096, 768, 2304), (4096, 768, 768), (4096, 768, 3072), (4096, 3072, 768), (1024, 768, 50304),
                   (17, 36, 20), (64, 40, 64)]


@contextlib.contextmanager
def _configs(changes: dict):
    """matmul's CONFIGS with `changes` while inside."""
    saved = dict(mm.CONFIGS)
    mm.CONFIGS.update(changes)
    try:
        yield
    finally:
        mm.CONFIGS.clear()
        mm.CONFIGS.update(saved)


def _used_modules(model) -> dict:
    modules = {}
    for variant in ("tiled", "wgmma"):
        for dtype in ("float32", "float16", "bfloat16"):
            for N, K, M in _COMPILE_SHAPES:
                x, w, b = _inputs(np.random.default_rng(4), N, K, M, dtype)
                y, saved = VARIANTS[variant].forward({"x": x, "weight": w, "bias": b}, {})
                VARIANTS[variant].backward(saved, y, {"weight": np.zeros(w.shape, np.float32),
                                                      "bias": np.zeros(b.shape, np.float32)})
                if N * K < 1e5:
                    VARIANTS[variant].forward_gelu(x, w, b, pre=np.empty_like(y))
    def gelu_products():
        # matmul_gelu's forward at c_fc's shape: pre and gelu(pre) through the TMA store (WG_STORE_PRE)
        x, w, b = _inputs(np.random.default_rng(4), 256, 768, 3072, "bfloat16")
        mm.wgmma.forward_gelu(x, w, b, pre=np.empty((256, 3072), x.dtype))
        # the MLP projection's dx times gelu'(pre) (mlp.py): pre prefetched into the TMA store's image (WG_STORE_DGELU)
        x, w, b = _inputs(np.random.default_rng(4), 256, 3072, 768, "bfloat16")
        _, saved = mm.wgmma.forward({"x": x, "weight": w, "bias": b}, {})
        mm.wgmma.backward(saved, np.ones((256, 768), x.dtype), {"weight": np.zeros(w.shape, np.float32),
                                                               "bias": np.zeros(b.shape, np.float32)}, dgelu_at=x)

    def linear_products():  # forward, dx and dW at GPT-2's shapes, bf16
        for N, K, M in _COMPILE_SHAPES[:5]:
            x, w, b = _inputs(np.random.default_rng(4), N, K, M, "bfloat16")
            y, saved = mm.wgmma.forward({"x": x, "weight": w, "bias": b}, {})
            mm.wgmma.backward(saved, y, {"weight": np.zeros(w.shape, np.float32), "bias": np.zeros(b.shape, np.float32)})

    def residual_products():
        # matmul_residual's forward and mlp's projection at attn_proj's and fc_proj's shapes: the stream
        # prefetched into the TMA store's image (WG_STORE_RESIDUAL), with the bias and without
        for K in (768, 3072):
            x, w, b = _inputs(np.random.default_rng(4), 256, K, 768, "bfloat16")
            for bias in (b, None):
                mm.wgmma.forward_residual(x, w, bias, np.zeros((256, 768), x.dtype))

    gelu_products()
    residual_products()
    # the pingpong schedule's residual module (the probe's)
    with _configs({("wgmma", "forward_residual"): dict(mm.CONFIGS[("wgmma", "forward_residual")], pingpong=True,
                                                        bm=64, stages=4)}):
        residual_products()
    # the clustered modules (TMA multicast; the probe's): forward and dx, and the GELU epilogues (pingpong)
    with _configs({("wgmma", p): dict(mm.CONFIGS[("wgmma", p)], cluster=2) for p in ("forward", "dx")}):
        linear_products()
    with _configs({("wgmma", p): dict(mm.CONFIGS[("wgmma", p)], cluster=2) for p in ("forward_pre", "dx_dgelu")}):
        gelu_products()
    # the pingpong schedule's modules too (the probe's)
    with _configs({("wgmma", product): cfg for product, cfg in mm.PINGPONG_CONFIGS.items()}):
        linear_products()
    # the bias from shared memory (the probe's bias_smem)
    with _configs({("wgmma", p): dict(mm.CONFIGS[("wgmma", p)], bias_smem=True) for p in ("forward", "forward_pre")}):
        linear_products()
        gelu_products()
    # matmul_gelu's pre and gelu(pre) through a two-buffer image (the probe's store_double at fc_fwd_pre)
    with _configs({("wgmma", "forward_pre"): dict(mm.CONFIGS[("wgmma", "forward_pre")], store_buffers=2)}):
        gelu_products()
    for name, defines in model.kernels:
        key = tuple(sorted(defines.items()))
        modules[key] = "sm_90a" if "GEMM_WGMMA" in defines else "sm_90"
    return modules


def _compiler_for(defines: dict) -> str | None:
    """How a module is compiled here, or None to leave it out (fp16 differs from bf16 only in the
    type named in the mma / wgmma instruction: one layout of it is enough). nvcc (with ptxas's
    register and spill report) for the GEMMs' fast paths, NVRTC with RawModule's own options for
    the rest; GEMM_WGMMA needs sm_90a."""
    if defines["floatX"] == "__half":
        return "nvrtc" if defines.get("A_KMAJOR", 1) and defines.get("B_KMAJOR", 1) else None
    if "GEMM_WGMMA" in defines or ("GEMM_MMA" in defines and defines["ALIGNED"]):
        return "nvcc"
    return "nvrtc"


@needs_nvcc
def test_every_module_compiles_for_sm90(model):
    model.compute = False  # only which modules are launched matters here (GPT-2's shapes in float64: ~1 min)
    modules = _used_modules(model)
    groups = {k for key in modules for k, _ in key if k.startswith("GEMM_")}
    assert groups == {"GEMM_SIMT", "GEMM_MMA", "GEMM_WGMMA", "GEMM_REDUCE"}
    todo = [(dict(key), arch, _compiler_for(dict(key))) for key, arch in modules.items()]

    def build(item):
        defines, arch, compiler = item
        return defines, rt.compile_check("matmul", defines, arch=arch, compiler=compiler)

    # nvcc runs as a subprocess, two at a time; NVRTC in this thread (two NVRTC compiles in threads of
    # one process have failed here to open libnvrtc-builtins)
    with ThreadPoolExecutor(2) as pool:
        by_nvcc = pool.map(build, [t for t in todo if t[2] == "nvcc"])
        done = [build(t) for t in todo if t[2] == "nvrtc"]
        for defines, resources in done + list(by_nvcc):
            for kernel, res in resources.items():  # nvcc's ptxas report: the fast paths do not spill
                # (but gemm_wgmma at WG_BN 256: 128 accumulators + the epilogue's pointers at 168
                # registers, 8 bytes, in the epilogue: with it replaced by a plain store there are none)
                allowed = 8 if defines.get("WG_BN") == 256 else 0
                assert res.spill_bytes <= allowed, (kernel, defines, res)
                # and ptxas keeps the wgmma pipeline (no C7520: a run-time branch inside the wgmma
                # batch, as the row sums once were, made it serialise every wgmma of gemm_wgmma)
                assert not res.wgmma_serialized, (kernel, defines, res)
