"""The fused ops of issue 12 against their unfused compositions, at GPT-2 124M's shapes on one GPU.

Run by bench/device/fused.sh (which says what comes back); SMOKE=1 runs the same logic on the CPU
under Triton's interpreter at tiny shapes in float16 (host timings, no memory figures).

For each N (rows = B*T) and each op, through the dispatcher (euler_core.kernels.Kernel) as the
model calls it, bf16 activations and float32 parameter gradients (the mixed-precision contract),
every output and activation gradient into a preallocated buffer:

    layernorm_residual       fused fwd / bwd   vs  residual + layernorm   /  layernorm bwd + residual (the paths' sum)
    matmul_gelu              fused fwd / bwd   vs  matmul + gelu          /  gelu bwd + matmul bwd     (c_fc: 768 -> 3072)
    classifier_crossentropy  fused fwd+bwd     vs  matmul + crossentropy fwd, crossentropy bwd + matmul bwd (lm_head, tied)
                             fused eval fwd    vs  matmul + crossentropy fwd
                             and, at the first N, the fused fwd+bwd at other chunk sizes (scratch budgets)
    matmul_gelu (first N)    fused fwd / bwd with other launch configurations (matmul_gelu_candidates)

1. check: the fused outputs and gradients against the unfused ones (both bf16; conformance's bf16
   tolerance doubled, 10 outliers per million allowed); the classifier's, fused and unfused each,
   against the composition in float64 on the device (the unfused one rounds its logits to bf16 and
   is the less accurate; its verdict is reported beside). A wrong op is reported and not timed.
2. memory: each path's preallocated buffers (outputs and activation gradients: the model's arena),
   the CuPy pool bytes held from the forward to the backward (saved values), and the peak the pair
   needs beyond its inputs and arena (pool.total_bytes() growth after free_all_blocks); total =
   arena + peak.
3. time: each callable run REPS times back to back, captured as one CUDA graph by the core's
   euler_core.graph.CapturedGraph (its work stream, a private memory pool, the op named if a capture
   fails); the median of ITERS replays / REPS (if a capture fails: REPS eager calls between two
   events, and the record says why). The fused ops' outputs after the replays are compared bit for
   bit with the eager run.
Records go to fused/results.json; the summary table is printed last.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

SMOKE = bool(os.environ.get("SMOKE"))
OUT = os.environ.get("OUT_DIR", "/tmp/fused")
REPS, ITERS = (2, 2) if SMOKE else (10, 5)
NS = (48,) if SMOKE else (16384, 32768)
C, VP, V, HIDDEN = (32, 96, 90, 128) if SMOKE else (768, 50304, 50257, 3072)
DTYPE = "float16" if SMOKE else "bfloat16"   # the interpreter's bf16 arithmetic is wrong
CHUNK_ROWS = (8, 16) if SMOKE else (2048, 4096, 8192, 16384)

if SMOKE:
    xp = np
    from backends.triton import _runtime  # noqa: F401  (the interpreter's array adapter)
    from backends.triton._testing import interpreted_variant
else:
    import cupy as xp  # noqa: E402

from conformance.arrays import CheckFailed, compare, np_dtype  # noqa: E402
from conformance.tolerances import Tol, tolerance  # noqa: E402
from euler_core.kernels import Kernel  # noqa: E402
from euler_core.registry import get_registry  # noqa: E402

DT = np_dtype(DTYPE)
REGISTRY = None if SMOKE else get_registry()
NAMES = {"layernorm": "rows", "residual": "fused", "matmul": "tiled", "gelu": "fused", "crossentropy": "chunked",
         "layernorm_residual": "fused", "matmul_gelu": "fused", "classifier_crossentropy": "chunked"}


def kernel(op: str) -> Kernel:
    if SMOKE:
        return Kernel(interpreted_variant(op))
    return Kernel(REGISTRY.find(f"triton:{NAMES[op]}", op))


K = {op: kernel(op) for op in NAMES}


def rand(rng, shape, scale=1.0):
    """Normal random values in the tested dtype, made on the device (rng: xp.random.default_rng)."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(DT)


def zeros32(shape):
    return xp.zeros(shape, dtype=np.float32)


def empty(shape, dtype=None):
    return xp.empty(shape, dtype=dtype or DT)


def sync():
    if not SMOKE:
        xp.cuda.get_current_stream().synchronize()


# ---- measuring ------------------------------------------------------------------------------------
def memory(fwd, bwd, arena) -> dict:
    """MB of the path's arena buffers, of what the pool holds between forward and backward, and of
    the pool's peak growth over both."""
    arena_mb = sum(a.nbytes for a in arena) / 2 ** 20
    if SMOKE:
        return {"arena_mb": arena_mb, "held_mb": None, "peak_mb": None, "total_mb": None}
    pool = xp.get_default_memory_pool()
    sync()
    pool.free_all_blocks()
    base_used, base_total = pool.used_bytes(), pool.total_bytes()
    saved = fwd()
    sync()
    held = pool.used_bytes() - base_used
    if bwd is not None:
        bwd(saved)
    sync()
    peak = pool.total_bytes() - base_total
    del saved
    return {"arena_mb": arena_mb, "held_mb": held / 2 ** 20, "peak_mb": peak / 2 ** 20,
            "total_mb": arena_mb + peak / 2 ** 20}


TIMING_NOTES: list[str] = []


def time_it(step) -> float:
    """Median seconds of one `step()` (a forward, a backward, or both): REPS calls captured in a
    CUDA graph, replayed ITERS times (SMOKE: host time of REPS eager calls)."""
    step()  # warm: every kernel compiled and launched once before any capture
    if SMOKE:
        t = time.perf_counter()
        for _ in range(REPS):
            step()
        return (time.perf_counter() - t) / REPS
    from euler_core.graph import CapturedGraph, work_stream
    stream = work_stream()
    start, end = xp.cuda.Event(), xp.cuda.Event()
    with stream:
        step()

        def steps():
            for _ in range(REPS):
                step()
        try:
            graph = CapturedGraph(steps, "the timed calls")
            graph.replay()
            once = graph.replay
        except Exception as e:  # report it and time eagerly: the figures still come back
            TIMING_NOTES.append(f"capture failed ({type(e).__name__}: {str(e)[:300]}); timed eagerly")
            once = steps
        times = []
        for _ in range(ITERS):
            start.record(stream)
            once()
            end.record(stream)
            end.synchronize()
            times.append(xp.cuda.get_elapsed_time(start, end) / 1e3 / REPS)
    return statistics.median(times)


def host(a):
    return np.asarray(a if SMOKE else a.get()).astype(np.float64)


TOL = {kind: Tol(2 * t.rtol, 2 * t.atol) for kind, t in
       (("forward", tolerance(DTYPE, "forward")), ("gradient", tolerance(DTYPE, "gradient")))}


def agree(pairs) -> str:
    """'' when every (name, fused, unfused, kind) pair agrees, else the first disagreement."""
    try:
        for name, got, ref, kind in pairs:
            compare(name, got, host(ref), TOL[kind], what="the unfused composition", outliers_per_million=10.0)
    except CheckFailed as e:
        return str(e)
    return ""


RECORDS: list[dict] = []


def record(op, N, what, fused_s, unfused_s, mem_fused, mem_unfused, check, graph_check="", **extra):
    r = {"op": op, "N": N, "what": what, "dtype": DTYPE, "fused_ms": fused_s * 1e3,
         "unfused_ms": None if unfused_s is None else unfused_s * 1e3,
         "speedup": None if unfused_s is None else unfused_s / fused_s,
         "fused_mem": mem_fused, "unfused_mem": mem_unfused, "check": check or "agrees",
         "graph_check": graph_check or "bitwise", "timing_notes": list(TIMING_NOTES), **extra}
    TIMING_NOTES.clear()
    RECORDS.append(r)
    print(json.dumps(r), flush=True)
    save()


def save():
    """results.json as it stands (rewritten after every record: a run cut short keeps its figures)."""
    with open(os.path.join(OUT, "results.json"), "w") as fh:
        json.dump({"smoke": SMOKE, "reps": REPS, "iters": ITERS, "records": RECORDS}, fh, indent=1)


def same_after_graph(buffers_now, eager) -> str:
    """'' when the buffers, as the last replay left them, hold the eager run's bits."""
    for i, (now, before) in enumerate(zip(buffers_now, eager)):
        if host(now).tobytes() != before.tobytes():
            return f"output {i}: the graph replay's result differs from the eager run's"
    return ""


# ---- layernorm_residual ------------------------------------------------------------------------------
def bench_layernorm_residual(N, rng):
    a, b, dstream, dy = (rand(rng, (N, C)) for _ in range(4))
    w, bias = (rand(rng, (C,), 0.5).astype(np.float32) + np.float32(1.0)).astype(DT), rand(rng, (C,), 0.5)
    x, y, da, dln, x2, y2, da2 = (empty((N, C)) for _ in range(7))
    gw, gb, gw2, gb2 = (zeros32((C,)) for _ in range(4))
    eps = {"eps": 1e-5}
    f, ln, res = K["layernorm_residual"], K["layernorm"], K["residual"]

    def fused_fwd():
        return f.forward({"a": a, "b": b, "weight": w, "bias": bias}, eps, out=(x, y))[1]

    def fused_bwd(saved):
        f.backward(saved, (dstream, dy), {"weight": gw, "bias": gb, "a": da})

    def unfused_fwd():
        res.forward({"a": a, "b": b}, out=x2)
        return ln.forward({"x": x2, "weight": w, "bias": bias}, eps, out=y2)[1]

    def unfused_bwd(saved):
        ln.backward(saved, dy, {"weight": gw2, "bias": gb2, "x": dln})
        res.forward({"a": dstream, "b": dln}, out=da2)

    s = fused_fwd()
    fused_bwd(s)
    s2 = unfused_fwd()
    unfused_bwd(s2)
    sync()
    check = agree([("x", x, x2, "forward"), ("y", y, y2, "forward"), ("da", da, da2, "gradient"),
                   ("dweight", gw, gw2, "gradient"), ("dbias", gb, gb2, "gradient")])
    eager = [host(x), host(y)]
    mem_f, mem_u = memory(fused_fwd, fused_bwd, [x, y, da]), memory(unfused_fwd, unfused_bwd, [x2, y2, dln, da2])
    if check:
        record("layernorm_residual", N, "forward", float("nan"), None, mem_f, mem_u, check)
        return
    tf = time_it(fused_fwd)
    graph = same_after_graph([x, y], eager)
    tu = time_it(unfused_fwd)
    s, s2 = fused_fwd(), unfused_fwd()
    record("layernorm_residual", N, "forward", tf, tu, mem_f, mem_u, check, graph)
    record("layernorm_residual", N, "backward", time_it(lambda: fused_bwd(s)), time_it(lambda: unfused_bwd(s2)),
           mem_f, mem_u, check)


# ---- matmul_gelu -------------------------------------------------------------------------------------
def bench_matmul_gelu(N, rng):
    x, dy = rand(rng, (N, C)), rand(rng, (N, HIDDEN))
    w, bias = rand(rng, (HIDDEN, C), C ** -0.5), rand(rng, (HIDDEN,), 0.5)
    y, y2, pre, dpre = (empty((N, HIDDEN)) for _ in range(4))
    dx, dx2 = empty((N, C)), empty((N, C))
    gw, gw2, gb, gb2 = zeros32((HIDDEN, C)), zeros32((HIDDEN, C)), zeros32((HIDDEN,)), zeros32((HIDDEN,))
    f, mm, gelu = K["matmul_gelu"], K["matmul"], K["gelu"]
    inputs = {"x": x, "weight": w, "bias": bias}

    def fused_fwd():
        return f.forward(inputs, out=y)[1]

    def fused_bwd(saved):
        f.backward(saved, dy, {"weight": gw, "bias": gb, "x": dx})

    def unfused_fwd():
        s_mm = mm.forward(inputs, out=pre)[1]
        return s_mm, gelu.forward({"x": pre}, out=y2)[1]

    def unfused_bwd(saved):
        s_mm, s_gelu = saved
        gelu.backward(s_gelu, dy, {"x": dpre})
        mm.backward(s_mm, dpre, {"weight": gw2, "bias": gb2, "x": dx2})

    s = fused_fwd()
    fused_bwd(s)
    s2 = unfused_fwd()
    unfused_bwd(s2)
    sync()
    check = agree([("y", y, y2, "forward"), ("dx", dx, dx2, "gradient"), ("dweight", gw, gw2, "gradient"),
                   ("dbias", gb, gb2, "gradient")])
    eager = [host(y)]
    mem_f, mem_u = memory(fused_fwd, fused_bwd, [y, dx]), memory(unfused_fwd, unfused_bwd, [pre, y2, dpre, dx2])
    if check:
        record("matmul_gelu", N, "forward", float("nan"), None, mem_f, mem_u, check)
        return
    tf = time_it(fused_fwd)
    graph = same_after_graph([y], eager)
    tu = time_it(unfused_fwd)
    s, s2 = fused_fwd(), unfused_fwd()
    tub = time_it(lambda: unfused_bwd(s2))
    record("matmul_gelu", N, "forward", tf, tu, mem_f, mem_u, check, graph)
    record("matmul_gelu", N, "backward", time_it(lambda: fused_bwd(s)), tub, mem_f, mem_u, check)
    if N != NS[0]:
        return
    for name, swaps in matmul_gelu_candidates().items():  # launch configurations, swapped in one at a time
        with configs_swapped(swaps):
            s = fused_fwd()
            fused_bwd(s)  # into gw, gb: accumulated, so only y and dx are compared
            sync()
            cand = agree([("y", y, y2, "forward"), ("dx", dx, dx2, "gradient")])
            tf_c = time_it(fused_fwd) if not cand else float("nan")
            tb_c = time_it(lambda: fused_bwd(s)) if not cand else float("nan")
        record("matmul_gelu", N, f"forward, {name}", tf_c, tu, mem_f, mem_u, cand)
        record("matmul_gelu", N, f"backward, {name}", tb_c, tub, mem_f, mem_u, cand)


@contextlib.contextmanager
def configs_swapped(swaps):
    """Inside the block, each (table, key, config) of `swaps` is in its product table (matmul.CONFIGS,
    matmul_gelu.BACKWARD_CONFIGS) in place of the product's own entry, which is put back after: a
    candidate then runs through the op's own calls, as the model makes them."""
    defaults = [(table, key, table[key]) for table, key, _ in swaps]
    for table, key, value in swaps:
        table[key] = value
    try:
        yield
    finally:
        for table, key, value in defaults:
            table[key] = value


def matmul_gelu_candidates() -> dict:
    """Launch configurations timed beside matmul_gelu's defaults at the first N, as (table, key,
    config) swaps: the forward (matmul's own c_fc forward config) with its tile and K loops apart
    (no FLATTEN) or as one 128 x 256 program per SM; the backward's dW on 128 x 128 tiles (no
    spills; the default 128 x 256 spills 472 bytes) and its dx without FLATTEN."""
    from backends.triton import matmul as mm
    from backends.triton import matmul_gelu as mg
    fwd, bwd, forward = mm.CONFIGS, mg.BACKWARD_CONFIGS, ("16", "forward", mm.ANY)
    no_flatten = {"forward no FLATTEN": [(fwd, forward, replace(fwd[forward], flatten=False))]}
    if SMOKE:
        return no_flatten
    return {**no_flatten,
            "forward 128x256": [(fwd, forward, mm.GemmConfig(128, 256, 64, num_stages=3))],
            "dW 128x128 w8 s4": [(bwd, "dW", mm.GemmConfig(128, 128, 64, num_warps=8, num_stages=4, split_k=16))],
            "dW 128x128 w4 s4": [(bwd, "dW", mm.GemmConfig(128, 128, 64, num_warps=4, num_stages=4, split_k=16))],
            "dx no FLATTEN": [(bwd, "dx", replace(bwd["dx"], flatten=False))]}


# ---- classifier_crossentropy ---------------------------------------------------------------------------
def bench_classifier(N, rng):
    x = rand(rng, (N, C))
    wte = rand(rng, (VP, C), 0.2)                                        # logits of std ~5.5
    host_rng = np.random.default_rng(N)
    targets_host = host_rng.integers(0, V, size=N).astype(np.int32)
    targets_host[host_rng.random(N) < 0.1] = -1
    targets = xp.asarray(targets_host)
    valid = targets_host >= 0
    dlosses = xp.asarray((valid / valid.sum()).astype(np.float32))       # the mean over valid positions
    losses, losses2, losses3 = (xp.empty((N,), dtype=np.float32) for _ in range(3))
    dx, dx2 = empty((N, C)), empty((N, C))
    gw, gw2 = zeros32((VP, C)), zeros32((VP, C))
    logits, dlogits = empty((N, VP)), empty((N, VP))
    f, mm, ce = K["classifier_crossentropy"], K["matmul"], K["crossentropy"]
    attrs = {"n_valid": V}
    train_inputs = {"x": x, "weight": wte, "targets": targets, "dlosses": dlosses}

    def fused_fwd():
        return f.forward(train_inputs, attrs, out=losses)[1]

    def fused_bwd(saved):
        f.backward(saved, None, {"weight": gw, "x": dx})

    def fused_eval():
        return f.forward({"x": x, "weight": wte, "targets": targets}, attrs, out=losses3)[1]

    def unfused_fwd():
        s_mm = mm.forward({"x": x, "weight": wte}, out=logits)[1]
        return s_mm, ce.forward({"logits": logits.reshape(1, N, VP), "targets": targets.reshape(1, N)}, attrs,
                                out=losses2.reshape(1, N))[1]

    def unfused_bwd(saved):
        s_mm, s_ce = saved
        ce.backward(s_ce, dlosses.reshape(1, N), {"logits": dlogits.reshape(1, N, VP)})
        mm.backward(s_mm, dlogits, {"weight": gw2, "x": dx2})

    s = fused_fwd()
    fused_bwd(s)
    del s
    fused_eval()
    s2 = unfused_fwd()
    unfused_bwd(s2)
    del s2
    sync()
    ref = classifier_reference(x, wte, targets, dlosses, V)
    check = against_reference([("losses", losses, ref["losses"], "forward"),
                               ("losses (eval)", losses3, ref["losses"], "forward"),
                               ("dx", dx, ref["dx"], "gradient"), ("dweight", gw, ref["dweight"], "gradient")])
    check_unfused = against_reference([("losses", losses2, ref["losses"], "forward"), ("dx", dx2, ref["dx"], "gradient"),
                                       ("dweight", gw2, ref["dweight"], "gradient")])
    del ref
    eager = [host(losses)]
    mem_f = memory(fused_fwd, fused_bwd, [losses, dx])
    mem_u = memory(unfused_fwd, unfused_bwd, [logits, losses2, dlogits, dx2])
    mem_fe, mem_ue = memory(fused_eval, None, [losses3]), memory(unfused_fwd, None, [logits, losses2])
    notes = {"unfused_check": check_unfused or "agrees"}
    if check:
        record("classifier_crossentropy", N, "forward+backward", float("nan"), None, mem_f, mem_u, check, **notes)
        return
    train_f = time_it(lambda: fused_bwd(fused_fwd()))
    graph = same_after_graph([losses], eager)
    train_u = time_it(lambda: unfused_bwd(unfused_fwd()))
    record("classifier_crossentropy", N, "forward+backward", train_f, train_u, mem_f, mem_u, check, graph,
           chunk_rows=chunk_rows_default(N), **notes)
    record("classifier_crossentropy", N, "eval forward", time_it(fused_eval), time_it(unfused_fwd),
           mem_fe, mem_ue, check)
    if N != NS[0]:
        return
    from backends.triton import classifier_crossentropy as module  # the chunk size is the module's config
    full = f.spec.fill_attrs(attrs)
    for rows in CHUNK_ROWS:
        if rows > N or rows == chunk_rows_default(N):
            continue
        cfg = replace(module.CONFIG, scratch_bytes=rows * module.row_bytes(VP, C, DTYPE, rows))

        def fwd(cfg=cfg):
            with interpreting():
                return module.forward_with(cfg, train_inputs, full, losses)[1]

        def bwd(saved):
            with interpreting():
                module.backward(saved, None, {"weight": gw, "x": dx})

        mem = memory(fwd, bwd, [losses, dx])
        record("classifier_crossentropy", N, f"forward+backward, {rows}-row chunks", time_it(lambda: bwd(fwd())),
               train_u, mem, mem_u, check, chunk_rows=rows)


def classifier_reference(x, wte, targets, dlosses, n_valid) -> dict:
    """The composition in float64 from the very bf16 inputs, on the device (one (N, Vp) float64
    array, 6.6 GB at N = 16384): losses, dx = dlogits @ W, dweight = dlogits.T @ x, on the host."""
    x64, w64 = x.astype(np.float64), wte.astype(np.float64)
    N = x.shape[0]
    z = x64 @ w64.T
    z[:, n_valid:] = -np.inf
    rows = xp.arange(N)
    valid = targets >= 0
    picked = z[rows, xp.where(valid, targets, 0)]
    top = z.max(axis=1, keepdims=True)
    z -= top
    xp.exp(z, out=z)
    total = z.sum(axis=1, keepdims=True)
    losses = xp.where(valid, (top + xp.log(total))[:, 0] - picked, 0.0)
    z /= total                                                           # softmax
    z[rows[valid], targets[valid]] -= 1.0
    z *= xp.where(valid, dlosses.astype(np.float64), 0.0)[:, None]        # dlogits
    return {"losses": host(losses), "dx": host(z @ w64), "dweight": host(z.T @ x64)}


def against_reference(pairs) -> str:
    """'' when every (name, got, float64 reference, kind) agrees within the bench's tolerance."""
    try:
        for name, got, ref, kind in pairs:
            compare(name, got, ref, TOL[kind], outliers_per_million=10.0)
    except CheckFailed as e:
        return str(e)
    return ""


def interpreting():
    """Triton's interpreter around a direct module call in SMOKE mode (the dispatcher's interpreted
    variants do that themselves); nothing on the GPU."""
    if SMOKE:
        from backends.triton import _runtime
        return _runtime.interpreter()
    return contextlib.nullcontext()


def chunk_rows_default(N):
    from backends.triton.classifier_crossentropy import CONFIG, chunk_rows
    return chunk_rows(N, VP, C, DTYPE, CONFIG.scratch_bytes)


def summary():
    print()
    print("fused vs unfused (triton, bf16 activations, float32 parameter gradients); ms per call from CUDA-graph "
          "replays; MB: held = saved from forward to backward, total = arena buffers + pool peak")
    print(f"{'op':<24} {'N':>6} {'what':<38} {'fused ms':>9} {'unfused ms':>10} {'speedup':>8} "
          f"{'held MB f/u':>15} {'total MB f/u':>15}  check")
    for r in RECORDS:
        def mb(kind):
            f, u = r["fused_mem"].get(kind), r["unfused_mem"].get(kind)
            return "-" if f is None or u is None else f"{f:.0f}/{u:.0f}"
        un = "-" if r["unfused_ms"] is None else f"{r['unfused_ms']:.3f}"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        print(f"{r['op']:<24} {r['N']:>6} {r['what']:<38} {r['fused_ms']:>9.3f} {un:>10} {sp:>8} "
              f"{mb('held_mb'):>15} {mb('total_mb'):>15}  {r['check'][:60]}"
              + ("" if r["graph_check"] == "bitwise" else f" GRAPH: {r['graph_check']}")
              + (f" TIMING: {r['timing_notes'][0]}" if r.get("timing_notes") else ""))
    for r in RECORDS:
        if "unfused_check" in r:
            print(f"# {r['op']} N={r['N']} against float64: fused {r['check'][:150]}; unfused {r['unfused_check'][:150]}")


def main():
    os.makedirs(OUT, exist_ok=True)
    only = sys.argv[1:] or ["layernorm_residual", "matmul_gelu", "classifier_crossentropy"]
    benches = {"layernorm_residual": bench_layernorm_residual, "matmul_gelu": bench_matmul_gelu,
               "classifier_crossentropy": bench_classifier}
    for N in NS:
        for op in only:
            rng = xp.random.default_rng(N)
            t = time.perf_counter()
            try:
                benches[op](N, rng)
            except Exception as e:  # one op's failure must not hide the others' figures
                import traceback
                traceback.print_exc()
                RECORDS.append({"op": op, "N": N, "what": "error", "dtype": DTYPE, "fused_ms": float("nan"),
                                "unfused_ms": None, "speedup": None, "fused_mem": {}, "unfused_mem": {},
                                "check": f"raised {type(e).__name__}: {e}", "graph_check": "bitwise"})
            print(f"# {op} N={N}: {time.perf_counter() - t:.1f} s", flush=True)
            if not SMOKE:
                xp.get_default_memory_pool().free_all_blocks()
    save()
    summary()


if __name__ == "__main__":
    main()
