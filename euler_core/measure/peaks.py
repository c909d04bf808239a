"""The device's ceilings, measured in the same run as the benchmarks they scale (STYLE.md 7 and the
pitfall "a hard-coded peak FLOP/s"): a large dense matmul for FLOP/s and a large copy for bytes/s.

    cpu    numpy's matmul (its BLAS, on every core it was given) on n x n in the benchmarked dtype;
           np.copyto between two arrays much larger than any cache
    cuda   cupy.matmul (cuBLAS) n x n x n in the benchmarked dtype (bfloat16 through ml_dtypes);
           a device-to-device copy of 1 GiB

A copy moves its bytes twice (read and write): bytes/s counts both, as a roofline's bandwidth does.
The peak is taken at the fast end of the samples (the p20 time): it is a ceiling, and the slow end
is the machine's noise. It is not the datasheet figure, and a memory-bound kernel whose data fits in
a cache can exceed it.
"""

from __future__ import annotations

import numpy as np

from ..numerics import np_dtype
from .timing import Timing, TimingConfig, measure, timer_for

#                 matmul n   copy bytes
SIZES = {"small": (512, 64 << 20), "large": (2048, 512 << 20)}
GPU_SIZES = {"small": (4096, 256 << 20), "large": (8192, 1 << 30)}


def measure_peaks(device: str, dtype: str, size: str = "large", cfg: TimingConfig | None = None) -> dict:
    """{'peak_flops', 'peak_bw', and how each was measured} on `device` for `dtype`."""
    cfg = cfg or TimingConfig(min_samples=5, max_samples=20, min_time_s=0.3, max_time_s=5.0)
    cfg = TimingConfig(**{**cfg.__dict__, "max_sets": 1})  # the arrays are far larger than any cache
    n, copy_bytes = (GPU_SIZES if device == "cuda" else SIZES)[size]
    timer = timer_for(device)
    if device == "cuda":
        import cupy as xp
        compute_dtype = np_dtype(dtype)
    else:
        xp = np
        # the CPU has no bfloat16/float16 BLAS: its ceiling is float32's
        compute_dtype = np.dtype("float64" if dtype == "float64" else "float32")
    rng = np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal((n, n), dtype=np.float32).astype(compute_dtype))
    b = xp.asarray(rng.standard_normal((n, n), dtype=np.float32).astype(compute_dtype))
    c = xp.empty((n, n), dtype=compute_dtype)
    mm: Timing = measure(lambda i: xp.matmul(a, b, out=c), 1, timer, cfg)
    del a, b, c
    count = copy_bytes // 4
    src = xp.ones(count, dtype=np.float32)
    dst = xp.empty_like(src)
    cp: Timing = measure(lambda i: xp.copyto(dst, src), 1, timer, cfg)
    del src, dst
    return {
        "kind": "peak", "peak_flops": 2.0 * n ** 3 / mm.p20, "peak_bw": 2.0 * copy_bytes / cp.p20,
        "matmul": {"n": n, "dtype": str(compute_dtype), "p20_s": mm.p20, "p50_s": mm.p50, "p80_s": mm.p80,
                   "tflops_p50": 2.0 * n ** 3 / mm.p50 / 1e12},
        "copy": {"bytes": copy_bytes, "p20_s": cp.p20, "p50_s": cp.p50, "p80_s": cp.p80,
                 "gbps_p50": 2.0 * copy_bytes / cp.p50 / 1e9},
        "dtype": dtype, "size": size,
    }
