"""Where gemm_wgmma's time per output tile goes: variants of it at three GPT-2 products, beside cuBLASLt.

    python3 bench/tune/cupy_raw_wgmma_probe.py --out $OUT/probe.json     # the H200, ~60 s
    python3 bench/tune/cupy_raw_wgmma_probe.py --dry                     # the CPU: plan, compile, emulate

Products (bf16, N = 16384), chosen so that the depth K per tile varies while the kernel does not:
    fc_fwd        y (N, 3072) = x (N, 768) W^T + b      K = 768    (1536 tiles of 128 x 256)
    fc_proj_fwd   y (N, 768) = x (N, 3072) W^T + b      K = 3072   (384 tiles)
    lm_head_dx    dx (N, 768) = dy (N, 50304) W         K = 50304  (384 tiles)
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
    no_store        the tree with the tile's epilogue skipped (the shared-memory staging and the
                    stores): the accumulators are summed and stored
                    only if the sum is a magic value, so the multiplies stay; output NOT checked
                    (nothing is written, by design: the poison must survive instead)
    no_bias         forward without the bias (flags VEC only; checked against the bias-free product)
    stages3         WG_STAGES 3 instead of 4 (config=)
    one_block       one block per tile instead of a persistent grid of one per SM (config=)
    group_m16       16 tile rows walked together instead of 8 (config=)
    cublaslt        the cublaslt variant's call, the reference the ratios divide by

Every variant is first run on inputs whose output is poisoned with NaN and checked against a float64
reference of the same rounded inputs (the conformance bf16 bound, as the sweeps hold it); only then
timed with euler_core.measure.timing (batches behind a spin kernel, CUDA events, two input sets).
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

ROWS = 16384
#: name -> (product, K (x's width), M (W's rows), bias)
PRODUCTS = {"fc_fwd": ("forward", 768, 3072, True), "fc_proj_fwd": ("forward", 3072, 768, True),
            "lm_head_dx": ("dx", 768, 50304, False)}

_DISPATCH = "switch (flags & ~FLAG_ROWSUM) {"
#: variant -> source edits of matmul.cu's gemm_wgmma ((old, new), old found exactly once)
EDITS = {
    "runtime_flags": [(_DISPATCH, "switch (FLAGS_RUNTIME) {")],
    "no_store": [(_DISPATCH, "float probe_sum = 0.0f;\n#pragma unroll\n"
                             "        for (int q = 0; q < WG_BN / 2; ++q) probe_sum += acc[q];\n"
                             "        if (probe_sum == 1234.5678f) switch (FLAGS_RUNTIME) {")],
}
#: variant -> (launch configuration change, source edit, bias override)
VARIANTS = {
    "tree": ({}, None, None),
    "runtime_flags": ({}, "runtime_flags", None),
    "no_store": ({}, "no_store", None),
    "no_bias": ({}, None, False),
    "stages3": ({"stages": 3}, None, None),
    "one_block": ({"persistent": False}, None, None),
    "group_m16": ({"group_m": 16}, None, None),
}


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
    cfg = mm._config("wgmma", product, (M, K), None)
    cfg.update(change)
    return cfg


def _call(engine, cfg, product, x, w, b, dy, out, rows, K, M):
    if product == "forward":
        mm.gemm(engine, mm.Operand(x, K, True), mm.Operand(w, K, True), out, rows, M, K, bias=b,
                product="forward", weight_shape=(M, K), config=cfg)
    else:
        mm.gemm(engine, mm.Operand(dy, M, True), mm.Operand(w, K, False), out, rows, K, M,
                product="dx", weight_shape=(M, K), config=cfg)


def plan(rows: int = 256) -> list[tuple[str, str, dict]]:
    """(variant, product name, defines of each gemm_wgmma launch), recorded with NumPy stand-ins."""
    out = []
    bf16 = _common.np_dtype("bfloat16")
    for variant, (change, edit, bias_override) in VARIANTS.items():
        for pname, (product, K, M, with_bias) in PRODUCTS.items():
            x, w, dy = np.zeros((rows, K), bf16), np.zeros((M, K), bf16), np.zeros((rows, M), bf16)
            b = np.zeros(M, bf16) if (with_bias if bias_override is None else bias_override) else None
            c = np.zeros((rows, M if product == "forward" else K), bf16)
            with rt.recording() as rec, source_edit(edit):
                _call("wgmma", _config(product, M, K, change), product, x, w, b, dy, c, rows, K, M)
            for launch in rec:
                if launch.kernel == "gemm_wgmma":
                    out.append((variant, pname, dict(launch.defines)))
    return out


def _modules() -> list[tuple[str | None, dict]]:
    seen = {}
    for variant, _, defines in plan():
        edit = VARIANTS[variant][1]
        seen[(edit, tuple(sorted(defines.items())))] = (edit, defines)
    return list(seen.values())


def _compile_on_gpu(job) -> str:
    """(worker) compile one module into CuPy's disk cache."""
    edit, defines = job
    t = time.perf_counter()
    with source_edit(edit):
        rt.function("matmul", "gemm_wgmma", defines, arch="sm_90a")
    return f"{edit or 'tree'} {defines['A_KMAJOR']}{defines['B_KMAJOR']} s{defines['WG_STAGES']}: " \
           f"{time.perf_counter() - t:.1f} s"


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
    serial = " wgmma SERIALIZED" if "serialized" in proc.stderr else ""
    return (f"{edit or 'tree':14s} A_KMAJOR={defines['A_KMAJOR']} B_KMAJOR={defines['B_KMAJOR']} "
            f"stages={defines['WG_STAGES']}: {res.registers} registers, {res.spill_bytes} bytes spilled{serial}")


def _emulate() -> int:
    """--dry: each variant on the CPU emulator at a small shape (the probe's own plumbing and checks)."""
    bad = 0
    rng = np.random.default_rng(1)
    bf16 = _common.np_dtype("bfloat16")
    rows, K, M = 192, 128, 320   # two tile rows (one ragged), two tile columns (one ragged)
    x = rng.standard_normal((rows, K)).astype(bf16)
    w = (rng.standard_normal((M, K)) * K ** -0.5).astype(bf16)
    b = rng.standard_normal(M).astype(bf16)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for variant in ("tree", "runtime_flags", "no_store", "no_bias"):
        change, edit, bias_override = VARIANTS[variant]
        with_bias = True if bias_override is None else bias_override
        out = np.full((rows, M), np.nan, dtype=bf16)
        with rt.emulation(), source_edit(edit):
            _call("wgmma", _config("forward", M, K, change), "forward", x, w, b if with_bias else None, None, out,
                  rows, K, M)
        ok, err = _verdict(np, variant, out, ref + (b.astype(np.float64) if with_bias else 0.0))
        print(f"emulated {variant:14s} {'ok' if ok else 'FAIL'} ({err})")
        bad += not ok
    return bad


def _verdict(xp, variant, out, ref):
    got = out.astype(xp.float64)
    if variant == "no_store":
        return bool(xp.isnan(got).all()), "output left as poisoned: nothing stored, as intended"
    scale = float(xp.sqrt(xp.mean(ref * ref)))
    err = float(xp.abs(got - ref).max()) / scale if bool(xp.isfinite(got).all()) else float("inf")
    return bool(xp.all(xp.abs(got - ref) <= 4e-2 * xp.abs(ref) + 2e-2 * scale)), f"max err {err:.2e} rms"


def dry() -> int:
    print("plan (variant, product: gemm_wgmma defines):")
    for variant, pname, d in plan():
        print(f"  {variant:14s} {pname:12s} A_KMAJOR={d['A_KMAJOR']} B_KMAJOR={d['B_KMAJOR']} WG_BN={d['WG_BN']} "
              f"WG_STAGES={d['WG_STAGES']}")
    jobs = _modules()
    print(f"{len(jobs)} distinct modules; nvcc:")
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
        for line in ex.map(_nvcc, jobs):
            print("  " + line, flush=True)
    return _emulate()


def run(out_path: str) -> int:
    import cupy as cp

    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    t0 = time.perf_counter()
    jobs = _modules()
    import multiprocessing as mp
    with ProcessPoolExecutor(max_workers=min(len(jobs), 12), mp_context=mp.get_context("spawn")) as ex:
        for line in ex.map(_compile_on_gpu, jobs):
            print("compiled " + line, flush=True)
    print(f"compile: {time.perf_counter() - t0:.1f} s", flush=True)
    timer, tcfg = CudaTimer(), TimingConfig(min_time_s=0.15, max_time_s=0.6, max_samples=20)
    sms = _common.num_sms(cp)
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    meta = dict(device=dev["name"].decode(), sms=sms, cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
                cupy=cp.__version__, git_sha=os.environ.get("GIT_SHA", ""))
    records = []
    bf16 = _common.np_dtype("bfloat16")
    cp.random.seed(5)

    def normal(shape, scale=1.0):
        return (cp.random.standard_normal(shape, dtype=cp.float32) * scale).astype(bf16)

    for pname, (product, K, M, with_bias) in PRODUCTS.items():
        sets = [(normal((ROWS, K)), normal((M, K), K ** -0.5), normal((M,)), normal((ROWS, M)) if product == "dx"
                 else None) for _ in range(2)]
        R, C = (ROWS, M) if product == "forward" else (ROWS, K)
        depth = K if product == "forward" else M
        flops = 2.0 * R * C * depth
        x64, w64, b64 = (t.astype(cp.float64) for t in sets[0][:3])
        ref_nobias = x64 @ w64.T if product == "forward" else sets[0][3].astype(cp.float64) @ w64
        del x64
        out = cp.empty((R, C), dtype=bf16)
        base = measure(lambda i: _call("cublaslt", None, product, sets[i][0], sets[i][1],
                                       sets[i][2] if with_bias else None, sets[i][3], out, ROWS, K, M),
                       2, timer, tcfg).p50
        for variant, (change, edit, bias_override) in [("cublaslt", ({}, None, None))] + list(VARIANTS.items()):
            bias = with_bias if bias_override is None else bias_override
            engine, cfg = ("cublaslt", None) if variant == "cublaslt" else ("wgmma", _config(product, M, K, change))
            rec = dict(op="matmul", variant=variant, product=pname, direction=product, rows=R, cols=C, depth=depth,
                       dtype="bfloat16", bias=bias, cfg=cfg, cublaslt_s=base, **meta)
            if cfg is not None:
                tiles = rt.cdiv(R, mm.WG_BM) * rt.cdiv(C, cfg["bn"])
                rec.update(tiles=tiles, tile_waves=rt.cdiv(tiles, sms))
            try:
                with source_edit(edit):
                    def call(i, bias=bias, engine=engine, cfg=cfg):
                        x, w, b, dy = sets[i]
                        _call(engine, cfg, product, x, w, b if bias else None, dy, out, ROWS, K, M)
                    out.fill(cp.nan)
                    call(0)
                    ref = ref_nobias + b64 if bias else ref_nobias
                    ok, why = _verdict(cp, variant, out, ref)
                    rec.update(checked=variant != "no_store", correct=ok, check=why)
                    if ok:
                        t = measure(call, 2, timer, tcfg)
                        rec.update(p20_s=t.p20, p50_s=t.p50, p80_s=t.p80, tflops=flops / t.p50 / 1e12,
                                   vs_cublaslt=base / t.p50)
                        if "tile_waves" in rec:
                            rec["us_per_tile_wave"] = t.p50 / rec["tile_waves"] * 1e6
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            records.append(rec)
            Path(out_path).parent.mkdir(parents=True, exist_ok=True)
            with open(out_path, "w") as f:
                json.dump(records, f, indent=1)
            what = (f"{rec['tflops']:6.0f} TFLOP/s {rec['vs_cublaslt']:5.2f}x"
                    + (f" {rec['us_per_tile_wave']:7.1f} us/tile-wave" if "us_per_tile_wave" in rec else "")
                    if "tflops" in rec else rec.get("error", f"WRONG ({rec.get('check')})"))
            print(f"{pname:12s} {variant:14s} {what}", flush=True)
        del sets, ref_nobias, b64
        cp.get_default_memory_pool().free_all_blocks()
    print(f"probe: {len(records)} records, {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="wgmma-probe.json")
    parser.add_argument("--dry", action="store_true", help="on the CPU: the plan, nvcc for every module, the emulator")
    args = parser.parse_args(argv)
    return dry() if args.dry else run(args.out)


if __name__ == "__main__":
    sys.exit(main())
