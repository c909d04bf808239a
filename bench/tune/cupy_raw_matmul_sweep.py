"""cupy_raw matmul launch configurations beside cuBLASLt on the H200, GPT-2 124M's linears, bf16.

    python3 bench/tune/cupy_raw_matmul_sweep.py --out DIR/sweep.json [--rows 16384] [--only wgmma]
    python3 bench/tune/cupy_raw_matmul_sweep.py --compile-only      # the CPU: every candidate compiles

For every (N, linear, product) - forward y = x W^T, dx = dy W, dW += dy^T x (float32 buffer, with
db += sum_n dy beside it where the linear has a bias) -
each candidate (a configuration of backends/cupy_raw/matmul.py's gemm_mma or gemm_wgmma, passed in
explicitly as `config=`; "default" = the product's own from CONFIGS / SHAPE_CONFIGS) is first checked
on fresh random inputs against float64 CuPy (output poisoned with NaN, dW starting non-zero; the
conformance bf16 bound), then timed with euler_core.measure.timing (batches behind a spin kernel, CUDA
events, medians, two rotating input sets). cuBLASLt (the cublaslt variant's call) is timed the same
way in the same process; ratios are against it. Results go to --out as JSON after every measurement
(a timeout still leaves data), and a table is printed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from backends.cupy_raw import _common
from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import matmul as mm

LINEARS = {"qkv": (768, 2304), "attn_proj": (768, 768), "fc": (768, 3072), "fc_proj": (3072, 768),
           "lm_head": (768, 50304)}
W, M_ = mm._wg, mm._mma
CANDIDATES = {
    "wgmma": {
        "forward": {"default": None, "n256s4": W(bn=256), "n256s4g16": W(bn=256, group_m=16),
                    "n256s4g4": W(bn=256, group_m=4), "n128s4": W(), "n128s6": W(stages=6),
                    "n256s4-oneshot": W(bn=256, persistent=False)},
        "dx": {"default": None, "n256s4": W(bn=256), "n128s6": W(stages=6), "n256s4-oneshot": W(bn=256, persistent=False)},
        "dW": {"default": None, "n128s4b9": W(split_k=16, busy=0.9), "n128s6b9": W(stages=6, split_k=16, busy=0.9),
               "n128s4b8": W(split_k=16, busy=0.8), "n256s4b9": W(bn=256, split_k=16, busy=0.9)},
    },
    "mma": {
        "forward": {"default": None, "128x128s4c1": M_(stages=4, ctas=1), "128x256w2x4s3c1": M_(bn=256, ctas=1)},
        "dx": {"default": None, "128x128s4c1": M_(stages=4, ctas=1), "128x256w2x4s3c1": M_(bn=256, ctas=1)},
        "dW": {"default": None, "128x128s4c1": M_(stages=4, ctas=1, split_k=16),
               "128x256w2x4s3c1": M_(bn=256, ctas=1, split_k=16)},
    },
}


def _operands(product, x, w, dy, rows, K, M):
    if product == "forward":
        return mm.Operand(x, K, True), mm.Operand(w, K, True), (rows, M, K)
    if product == "dx":
        return mm.Operand(dy, M, True), mm.Operand(w, K, False), (rows, K, M)
    return mm.Operand(dy, M, False), mm.Operand(x, K, False), (M, K, rows)


def compile_only() -> int:
    """Record every candidate's launches at every linear (NumPy, no GPU) and compile each module."""
    modules = {}
    with rt.recording() as rec:
        for engine, products in CANDIDATES.items():
            for product, cands in products.items():
                for cfg in cands.values():
                    for K, M in LINEARS.values():
                        x = np.zeros((256, K), _common.np_dtype("bfloat16"))
                        w = np.zeros((M, K), x.dtype)
                        dy = np.zeros((256, M), x.dtype)
                        a, b, (rows, cols, depth) = _operands(product, x, w, dy, 256, K, M)
                        c = np.zeros((rows, cols), np.float32 if product == "dW" else x.dtype)
                        mm.gemm(engine, a, b, c, rows, cols, depth, accumulate=product == "dW", product=product,
                                weight_shape=(M, K), config=cfg)
    for launch in rec:
        modules[tuple(sorted(launch.defines.items()))] = "sm_90a" if "GEMM_WGMMA" in launch.defines else "sm_90"
    for key, arch in modules.items():
        rt.compile_check("matmul", dict(key), arch=arch)
    print(f"{len(modules)} modules compile")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="matmul-sweep.json")
    parser.add_argument("--rows", default="16384")
    parser.add_argument("--only", choices=("wgmma", "mma"), default=None)
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args(argv)
    if args.compile_only:
        return compile_only()
    import cupy as cp

    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    timer, tcfg = CudaTimer(), TimingConfig(min_time_s=0.2, max_time_s=2.0, max_samples=30)
    rng = np.random.default_rng(0)
    bf16 = _common.np_dtype("bfloat16")
    records = []
    for rows in (int(r) for r in args.rows.split(",")):
        for name, (K, M) in LINEARS.items():
            sets = [(cp.asarray(rng.standard_normal((rows, K)).astype(bf16)),
                     cp.asarray((rng.standard_normal((M, K)) * K ** -0.5).astype(bf16)),
                     cp.asarray(rng.standard_normal((rows, M)).astype(bf16))) for _ in range(2)]
            flops = 2.0 * rows * K * M
            for product in ("forward", "dx", "dW"):
                _, _, (R, C, D) = _operands(product, *sets[0], rows, K, M)
                x64, w64, dy64 = (t.astype(cp.float64) for t in sets[0])
                ref = {"forward": x64 @ w64.T, "dx": dy64 @ w64, "dW": 1.0 + dy64.T @ x64}[product]
                out_dtype = cp.float32 if product == "dW" else bf16

                db = cp.zeros(M, cp.float32)

                def run(engine, cfg, i, c):  # dW with the bias gradient beside it, as backward runs it
                    a, b, (R, C, D) = _operands(product, *sets[i], rows, K, M)
                    mm.gemm(engine, a, b, c, R, C, D, accumulate=product == "dW",
                            rowsum=db if product == "dW" and name != "lm_head" else None, product=product,
                            weight_shape=(M, K), config=cfg)

                c = cp.empty((R, C), dtype=out_dtype)
                base = measure(lambda i: run("cublaslt", None, i, c), 2, timer, tcfg).p50
                for engine, products in CANDIDATES.items():
                    if args.only and engine != args.only:
                        continue
                    for label, cfg in products[product].items():
                        rec = dict(rows=rows, linear=name, product=product, engine=engine, config=label,
                                   cfg=cfg, cublaslt_s=base)
                        try:
                            c = cp.full((R, C), 1.0 if product == "dW" else cp.nan, dtype=out_dtype)
                            run(engine, cfg, 0, c)
                            got = c.astype(cp.float64)
                            scale = float(cp.sqrt(cp.mean(ref * ref)))
                            ok = bool(cp.all(cp.abs(got - ref) <= 4e-2 * cp.abs(ref) + 2e-2 * scale))
                            rec["max_err_rms"] = float(cp.abs(got - ref).max()) / scale
                            rec["correct"] = ok
                            if ok:
                                t = measure(lambda i: run(engine, cfg, i, c), 2, timer, tcfg)
                                rec.update(p20_s=t.p20, p50_s=t.p50, p80_s=t.p80, tflops=flops / t.p50 / 1e12,
                                           vs_cublaslt=base / t.p50)
                        except Exception as e:
                            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                        records.append(rec)
                        with open(args.out, "w") as f:
                            json.dump(records, f, indent=1)
                        what = (f"{rec['tflops']:6.0f} TFLOP/s {rec['vs_cublaslt']:5.2f}x" if "tflops" in rec
                                else rec.get("error", f"WRONG (max err {rec.get('max_err_rms', 0):.2e} rms)"))
                        print(f"{rows:6d} {name:10s} {product:8s} {engine:6s} {label:18s} {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
