"""The cupy_raw matmul variants on the GPU, stage by stage (run by bench/device/cupy_raw.sh).

    python3 bench/device/cupy_raw_matmul.py check     # correctness, every variant x dtype x product x shape
    python3 bench/device/cupy_raw_matmul.py capture   # forward + backward captured in a CUDA graph, replayed
    python3 bench/device/cupy_raw_matmul.py sanitize  # each kernel once at small awkward shapes (compute-sanitizer)
    python3 bench/device/cupy_raw_matmul.py bench [--rows 16384,32768]  # fwd / dx / dW beside cuBLASLt
    python3 bench/device/cupy_raw_matmul.py --dry check capture sanitize bench  # on the CPU: the plan, recorded

check (~20 s, most of it compiling): for variants tiled, wgmma, cublaslt; float32, float16, bfloat16;
shapes from tiny and awkward to GPT-2's at N = 1024: forward (with and without bias, out= poisoned
with NaN), forward_gelu (cublaslt: its GELU_AUX_BIAS epilogue, where M is a multiple of 8), the backward
(dx poisoned, dW and db starting non-zero, in float32 for 16-bit inputs as mixed precision has them, and
in the inputs' dtype), dx * gelu'(pre) (tiled, wgmma: the GELU's backward in the dx epilogue, mlp's),
each against
float64 CuPy on the same rounded inputs, held to the conformance tolerances; a second identical call
must agree bitwise. One line per (variant, dtype, shape) with the worst error of each product,
relative to the reference's RMS; FAIL lines say which product.

capture (~5 s): per variant, bf16, qkv's shape at N = 1024: eager forward + backward once, then the
same calls captured on a stream into a CUDA graph; the graph replayed on new inputs copied into the
captured buffers must give what eager gives on them, bitwise.

sanitize (~2 s without the sanitizer): one forward + backward per variant and dtype at small shapes
that hit every kernel (simt, mma aligned and not, wgmma with BN 128 and 256, split-K, the column
sum); prints nothing but a last line.

bench (~60 s): bf16, GPT-2 124M's five linears (qkv, attn_proj, fc, fc_proj, lm_head) at each
--rows: the forward (x @ W.T + b), dx (dy @ W) and dW (+= dy.T @ x into float32, the bias gradient
beside it) of each variant, each timed alone (euler_core.measure.timing: batches of back-to-back
calls behind a spin kernel, CUDA events, rotating inputs), TFLOP/s and the ratio to cuBLASLt
(the cublaslt variant); cupy.matmul (cuBLAS) for the bare forward as a second reference. Then fc_proj's
dx * gelu'(pre) (wgmma): fused (FLAG_DGELU) against the plain dx followed by gelu's backward kernel.

The last lines printed are the summary: "matmul <stage>: <n> ok, <m> FAIL".
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from backends.cupy_raw import _common
from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import matmul as mm

VARIANTS = ("tiled", "wgmma", "cublaslt")
DTYPES = ("float32", "float16", "bfloat16")
TOL = {"float32": (1e-5, 1e-5, 5e-5, 2e-5), "float16": (1e-2, 5e-3, 2e-2, 1e-2),
       "bfloat16": (2e-2, 1e-2, 4e-2, 2e-2)}   # forward rtol, atol; gradient rtol, atol (conformance)
CHECK_SHAPES = [(4, 8, 6), (1, 20, 36), (17, 36, 20), (13, 37, 11), (128, 65, 96), (64, 40, 64), (200, 64, 264),
                (1024, 768, 2304), (1024, 768, 768), (1024, 768, 3072), (1024, 3072, 768), (256, 768, 50304)]
LINEARS = {"qkv": (768, 2304), "attn_proj": (768, 768), "fc": (768, 3072), "fc_proj": (3072, 768),
           "lm_head": (768, 50304)}


def impl(variant):
    return getattr(mm, variant)


class Tally:
    """Counts and prints a stage's results; the summary is the script's last line (cupy_raw_ops.py
    uses it too)."""

    def __init__(self, stage, what="matmul"):
        self.what, self.stage, self.ok, self.fail = what, stage, 0, 0

    def add(self, good: bool, line: str):
        self.ok += good
        self.fail += not good
        print(("ok   " if good else "FAIL ") + line, flush=True)

    def summary(self) -> str:
        return f"{self.what} {self.stage}: {self.ok} ok, {self.fail} FAIL"


def _inputs(xp, rng, N, K, M, dtype, bias=True):
    dt = _common.np_dtype(dtype)
    x = xp.asarray(rng.standard_normal((N, K)).astype(dt))
    w = xp.asarray((rng.standard_normal((M, K)) * K ** -0.5).astype(dt))
    b = xp.asarray(rng.standard_normal(M).astype(dt)) if bias else None
    return x, w, b


def _rms(cp, a) -> float:
    return max(float(cp.sqrt(cp.mean(a * a))), 1e-30)


def _bound(cp, ref, rtol, atol):
    """The conformance bound on |got - ref|, element by element: rtol |ref| + atol rms(ref)."""
    return rtol * cp.abs(ref) + atol * _rms(cp, ref)


def _err(cp, got, ref, rtol, atol, bound=None):
    """(worst |got - ref| / rms(ref), passes the conformance bound (or `bound`, an array of ref's
    shape), every element finite)"""
    got = got.astype(cp.float64)
    diff = cp.abs(got - ref)
    ok = bool(cp.all(diff <= (_bound(cp, ref, rtol, atol) if bound is None else bound))) and bool(cp.all(cp.isfinite(got)))
    return float(diff.max()) / _rms(cp, ref), ok


def _same(cp, a, b) -> bool:
    """Bitwise equal (16-bit floats compared as their bits)."""
    view = cp.uint16 if a.dtype.itemsize == 2 else cp.uint32
    return bool(cp.all(a.view(view) == b.view(view)))


def _gelu_grad(xp, v):
    """d gelu / dv (float64): 0.5 (1 + tanh u) + 0.5 v sech^2(u) du/dv, u = sqrt(2/pi) (v + 0.044715 v^3)."""
    c = 0.7978845608028654
    t = xp.tanh(c * (v + 0.044715 * v ** 3))
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v)


def check(args) -> Tally:
    import cupy as cp
    tally = Tally("check")
    rng = np.random.default_rng(0)
    for variant in VARIANTS:
        v = impl(variant)
        for dtype in DTYPES:
            rf, af, rg, ag = TOL[dtype]
            for N, K, M in CHECK_SHAPES:
                with_bias = (N + K) % 2 == 0 or M == 2304
                x, w, b = _inputs(cp, rng, N, K, M, dtype, with_bias)
                inputs = {"x": x, "weight": w, **({"bias": b} if with_bias else {})}
                x64, w64 = x.astype(cp.float64), w.astype(cp.float64)
                ref_y = x64 @ w64.T + (b.astype(cp.float64) if with_bias else 0)
                errs, good = {}, True
                t0 = time.perf_counter()
                try:
                    out = cp.full((N, M), cp.nan, dtype=x.dtype)
                    y, saved = v.forward(inputs, {}, out=out)
                    errs["y"], ok = _err(cp, y, ref_y, rf, af)
                    good &= ok and y is out
                    y2, _ = v.forward(inputs, {})
                    good &= _same(cp, y2, y)
                    if variant != "cublaslt" or M % 8 == 0:  # (cuBLASLt's GELU epilogues: whole 8-column groups)
                        pre = cp.full((N, M), cp.nan, dtype=x.dtype)
                        g = v.forward_gelu(x, w, b if with_bias else None, pre=pre)
                        gelu_ref = 0.5 * ref_y * (1 + cp.tanh(0.7978845608028654 * (ref_y + 0.044715 * ref_y ** 3)))
                        errs["gelu"], ok = _err(cp, g, gelu_ref, rf, af)
                        good &= ok
                        errs["pre"], ok = _err(cp, pre, ref_y, rf, af)
                        good &= ok
                    dy = cp.asarray(rng.standard_normal((N, M)).astype(_common.np_dtype(dtype)))
                    dy64 = dy.astype(cp.float64)
                    for gdt in (("float32", dtype) if dtype != "float32" else ("float32",)):
                        w0 = cp.asarray(rng.standard_normal((M, K)).astype(_common.np_dtype(gdt)))
                        grads = {"x": cp.full((N, K), cp.nan, dtype=x.dtype), "weight": w0.copy()}
                        if with_bias:
                            b0 = cp.asarray(rng.standard_normal(M).astype(_common.np_dtype(gdt)))
                            grads["bias"] = b0.copy()
                        got = v.backward(saved, dy, grads)
                        tag = "" if gdt == dtype else "32"
                        errs["dx"], ok = _err(cp, got["x"], dy64 @ w64, rg, ag)
                        good &= ok
                        errs["dW" + tag], ok = _err(cp, got["weight"], w0.astype(cp.float64) + dy64.T @ x64, rg, ag)
                        good &= ok
                        if with_bias:
                            errs["db" + tag], ok = _err(cp, got["bias"], b0.astype(cp.float64) + dy64.sum(0), rg, ag)
                            good &= ok
                        again = {"x": cp.empty((N, K), dtype=x.dtype), "weight": w0.copy(),
                                 **({"bias": b0.copy()} if with_bias else {})}
                        got2 = v.backward(saved, dy, again)
                        good &= all(_same(cp, got2[k], got[k]) for k in got)
                    if variant != "cublaslt":  # dx * gelu'(pre): the GELU's backward in dx's epilogue (mlp)
                        gelu_in = cp.asarray((rng.standard_normal((N, K)) * 2).astype(_common.np_dtype(dtype)))
                        dpre = v.backward(saved, dy, {"x": cp.full((N, K), cp.nan, dtype=x.dtype),
                                                      "weight": cp.zeros((M, K), cp.float32),
                                                      **({"bias": cp.zeros(M, cp.float32)} if with_bias else {})},
                                          dgelu_at=gelu_in)["x"]
                        # held to dx's own bound carried through the elementwise factor, max(1, |gelu'|)
                        # times it: the product's rms is smaller than dx's (|gelu'| ~ 0.6 on average), so
                        # the plain bound on the product fails a dx that passes its own (float32 at K =
                        # 50304: 5.6e-5 of the product's rms against dx's 3.8e-5)
                        dx64, grad = dy64 @ w64, _gelu_grad(cp, gelu_in.astype(cp.float64))
                        errs["dx*gelu'"], ok = _err(cp, dpre, dx64 * grad, rg, ag,
                                                    bound=cp.maximum(1.0, cp.abs(grad)) * _bound(cp, dx64, rg, ag))
                        good &= ok
                    cp.cuda.get_current_stream().synchronize()
                    text = " ".join(f"{k}={e:.1e}" for k, e in errs.items())
                except Exception as e:  # a launch error or a refused shape: report it, carry on
                    good, text = False, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                tally.add(good, f"{variant:8s} {dtype:8s} N={N:<5d} K={K:<5d} M={M:<6d} bias={int(with_bias)} "
                          f"{text} ({time.perf_counter() - t0:.2f}s)")
    return tally


def capture(args) -> Tally:
    import cupy as cp
    tally = Tally("capture")
    rng = np.random.default_rng(1)
    N, K, M = 1024, 768, 2304
    for variant in VARIANTS:
        v = impl(variant)
        try:
            x, w, b = _inputs(cp, rng, N, K, M, "bfloat16")
            dy = cp.asarray(rng.standard_normal((N, M)).astype(_common.np_dtype("bfloat16")))
            y = cp.empty((N, M), dtype=x.dtype)
            grads = {"x": cp.empty((N, K), dtype=x.dtype), "weight": cp.zeros((M, K), cp.float32),
                     "bias": cp.zeros(M, cp.float32)}

            def step():
                grads["weight"].fill(0)
                grads["bias"].fill(0)
                _, saved = v.forward({"x": x, "weight": w, "bias": b}, {}, out=y)
                v.backward(saved, dy, grads)

            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                step()                        # eager, outside the capture: compiles, plans, allocates
                stream.synchronize()
                stream.begin_capture()
                step()
                graph = stream.end_capture()
                for name, arr in (("x", x), ("w", w), ("dy", dy)):   # new inputs into the captured buffers
                    arr[...] = cp.asarray(rng.standard_normal(arr.shape).astype(arr.dtype))
                graph.launch(stream)
                stream.synchronize()
                replayed = [a.copy() for a in (y, grads["x"], grads["weight"], grads["bias"])]
                step()
                stream.synchronize()
                eager = (y, grads["x"], grads["weight"], grads["bias"])
            same = [_same(cp, r, e) for r, e in zip(replayed, eager)]
            tally.add(all(same), f"{variant:8s} graph replay == eager for y, dx, dW, db: {same}")
        except Exception as e:
            tally.add(False, f"{variant:8s} {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return tally


def sanitize(args) -> Tally:
    """One forward + backward per variant and dtype at shapes that reach every kernel."""
    import cupy as cp
    tally = Tally("sanitize")
    rng = np.random.default_rng(2)
    shapes = [(17, 36, 20), (64, 40, 64), (200, 64, 264), (130, 1088, 136), (96, 768, 50304 // 64)]
    for variant in VARIANTS:
        for dtype in DTYPES:
            for N, K, M in shapes:
                try:
                    x, w, b = _inputs(cp, rng, N, K, M, dtype)
                    v = impl(variant)
                    y, saved = v.forward({"x": x, "weight": w, "bias": b}, {})
                    if variant != "cublaslt":
                        v.forward_gelu(x, w, b, pre=cp.empty_like(y))
                        v.backward(saved, y, {"weight": cp.zeros((M, K), cp.float32), "bias": cp.zeros(M, cp.float32)},
                                   dgelu_at=x)  # dx * gelu'(x): FLAG_DGELU (wgmma's prefetch where TMA allows)
                    v.backward(saved, y, {"weight": cp.zeros((M, K), cp.float32), "bias": cp.zeros(M, cp.float32)})
                    cp.cuda.get_current_stream().synchronize()
                    tally.ok += 1
                except Exception as e:
                    tally.add(False, f"{variant} {dtype} {N}x{K}x{M}: {type(e).__name__}: {str(e)[:300]}")
    # the lm_head forward config (BN 256, 4 stages, group 32) at a small N
    try:
        x, w, _ = _inputs(cp, rng, 200, 768, 50304, "bfloat16", bias=False)
        mm.wgmma.forward({"x": x, "weight": w}, {})
        cp.cuda.get_current_stream().synchronize()
        tally.ok += 1
    except Exception as e:
        tally.add(False, f"wgmma lm_head forward: {type(e).__name__}: {str(e)[:300]}")
    return tally


def _device_normal(cp, shape, scale=1.0):
    """bf16 normal(0, scale) drawn on the GPU (lm_head's (32768, 50304) would take the host half a minute)."""
    return (cp.random.standard_normal(shape, dtype=cp.float32) * scale).astype(_common.np_dtype("bfloat16"))


def _device_inputs(cp, N, K, M, bias=True):
    return (_device_normal(cp, (N, K)), _device_normal(cp, (M, K), K ** -0.5), _device_normal(cp, (M,)) if bias else None)


def bench(args) -> Tally:
    import cupy as cp

    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    tally = Tally("bench")
    timer, cfg = CudaTimer(), TimingConfig(min_time_s=0.2, max_time_s=2.0, max_samples=30)
    cp.random.seed(3)
    print(f"{'rows':>6s} {'linear':10s} {'product':8s} " + " ".join(f"{v:>16s}" for v in VARIANTS)
          + f" {'cupy.matmul':>12s}   (TFLOP/s, x cuBLASLt)")
    for rows in args.rows:
        for name, (K, M) in LINEARS.items():
            with_bias = name != "lm_head"
            sets = 2
            xs = [_device_inputs(cp, rows, K, M, with_bias) for _ in range(sets)]
            dys = [_device_normal(cp, (rows, M)) for _ in range(sets)]
            flops = 2.0 * rows * K * M
            for product in ("forward", "dx", "dW"):
                results = {}
                for variant in VARIANTS:
                    v = impl(variant)
                    y = cp.empty((rows, M), dtype=xs[0][0].dtype)
                    dx = cp.empty((rows, K), dtype=xs[0][0].dtype)
                    dw, db = cp.zeros((M, K), cp.float32), cp.zeros(M, cp.float32)

                    def call(i, v=v, y=y, dx=dx, dw=dw, db=db):
                        x, w, b = xs[i]
                        if product == "forward":
                            v.forward({"x": x, "weight": w, **({"bias": b} if with_bias else {})}, {}, out=y)
                        elif product == "dx":
                            mm.gemm(v.engine, mm.Operand(dys[i], M, True), mm.Operand(w, K, False), dx, rows, K, M,
                                    product="dx", weight_shape=(M, K))
                        else:  # dW += dy^T x and db += sum_n dy, as backward does them
                            mm.gemm(v.engine, mm.Operand(dys[i], M, False), mm.Operand(x, K, False), dw, M, K, rows,
                                    accumulate=True, rowsum=db if with_bias else None, product="dW",
                                    weight_shape=(M, K))
                    try:
                        t = measure(call, sets, timer, cfg)
                        results[variant] = t.p50
                    except Exception as e:
                        print(f"   {variant} {name} {product}: {type(e).__name__}: {str(e)[:200]}")
                        results[variant] = None
                base = None
                if product == "forward":
                    out = cp.empty((rows, M), dtype=xs[0][0].dtype)
                    base = measure(lambda i: cp.matmul(xs[i][0], xs[i][1].T, out=out), sets, timer, cfg).p50
                ref = results.get("cublaslt")
                cells = []
                for variant in VARIANTS:
                    s = results[variant]
                    cells.append(f"{'-':>16s}" if s is None else
                                 f"{flops / s / 1e12:7.0f} {ref / s if ref else float('nan'):5.2f}x  ")
                cells.append(f"{flops / base / 1e12:12.0f}" if base else f"{'':12s}")
                print(f"{rows:6d} {name:10s} {product:8s} " + " ".join(cells), flush=True)
                tally.ok += all(results[v] is not None for v in VARIANTS)
                tally.fail += not all(results[v] is not None for v in VARIANTS)
    _bench_dx_dgelu(args, tally, timer, cfg)
    return tally


def _bench_dx_dgelu(args, tally: Tally, timer, cfg) -> None:
    """The MLP projection's dx with the GELU's backward (mlp.py), wgmma, bf16: the fused epilogue
    (FLAG_DGELU, pre prefetched) against the composition it replaces (the plain dx GEMM, then gelu's
    backward kernel over its output), and the plain dx alone, at each --rows."""
    import cupy as cp

    from backends.cupy_raw import gelu
    from euler_core.measure.timing import measure
    K, M = LINEARS["fc_proj"]
    print(f"{'rows':>6s} fc_proj dx * gelu'(pre), wgmma: {'dx alone':>10s} {'dx + gelu bwd':>14s} {'fused':>10s}"
          f" {'composed / fused':>17s}   (us)")
    for rows in args.rows:
        sets = 2
        ws = [_device_normal(cp, (M, K), K ** -0.5) for _ in range(sets)]
        dys = [_device_normal(cp, (rows, M)) for _ in range(sets)]
        pres = [_device_normal(cp, (rows, K)) for _ in range(sets)]
        dact, dpre = cp.empty((rows, K), dtype=dys[0].dtype), cp.empty((rows, K), dtype=dys[0].dtype)

        def dx(i, dgelu_at=None, out=dact):
            mm.gemm("wgmma", mm.Operand(dys[i], M, True), mm.Operand(ws[i], K, False), out, rows, K, M,
                    product="dx" if dgelu_at is None else "dx_dgelu", weight_shape=(M, K), dgelu_at=dgelu_at)

        def composed(i):
            dx(i)
            gelu.backward(gelu.Saved(pres[i]), dact, {"x": dpre})

        try:
            t = [measure(call, sets, timer, cfg).p50 for call in
                 (dx, composed, lambda i: dx(i, dgelu_at=pres[i], out=dpre))]
            print(f"{rows:6d} {'':33s} {t[0] * 1e6:10.1f} {t[1] * 1e6:14.1f} {t[2] * 1e6:10.1f} {t[1] / t[2]:16.2f}x",
                  flush=True)
            tally.ok += 1
        except Exception as e:
            print(f"   fc_proj dx*gelu' rows={rows}: {type(e).__name__}: {str(e)[:200]}")
            tally.fail += 1


def dry(stages) -> None:
    """On the CPU: every variant's launches for the check and bench shapes, recorded (no numerics)."""
    n = 0
    with rt.recording():
        for variant in VARIANTS:
            for dtype in DTYPES:
                for N, K, M in CHECK_SHAPES + [(16384, K, M) for K, M in LINEARS.values()]:
                    x, w, b = _inputs(np, np.random.default_rng(0), min(N, 2048), K, M, dtype)
                    y, saved = impl(variant).forward({"x": x, "weight": w, "bias": b}, {})
                    impl(variant).backward(saved, y, {"weight": np.zeros((M, K), np.float32),
                                                      "bias": np.zeros(M, np.float32)})
                    if variant != "cublaslt":  # and dx * gelu'(x) (check, sanitize; bench's fc_proj)
                        impl(variant).backward(saved, y, {"weight": np.zeros((M, K), np.float32),
                                                          "bias": np.zeros(M, np.float32)}, dgelu_at=x)
                    n += 1
    print(f"dry: {n} forward + backward plans recorded for stages {' '.join(stages)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", nargs="+", choices=("check", "capture", "sanitize", "bench"))
    parser.add_argument("--rows", default="16384,32768", help="bench: N values, comma-separated")
    parser.add_argument("--dry", action="store_true", help="on the CPU: record the launches, run nothing")
    args = parser.parse_args(argv)
    args.rows = [int(r) for r in args.rows.split(",")]
    if args.dry:
        dry(args.stages)
        return 0
    tallies = [{"check": check, "capture": capture, "sanitize": sanitize, "bench": bench}[s](args) for s in args.stages]
    for t in tallies:
        print(t.summary())
    return 1 if any(t.fail for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
