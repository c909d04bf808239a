"""The cupy_raw backend's CUDA kernels run on the CPU by its emulator (backends/cupy_raw/_emulator.py:
g++, a fiber per CUDA thread, barriers, shuffles, atomics, 16-bit floats, mma.sync): no GPU needed.

Every kernel goes through the conformance suite's own case checks (against float64 naive, out=
poisoned with NaN, gradients accumulated twice, activation buffers overwritten, inputs unchanged,
bitwise repeatable) at the suite's awkward shapes, in float32 and bfloat16 (float16 where it changes
an instruction), with the very launch configurations the GPU gets. Cases that take the emulator long (the simple attention's
longer T and GPT-2's 64-wide heads, one block per query row) are left to the GPU run
(bench/device/cupy_raw.sh); SLOW names them.

Then a whole GPT-2 training step through these kernels (matmul aside), float32 and mixed precision;
and what the suite does not reach: the new adamw contract (param_copy, clipping from grad_sumsq,
a skipped step, device scalars), sumsq, embedding's paths for tokens held by many positions and few, the errors a caller gets before any launch, and the emulator itself
(a barrier not every thread reaches is an error, not a hang).
"""

import math
import shutil

import numpy as np
import pytest

from backends.cupy_raw import _emulator
from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import _source

pytestmark = pytest.mark.skipif(_emulator.unavailable_reason() is not None,
                                reason=str(_emulator.unavailable_reason()))

from backends.cupy_raw._testing import emulated_variant  # noqa: E402
from backends.cupy_raw.plugin import _VARIANTS  # noqa: E402
from conformance.cases import CASES  # noqa: E402
from conformance.runner import PASSED, run_case  # noqa: E402

#: (op, variant, case) the emulator takes many seconds for; they run in the H200 conformance run
SLOW = {("attention", "simple", "T128"), ("attention", "simple", "T257"), ("attention", "simple", "HS64"),
        ("attention", "simple", "NH1")}


def _dtypes(op: str, variant: str, case: str) -> tuple:
    """float32 and bfloat16 everywhere; float16 (the same code but for its conversions) where it
    changes an instruction: flash's and wgmma's fp16 multiplies, at the shapes that reach them (wgmma's
    kernels run at heads of 64 only: HS64). flash and wgmma take float32 through the simple kernels,
    checked as the simple variant."""
    if op == "attention" and variant in ("flash", "wgmma"):
        return ("bfloat16", "float16") if case in ("small", "T17-C36-NH3", "HS64") else ("bfloat16",)
    if op == "matmul_gelu" and case == "K768-M3072":  # c_fc's shape: the TMA-store epilogue writing pre
        return ("bfloat16",)                           # and gelu(pre) (12 s here; float32 takes gemm_simt)
    if op == "mlp" and case.startswith("C768-H3072-M768"):  # GPT-2's MLP (and with the residual, the
        return ("bfloat16",)                           # stream prefetched too): c_fc's as above and the projection's
                                                       # dx with gelu'(pre) prefetched (float32: gemm_simt)
    return ("float32", "bfloat16")


PARAMS = [pytest.param(op, variant, case.name, dtype, id=f"{op}-{variant}-{case.name}-{dtype}")
          for op, variant, impl, _ in _VARIANTS if op in CASES and op != "matmul"  # (test_cupy_raw_matmul.py)
          for case in CASES[op] if (op, variant, case.name) not in SLOW
          for dtype in _dtypes(op, variant, case.name)]


@pytest.mark.parametrize("op,variant,case,dtype", PARAMS)
def test_case_checks_in_the_emulator(op, variant, case, dtype):
    results = run_case(emulated_variant(op, variant), op, case, dtype, seed=0)
    assert results, "no check ran"
    bad = [str(r) for r in results if r.status != PASSED]
    assert not bad, "\n".join(bad)


# ---- a whole GPT-2 training step through the kernels -----------------------------------------
def _emulated_registry(attention_variant: str):
    from backends.naive import plugin as naive
    from euler_core.ops import OPS
    from euler_core.registry import Backend, Registry, Variant, hookimpl

    class Emulated:
        @hookimpl
        def nanoeuler_backends(self):
            variants = [emulated_variant(op, v) for op, v, impl, _ in _VARIANTS
                        if op in OPS and not impl.startswith("matmul") and (op != "attention" or v == attention_variant)]
            variants.append(Variant("matmul", "f32acc", impl="cupy_raw_cpu_matmul", device="cpu",
                                    dtypes=("float32", "float16", "bfloat16")))
            return [Backend("cupyrawcpu", "the cupy_raw kernels in the CPU emulator", variants)]

    return Registry(plugins=[naive, Emulated()], entry_points=False)


@pytest.mark.parametrize("attention_variant,dtype", [("simple", "float32"), ("flash", "bfloat16"),
                                                     ("flash", "float16")])
def test_model_step_through_the_kernels(attention_variant, dtype):
    """conformance's model check (loss and every parameter gradient of a 2-layer GPT against the
    float64 naive run) with every op but matmul from the emulated cupy_raw kernels (the MLP runs as
    cupy_raw's mlp, so its GEMMs, the GELU epilogue and gelu' in the dx epilogue are the emulated
    kernels too); 16-bit models in mixed precision (float32 master weights and gradient buffers)."""
    from conformance.model import check_model_step
    from euler_core import model
    if dtype != "float32" and dtype not in getattr(model, "MIXED", ()):
        pytest.skip("this core's model has no mixed precision yet (issue 12 brings it)")
    registry = _emulated_registry(attention_variant)
    from euler_core.kernels import Kernels
    assert Kernels("cupyrawcpu", dtype=dtype, registry=registry).has("mlp")  # (not opt-in in this registry)
    check_model_step("cupyrawcpu", registry=registry, seed=0, dtype=dtype)


# ---- adamw: the GPU training step's contract -------------------------------------------------
def _adamw_reference(p, g, m, v, lr, step, b1, b2, eps, wd, scale):
    g = g.astype(np.float64) * scale
    m = b1 * m.astype(np.float64) + (1 - b1) * g
    v = b2 * v.astype(np.float64) + (1 - b2) * g * g
    p = p.astype(np.float64)
    p = p - lr * (m / (1 - b1 ** step) / (np.sqrt(v / (1 - b2 ** step)) + eps) + wd * p)
    return p, m, v


def _adamw_inputs(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    return {"param": rng.standard_normal(n).astype(np.float32), "grad": rng.standard_normal(n).astype(np.float32),
            "m": (rng.standard_normal(n) * 0.1).astype(np.float32),
            "v": (rng.standard_normal(n) ** 2 * 0.01).astype(np.float32)}


def _adamw(inputs, **attrs):
    from backends.cupy_raw import adamw
    full = {"beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_scale": 1.0, "max_norm": 0.0}
    full.update(attrs)
    with rt.emulation():
        adamw.forward(inputs, full)


@pytest.mark.parametrize("device_scalars", [False, True], ids=["python-numbers", "device-scalars"])
def test_adamw_clips_from_grad_sumsq_and_writes_the_bf16_copy(device_scalars):
    import ml_dtypes
    inputs = _adamw_inputs()
    before = {k: v.copy() for k, v in inputs.items()}
    sumsq = np.array([float((inputs["grad"].astype(np.float64) ** 2).sum())], dtype=np.float32)
    copy = np.full(inputs["param"].shape, np.nan, dtype=ml_dtypes.bfloat16)
    lr, step = 3e-3, 7
    if device_scalars:
        lr_arg, step_arg = np.array([lr], np.float32), np.array([step], np.float32)
    else:
        lr_arg, step_arg = lr, step
    _adamw({**inputs, "param_copy": copy, "grad_sumsq": sumsq}, lr=lr_arg, step=step_arg, max_norm=1.0)
    scale = min(1.0, 1.0 / math.sqrt(float(sumsq[0])))
    p, m, v = _adamw_reference(before["param"], before["grad"], before["m"], before["v"], lr, step, 0.9, 0.95,
                               1e-8, 0.1, scale)
    np.testing.assert_allclose(inputs["param"], p, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(inputs["m"], m, rtol=2e-6, atol=1e-8)
    np.testing.assert_allclose(inputs["v"], v, rtol=2e-6, atol=1e-10)
    np.testing.assert_array_equal(copy.astype(np.float32), inputs["param"].astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("bad", [np.inf, np.nan], ids=["inf", "nan"])
def test_adamw_skips_the_step_when_the_gradient_norm_is_not_finite(bad):
    import ml_dtypes
    inputs = _adamw_inputs()
    before = {k: v.copy() for k, v in inputs.items()}
    copy = np.full(inputs["param"].shape, 1.5, dtype=ml_dtypes.bfloat16)
    _adamw({**inputs, "param_copy": copy, "grad_sumsq": np.array([bad], np.float32)}, lr=1e-3, step=3, max_norm=1.0)
    for k in before:
        np.testing.assert_array_equal(inputs[k], before[k], err_msg=f"{k} changed on a skipped step")
    assert (copy.astype(np.float32) == 1.5).all(), "param_copy changed on a skipped step"


def test_adamw_refuses_clipping_without_grad_sumsq_and_bad_device_scalars():
    inputs = _adamw_inputs(8)
    with pytest.raises(ValueError, match="adamw: max_norm > 0.*grad_sumsq"):
        _adamw(inputs, lr=1e-3, step=1, max_norm=1.0)
    with pytest.raises(TypeError, match="adamw: a device scalar 'lr' must be a \\(1,\\) float32"):
        _adamw(inputs, lr=np.array([1e-3, 2e-3], np.float32), step=1)


# ---- the memory-bound kernels' vector and scalar paths --------------------------------------------
def _poisoned(shape, dtype):
    from backends.cupy_raw import _common
    return np.full(shape, np.nan, dtype=_common.np_dtype(dtype))


def _unaligned(a):
    """A copy of `a` whose data starts one element past a 16-byte boundary: the launchers then take
    their scalar path (vector loads refused)."""
    from backends.cupy_raw import _common
    buf = np.empty(a.size + 16, dtype=a.dtype)
    start = next(i for i in range(1, 16) if not _common.aligned(buf[i:]))
    view = buf[start:start + a.size].reshape(a.shape)
    view[...] = a
    return view


def _as(dtype, a, aligned=True):
    from backends.cupy_raw import _common
    out = np.asarray(a).astype(_common.np_dtype(dtype))
    return out if aligned else _unaligned(out)


def _check(name, got, ref, dtype, kind):
    from euler_core.numerics import compare, tolerance
    assert np.isfinite(got.astype(np.float64)).all(), f"{name}: not every element written (NaN left)"
    compare(name, got.astype(np.float64), ref, tolerance(dtype, kind))


GELU_SHAPES = [pytest.param((5, 3072), id="N5-C3072"), pytest.param((7, 37), id="N7-C37-tail"),
               pytest.param((3, 2731), id="prime-2-blocks")]


@pytest.mark.parametrize("aligned", [True, False], ids=["vector", "scalar-unaligned"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", GELU_SHAPES)
def test_gelu_vector_and_scalar_paths_match_float64(shape, dtype, aligned):
    """gelu.cu's packs of ITEMS a thread (several blocks, the n % 8 tail) and its one-element path
    for unaligned pointers, against the float64 naive GELU, outputs poisoned first."""
    from backends.cupy_raw import gelu
    from backends.naive import gelu as naive
    rng = np.random.default_rng(1)
    x64 = rng.uniform(-8.0, 8.0, size=shape)
    d64 = rng.standard_normal(shape)
    x, dout = _as(dtype, x64, aligned), _as(dtype, d64, aligned)
    y, dx = _poisoned(shape, dtype), _poisoned(shape, dtype)
    if not aligned:
        y, dx = _unaligned(y), _unaligned(dx)
    grads = {"x": dx}
    with rt.emulation():
        y, saved = gelu.forward({"x": x}, {}, out=y)
        gelu.backward(saved, dout, grads)
    ref_y, ref_saved = naive.forward({"x": x.astype(np.float64)}, {})
    ref_dx = naive.backward(ref_saved, dout.astype(np.float64), {})["x"]
    _check("gelu out", y, ref_y, dtype, "forward")
    _check("gelu dx", grads["x"], ref_dx, dtype, "gradient")


LAYERNORM_SHAPES = [pytest.param(20, 768, id="N20-C768"), pytest.param(2500, 40, id="N2500-C40-rows-per-warp"),
                    pytest.param(9, 37, id="N9-C37")]


@pytest.mark.parametrize("aligned", [True, False], ids=["vector", "scalar-unaligned"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("N,C", LAYERNORM_SHAPES)
def test_layernorm_vector_and_scalar_paths_match_float64(N, C, dtype, aligned):
    """layernorm.cu with 16-byte packs (C=768: 3 packs a lane in bf16; more rows than the backward's
    warps, so each warp walks several rows) and one element a load (C=37, or unaligned pointers),
    against float64 naive: y, mean/rstd and dx poisoned, dweight/dbias accumulated into float32
    buffers holding earlier sums (mixed precision for bf16)."""
    from backends.cupy_raw import layernorm
    from backends.naive import layernorm as naive
    rng = np.random.default_rng(2)
    x64, w64, b64 = rng.standard_normal((N, C)) * 2 + 0.5, 1 + 0.1 * rng.standard_normal(C), rng.standard_normal(C)
    d64 = rng.standard_normal((N, C))
    x, w, b, dout = (_as(dtype, a, aligned) for a in (x64, w64, b64, d64))
    gdt = "float32"
    dw0, db0 = rng.standard_normal(C), rng.standard_normal(C)
    grads = {"x": _poisoned((N, C), dtype), "weight": _as(gdt, dw0, aligned), "bias": _as(gdt, db0, aligned)}
    if not aligned:
        grads["x"] = _unaligned(grads["x"])
    y = _poisoned((N, C), dtype) if aligned else _unaligned(_poisoned((N, C), dtype))
    with rt.emulation():
        y, saved = layernorm.forward({"x": x, "weight": w, "bias": b}, {"eps": 1e-5}, out=y)
        layernorm.backward(saved, dout, grads)
    xs, ws, bs, ds = (a.astype(np.float64) for a in (x, w, b, dout))
    ref_y, ref_saved = naive.forward({"x": xs, "weight": ws, "bias": bs}, {"eps": 1e-5})
    ref = naive.backward(ref_saved, ds, {"weight": dw0.astype(np.float32).astype(np.float64),
                                        "bias": db0.astype(np.float32).astype(np.float64)})
    _check("layernorm y", y, ref_y, dtype, "forward")
    _check("layernorm mean", saved.mean, ref_saved.mean, "float32", "forward")
    _check("layernorm rstd", saved.rstd, ref_saved.rstd, "float32", "forward")
    _check("layernorm dx", grads["x"], ref["x"], dtype, "gradient")
    _check("layernorm dweight", grads["weight"], ref["weight"], dtype, "gradient")
    _check("layernorm dbias", grads["bias"], ref["bias"], dtype, "gradient")



@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("N,C", [pytest.param(20, 768, id="N20-C768"), pytest.param(9, 37, id="N9-C37")])
def test_layernorm_residual_backward_in_place_over_the_stream_gradient(N, C, dtype):
    """cupy_raw's layernorm_residual (layernorm.cu's fused-residual kernels) with da written over the
    stream's gradient dx itself, as its docstring allows: each row of dx is staged before its da row
    is stored, so the result is the out-of-place one bit for bit, and both match float64 naive."""
    from backends.cupy_raw import layernorm_residual
    from backends.naive import layernorm_residual as naive
    rng = np.random.default_rng(4)
    a, b = _as(dtype, rng.standard_normal((N, C)) * 2), _as(dtype, rng.standard_normal((N, C)))
    w, bias = _as(dtype, 1 + 0.1 * rng.standard_normal(C)), _as(dtype, rng.standard_normal(C))
    dx, dy = _as(dtype, rng.standard_normal((N, C))), _as(dtype, rng.standard_normal((N, C)))
    inputs = {"a": a, "b": b, "weight": w, "bias": bias}

    def grads(da):
        return {"a": da, "weight": np.zeros(C, np.float32), "bias": np.zeros(C, np.float32)}

    with rt.emulation():
        (x, y), saved = layernorm_residual.forward(inputs, {"eps": 1e-5})
        apart = layernorm_residual.backward(saved, (dx, dy), grads(_poisoned((N, C), dtype)))["a"]
        stream = dx.copy()
        in_place = layernorm_residual.backward(saved, (stream, dy), grads(stream))["a"]
    assert in_place is stream
    np.testing.assert_array_equal(in_place.astype(np.float64), apart.astype(np.float64))
    (ref_x, ref_y), ref_saved = naive.forward({k: v.astype(np.float64) for k, v in inputs.items()}, {"eps": 1e-5})
    ref = naive.backward(ref_saved, (dx.astype(np.float64), dy.astype(np.float64)),
                         {"weight": np.zeros(C), "bias": np.zeros(C)})
    _check("layernorm_residual x", x, ref_x, dtype, "forward")
    _check("layernorm_residual y", y, ref_y, dtype, "forward")
    _check("layernorm_residual da", apart, ref["a"], dtype, "gradient")

@pytest.mark.parametrize("n", [4099, 1001], ids=["N4099-3-blocks", "N1001-tail"])
@pytest.mark.parametrize("aligned", [True, False], ids=["vector", "scalar-unaligned"])
def test_adamw_vector_and_scalar_paths_in_mixed_precision(n, aligned):
    """adamw.cu's 8 elements a thread as 16-byte vectors (float32 state: 2 float4 an array; the bf16
    copy: 1 pack) and its one-element path (unaligned slices, the n % 8 tail), against float64."""
    import ml_dtypes
    inputs = {k: (a if aligned else _unaligned(a)) for k, a in _adamw_inputs(n, seed=3).items()}
    before = {k: v.astype(np.float64) for k, v in inputs.items()}
    copy = _poisoned((n,), "bfloat16")
    if not aligned:
        copy = _unaligned(copy)
    _adamw({**inputs, "param_copy": copy}, lr=1e-2, step=5)
    p, m, v = _adamw_reference(before["param"], before["grad"], before["m"], before["v"], 1e-2, 5, 0.9, 0.95,
                               1e-8, 0.1, 1.0)
    np.testing.assert_allclose(inputs["param"], p, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(inputs["m"], m, rtol=2e-6, atol=2e-7)  # float32 cancellation in m at |g| ~ 4
    np.testing.assert_allclose(inputs["v"], v, rtol=2e-6, atol=1e-10)
    np.testing.assert_array_equal(copy.astype(np.float32),
                                  inputs["param"].astype(ml_dtypes.bfloat16).astype(np.float32))


# ---- sumsq -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 1000, 300_001])
def test_sumsq_matches_float64_and_repeats_bitwise(n):
    from backends.cupy_raw import sumsq
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    with rt.emulation():
        a, _ = sumsq.forward({"x": x}, {})
        b, _ = sumsq.forward({"x": x}, {}, out=np.full((1,), np.nan, np.float32))
    assert a.shape == (1,) and a.dtype == np.float32
    np.testing.assert_allclose(a[0], (x.astype(np.float64) ** 2).sum(), rtol=1e-5)
    assert a.tobytes() == b.tobytes()


# ---- embedding: tokens held by more positions than one warp orders -----------------------------
@pytest.mark.parametrize("T,C,dtype,grad_dtype", [(4200, 8, "float32", "float32"), (1100, 264, "bfloat16", "float32"),
                                                  (1100, 20, "bfloat16", "bfloat16")],
                         ids=["T4200-C8-f32-2-order-passes", "C264-bf16-f32grad-2-column-blocks", "C20-bf16-elementwise"])
def test_embedding_backward_sums_frequent_and_rare_tokens_in_position_order(T, C, dtype, grad_dtype):
    """embedding_dwte's one-warp path (at most 32 positions a token: ranked by shuffles) and the
    heavy path (more: embedding_order puts the bucket in position order, embedding_dwte_heavy's 32
    warps sum slices of it) in one batch: token 1 at most positions, 2 at 40 (just past the warp's
    32), 3 at 32 (the warp's most), the rest rare; 8,400 positions take embedding_order two passes
    of 8,192; C = 264 spans two blocks of 256 columns, C = 20 is not a multiple of the 8-column pieces. The
    gradients accumulate onto nonzero buffers, against float64; a second run is bitwise the same."""
    from backends.cupy_raw import embedding
    from euler_core.numerics import np_dtype
    as_dtype = lambda a, name: np.asarray(a, dtype=np.float32).astype(np_dtype(name))  # noqa: E731
    B, V = 2, 9
    rng = np.random.default_rng(0)
    tokens = np.ones((B, T), dtype=np.int32)
    spots = rng.permutation(B * T)
    for tok, (lo, hi) in {2: (0, 40), 3: (40, 72), 4: (72, 75), 5: (75, 76), 7: (76, 80)}.items():
        tokens.reshape(-1)[spots[lo:hi]] = tok
    wte, wpe = (as_dtype(rng.standard_normal(shape).astype(np.float32), dtype) for shape in ((V, C), (T, C)))
    dout = as_dtype(rng.standard_normal((B, T, C)).astype(np.float32), dtype)
    start = {"wte": rng.standard_normal((V, C)).astype(np.float32), "wpe": rng.standard_normal((T, C)).astype(np.float32)}
    results = []
    for _ in range(2):
        grads = {k: as_dtype(v, grad_dtype) for k, v in start.items()}
        with rt.emulation():
            y, saved = embedding.forward({"tokens": tokens, "wte": wte, "wpe": wpe}, {})
            embedding.backward(saved, dout, grads)
        results.append(grads)
    f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    np.testing.assert_allclose(f64(y), f64(wte)[tokens] + f64(wpe)[None], rtol=1e-2 if dtype != "float32" else 1e-6)
    ref_wte = f64(as_dtype(start["wte"], grad_dtype))
    np.add.at(ref_wte, tokens.reshape(-1), f64(dout).reshape(-1, C))
    ref_wpe = f64(as_dtype(start["wpe"], grad_dtype)) + f64(dout).sum(axis=0)
    tol = 1e-4 if grad_dtype == "float32" else 3e-2
    np.testing.assert_allclose(f64(results[0]["wte"]), ref_wte, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(f64(results[0]["wpe"]), ref_wpe, rtol=tol, atol=tol)
    for k in ("wte", "wpe"):
        assert np.asarray(results[0][k]).tobytes() == np.asarray(results[1][k]).tobytes(), f"d{k} not repeatable"


def _check_attention(qkv, dy, NH, dtype, dqkv, y=None):
    """y (if given) and dqkv of attention against float64 naive on the same rounded inputs; the
    gradient held to the bound with the benchmark's allowance for bf16 rounding tails (P and dS
    rounded to 16 bits put a rare element just past it, from flash's kernels as well)."""
    from euler_core.measure.ops import OUTLIER_FACTOR, OUTLIERS_PER_MILLION
    from euler_core.numerics import compare, tolerance
    from backends.naive import attention as naive
    ref_y, ref_saved = naive.forward({"qkv": qkv.astype(np.float64)}, {"n_head": NH})
    ref = naive.backward(ref_saved, dy.astype(np.float64), {})
    if y is not None:
        _check("attention y", y, ref_y, dtype, "forward")
    assert np.isfinite(dqkv.astype(np.float64)).all(), "attention dqkv: not every element written"
    compare("attention dqkv", dqkv.astype(np.float64), ref["qkv"], tolerance(dtype, "gradient"),
            outliers_per_million=OUTLIERS_PER_MILLION, outlier_factor=OUTLIER_FACTOR)


def _run_attention(impl, qkv, dy, NH, dtype):
    """The kernels impl launches for a forward and backward (recorded), then both run in the
    emulator with y and dqkv poisoned first: (kernel names, y, dqkv)."""
    B, T, C3 = qkv.shape
    with rt.recording() as rec:
        impl.backward(impl.forward({"qkv": qkv}, {"n_head": NH})[1], dy, {})
    grads = {"qkv": _poisoned((B, T, C3), dtype)}
    with rt.emulation():
        y, saved = impl.forward({"qkv": qkv}, {"n_head": NH}, out=_poisoned((B, T, C3 // 3), dtype))
        impl.backward(saved, dy, grads)
    return [k.kernel for k in rec], y, grads["qkv"]


# ---- attention wgmma: the Hopper kernels at heads of 64 ----------------------------------------------
@pytest.mark.parametrize("groups,rings,producer,keys",
                         [(2, None, False, 64), (1, None, False, 64), (2, ((2, 1), (2, 1)), False, 64),
                          (1, ((4, 3), (4, 3)), False, 64), (2, ((3, 1), (2, 1)), True, 64), (1, None, True, 64),
                          (2, ((2, 1), (3, 2)), False, 128), (1, ((3, 1), (3, 2)), True, 128)],
                         ids=["2-warpgroups", "1-warpgroup", "2-warpgroups-ring2-ahead1", "1-warpgroup-ring4-ahead3",
                              "2-warpgroups-producer-ring3-2", "1-warpgroup-producer", "2-warpgroups-128-keys-ring2",
                              "1-warpgroup-128-keys-producer-ring3"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("B,T,NH", [(2, 201, 2), (2, 64, 1)], ids=["T201-4-tiles-ragged", "T64-one-tile"])
def test_wgmma_attention_matches_float64_at_heads_of_64(B, T, NH, dtype, groups, rings, producer, keys, monkeypatch):
    """attention.cu's wgmma kernels (the emulator's wgmma reads the swizzled tiles through their
    descriptors and gathers the register A operand of P V by its fragment layout; its TMA copies the
    boxes, zeros past the arrays' extents, and its mbarriers count arrivals and bytes), with one and
    two warpgroups a block, rings of TMA slots other than the shipped ones (T201 walks 4 tiles, so
    the slots' parities turn over; its rows of L and delta are padded to 204 floats), with a
    producer warp issuing the copies, and with the forward's stages of 64 and of 128 keys (T201: two
    stages, the second ragged; T64: one, its second half past T): y and dqkv poisoned, against float64 naive on the same rounded
    inputs (_check_attention); the launches must be the wgmma kernels, and a head of 32 must fall
    back to flash's."""
    from backends.cupy_raw import attention
    monkeypatch.setattr(attention.wgmma, "forward_groups", groups)
    monkeypatch.setattr(attention.wgmma, "backward_groups", groups)
    if rings:
        monkeypatch.setattr(attention.wgmma, "forward_ring", rings[0])
        monkeypatch.setattr(attention.wgmma, "backward_ring", rings[1])
    monkeypatch.setattr(attention.wgmma, "producer", producer)
    monkeypatch.setattr(attention.wgmma, "forward_keys", keys)
    C = 64 * NH
    rng = np.random.default_rng(3)
    qkv, dy = _as(dtype, rng.standard_normal((B, T, 3 * C))), _as(dtype, rng.standard_normal((B, T, C)))
    kernels, y, dqkv = _run_attention(attention.wgmma, qkv, dy, NH, dtype)
    assert kernels == ["attention_wgmma_forward", "attention_wgmma_backward_dq", "attention_wgmma_backward_dkdv"]
    _check_attention(qkv, dy, NH, dtype, dqkv, y)
    with rt.recording() as rec:
        attention.wgmma.forward({"qkv": _as(dtype, rng.standard_normal((1, 8, 3 * 64)))}, {"n_head": 2})
    assert [k.kernel for k in rec] == ["attention_flash_forward"]


@pytest.mark.parametrize("ring,sms", [(2, 3), (4, 3), (3, 132)], ids=["ring2-3-blocks", "ring4-3-blocks", "ring3-a-block-an-item"])
@pytest.mark.parametrize("B,T,NH", [(2, 201, 2), (3, 384, 2), (1, 64, 1)], ids=["T201-ragged", "T384-3-query-tiles", "T64-one-item"])
def test_wgmma_overlapped_forward_is_the_in_turn_forward(B, T, NH, ring, sms, monkeypatch):
    """The overlapped forward (attention.cu's FWD_OVERLAPPED: persistent blocks, a producer warp, each
    warpgroup's softmax under its previous stage's P V) makes y, res and L bit for bit as the in-turn
    forward does (the same arithmetic in the same order), and the backward takes its saved tensors.
    Three blocks for up to 18 items: each walks several, so the Q slots' and the ring's parities turn
    over across items of 1 to 3 stages; 132 blocks: an item each."""
    from backends.cupy_raw import _common, attention
    C = 64 * NH
    rng = np.random.default_rng(11)
    qkv, dy = _as("bfloat16", rng.standard_normal((B, T, 3 * C))), _as("bfloat16", rng.standard_normal((B, T, C)))
    with rt.emulation():
        y_turn, saved_turn = attention.wgmma.forward({"qkv": qkv}, {"n_head": NH}, out=_poisoned((B, T, C), "bfloat16"))
    monkeypatch.setattr(attention.wgmma, "forward_schedule", "overlapped")
    monkeypatch.setattr(attention.wgmma, "forward_ring", (ring, 1))
    monkeypatch.setattr(_common, "num_sms", lambda xp: sms)
    with rt.recording() as rec:
        attention.wgmma.forward({"qkv": qkv}, {"n_head": NH})
    (launch,) = rec
    n_items = -(-T // 128) * NH * B
    assert launch.kernel == "attention_wgmma_forward_overlapped" and launch.grid[0] == min(sms, n_items)
    with rt.emulation():
        y, saved = attention.wgmma.forward({"qkv": qkv}, {"n_head": NH}, out=_poisoned((B, T, C), "bfloat16"))
    for name, ours, theirs in (("y", y, y_turn), ("res", saved.res, saved_turn.res), ("L", saved.lse, saved_turn.lse)):
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        if name == "L":  # (the rows' padding past T is never written)
            ours, theirs = ours[..., :T], theirs[..., :T]
        assert np.array_equal(ours.view(np.uint8), theirs.view(np.uint8)), f"overlapped forward: {name} differs"
    grads = {"qkv": _poisoned(qkv.shape, "bfloat16")}
    with rt.emulation():
        attention.wgmma.backward(saved, dy, grads)
    _check_attention(qkv, dy, NH, "bfloat16", grads["qkv"], y)


def test_wgmma_forward_schedule_must_be_known(monkeypatch):
    from backends.cupy_raw import attention
    monkeypatch.setattr(attention.wgmma, "forward_schedule", "pingpong")
    qkv = _as("bfloat16", np.random.default_rng(0).standard_normal((1, 8, 3 * 64)))
    with pytest.raises(ValueError, match="schedule is 'in_turn' or 'overlapped', got 'pingpong'"), rt.recording():
        attention.wgmma.forward({"qkv": qkv}, {"n_head": 1})


@pytest.mark.parametrize("groups", [1, 2], ids=["1-warpgroup", "2-warpgroups"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("B,T,NH", [(2, 201, 2), (1, 64, 1)], ids=["T201-ragged", "T64-one-tile"])
def test_wgmma_dq_writes_the_delta_pass_delta_bit_for_bit(B, T, NH, dtype, groups, monkeypatch):
    """The wgmma backward has no delta pass: its dQ kernel makes delta from y, res and dy before its
    first tile (a warp's 16 rows four at a time, rows past T reading row T - 1 and counting 0: T201's
    last block holds 9 live rows of 64) and writes it for the dK/dV kernel, launched after it. The
    delta it writes (poisoned first), row by row up to T, bitwise the delta pass's on the same
    tensors with the same defines, with one and two warpgroups a block."""
    from backends.cupy_raw import attention
    monkeypatch.setattr(attention.wgmma, "backward_groups", groups)
    C = 64 * NH
    rng = np.random.default_rng(11)
    qkv, dy = _as(dtype, rng.standard_normal((B, T, 3 * C))), _as(dtype, rng.standard_normal((B, T, C)))
    launched, launch = [], rt.launch

    def noting(k, grid, block, args, shared_mem=0):
        launched.append((k, args))
        if k.name == "attention_wgmma_backward_dq":
            args[3][...] = np.nan  # delta, as the launcher allocated it
        launch(k, grid, block, args, shared_mem)

    monkeypatch.setattr(rt, "launch", noting)
    with rt.emulation():
        _, saved = attention.wgmma.forward({"qkv": qkv}, {"n_head": NH})
        attention.wgmma.backward(saved, dy, {})
        assert [k.name for k, _ in launched] == ["attention_wgmma_forward", "attention_wgmma_backward_dq",
                                                 "attention_wgmma_backward_dkdv"]
        dq_kernel, dq_args = launched[1]
        got = dq_args[3]
        want = np.full_like(got, np.nan)
        lanes = dq_kernel.defines["DELTA_LANES"]
        launch(rt.function("attention", "attention_flash_delta", dq_kernel.defines, arch="sm_90a"),
               rt.cdiv(B * T * NH * lanes, 128), 128,
               (saved.y, saved.res, dy, want, np.int32(B), np.int32(T), np.int32(C), np.int32(NH)))
    got, want = got[:, :, :T], want[:, :, :T]  # (the padding past T is never written)
    assert np.isfinite(got).all(), "the dQ kernel left rows of delta unwritten"
    assert got.tobytes() == want.tobytes(), \
        f"delta differs from the delta pass's in {int((got != want).sum())} of {got.size} rows"


@pytest.mark.parametrize("variant,keys", [("flash", 64), ("wgmma", 64), ("wgmma", 128)],
                         ids=["flash", "wgmma", "wgmma-128-key-stages"])
def test_attention_rescales_when_a_later_tile_holds_far_larger_scores(variant, keys, monkeypatch):
    """Keys that grow along the sequence put each tile's scores far above the last's, so every row's
    running max moves by far more than random inputs of unit scale ever make it, and the output is
    rescaled by factors far from 1 at every tile (the path a lazy rescale, one that waits for the
    max to move by 2^8, would take; tried at 0acd58c, no faster on the H200): y and L (through the
    backward's gradient) against float64 naive."""
    from backends.cupy_raw import attention
    from backends.naive import attention as naive
    B, T, NH, C = 1, 256, 1, 64
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, T, 3 * C))
    x[:, :, :C] = np.abs(x[:, :, :C]) + 0.5                           # queries: positive
    x[:, :, C:2 * C] = (np.abs(x[:, :, C:2 * C]) + 0.5) * np.linspace(0.2, 6.0, T)[None, :, None]  # growing keys
    qkv, dy = _as("float16", x), _as("float16", rng.standard_normal((B, T, C)))
    impl = getattr(attention, variant)
    if variant == "wgmma":
        monkeypatch.setattr(impl, "forward_keys", keys)
    grads = {"qkv": _poisoned((B, T, 3 * C), "float16")}
    with rt.emulation():
        y, saved = impl.forward({"qkv": qkv}, {"n_head": NH}, out=_poisoned((B, T, C), "float16"))
        impl.backward(saved, dy, grads)
    ref_y, ref_saved = naive.forward({"qkv": qkv.astype(np.float64)}, {"n_head": NH})
    ref = naive.backward(ref_saved, dy.astype(np.float64), {})
    scores = np.einsum("tc,sc->ts", x[0, :, :C], x[0, :, C:2 * C]) / 8 * 1.4426950408889634
    assert np.tril(scores).max(axis=1)[192:].min() > np.tril(scores)[:, :64].max() + 3 * 8, \
        "the inputs must put each late row's max far above its first tile's"
    _check("attention y", y, ref_y, "float16", "forward")
    _check("attention dqkv", grads["qkv"], ref["qkv"], "float16", "gradient")


@pytest.mark.parametrize("C,NH,aligned,lanes", [(16, 2, True, 2), (48, 2, True, 4), (96, 2, True, 8),
                                                (256, 2, True, 16), (24, 2, True, None), (128, 2, False, None)],
                         ids=["HS8-2-lanes", "HS24-4-lanes-one-idle", "HS48-8-lanes-two-idle", "HS128-16-lanes",
                              "HS12-a-warp", "HS64-unaligned-a-warp"])
def test_flash_delta_pass_at_every_lane_count(C, NH, aligned, lanes):
    """The backward's delta pass (rowsum(dy * (y + res)) of every row and head) takes HEAD_DIM / 8
    lanes a row rounded up to a power of two with 16-byte loads, or a warp a row element by element
    where vector loads are refused: every lane count, lanes left idle where the head is narrower
    than the group, and the warp path; T=9 leaves the L_STRIDE padding of each row (12 floats). The
    gradient it feeds against float64 naive, dqkv poisoned first."""
    from backends.cupy_raw import attention
    from backends.naive import attention as naive
    B, T, dtype = 2, 9, "bfloat16"
    rng = np.random.default_rng(7)
    qkv = _as(dtype, rng.standard_normal((B, T, 3 * C)))
    dy = _as(dtype, rng.standard_normal((B, T, C)), aligned=aligned)
    with rt.recording() as rec:
        attention.flash.backward(attention.flash.forward({"qkv": qkv}, {"n_head": NH})[1], dy, {})
    delta = next(k for k in rec if k.kernel == "attention_flash_delta")
    assert delta.defines.get("DELTA_LANES") == lanes
    grads = {"qkv": _poisoned((B, T, 3 * C), dtype)}
    with rt.emulation():
        y, saved = attention.flash.forward({"qkv": qkv}, {"n_head": NH})
        attention.flash.backward(saved, dy, grads)
    ref_y, ref_saved = naive.forward({"qkv": qkv.astype(np.float64)}, {"n_head": NH})
    ref = naive.backward(ref_saved, dy.astype(np.float64), {})
    _check("attention dqkv", grads["qkv"], ref["qkv"], dtype, "gradient")


# ---- attention_cached: the KV cache's views, read in place ------------------------------------------
def test_attention_cached_reads_the_caches_views_in_place():
    from backends.cupy_raw import attention_cached
    from backends.naive import attention_cached as naive
    B, Tn, Tk, maxT, C, NH = 2, 3, 11, 16, 24, 3
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((B, Tn, 3 * C)).astype(np.float32)
    k_cache, v_cache = (rng.standard_normal((B, maxT, C)).astype(np.float32) for _ in range(2))
    inputs = {"q": qkv[:, :, :C], "k": k_cache[:, :Tk], "v": v_cache[:, :Tk]}  # views, as kvcache.py passes them
    with rt.emulation():
        y, _ = attention_cached.forward(inputs, {"n_head": NH})
    ref, _ = naive.forward({k: np.ascontiguousarray(v).astype(np.float64) for k, v in inputs.items()}, {"n_head": NH})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


# ---- errors before launch ------------------------------------------------------------------------
def test_wide_rows_and_heads_are_refused_before_launch():
    from backends.cupy_raw import attention, layernorm, layernorm_residual
    with rt.recording() as rec, pytest.raises(ValueError, match="layernorm: .*at most 2048 channels"):
        layernorm.forward({"x": np.ones((2, 4096), np.float32), "weight": np.ones(4096, np.float32),
                           "bias": np.ones(4096, np.float32)}, {"eps": 1e-5})
    with pytest.raises(ValueError, match="layernorm_residual: .*at most 2048 channels"):
        wide = np.ones((2, 4096), np.float32)
        layernorm_residual.forward({"a": wide, "b": wide, "weight": np.ones(4096, np.float32),
                                    "bias": np.ones(4096, np.float32)}, {"eps": 1e-5})
    with pytest.raises(ValueError, match="attention: .*flash variant takes head sizes up to 128"):
        attention.flash.forward({"qkv": np.ones((1, 4, 3 * 256), np.float16)}, {"n_head": 1})
    with pytest.raises(ValueError, match="attention: .*wgmma variant takes head sizes up to 128"):
        attention.wgmma.forward({"qkv": np.ones((1, 4, 3 * 256), np.float16)}, {"n_head": 1})
    assert not rec


def test_python_scalars_are_refused_at_launch():
    with rt.recording():
        k = rt.function("gelu", "gelu_forward", {"floatX": "float"})
        x = np.ones(4, np.float32)
        with pytest.raises(TypeError, match="argument 2 is a int.*exact C type"):
            rt.launch(k, 1, 32, (x, x, 4, np.int32(1)))
        with pytest.raises(TypeError, match="parameter 'long long n' needs np.int64, got int32"):
            rt.launch(k, 1, 32, (x, x, np.int32(4), np.int32(1)))


# ---- the emulator itself -------------------------------------------------------------------------
#: kernels that can never finish -> (the backend's headers they include, body, defines, dynamic shared
#: bytes, the error expected): a barrier half a warp never reaches (the scheduler finds no thread that
#: can run), and a spin on an mbarrier phase no arrival will complete (every other thread done: the
#: wait sees no progress anywhere and ends the launch with its message, not a hang or an abort)
_NEVER_FINISH = {
    "divergent": ((), "    if (threadIdx.x % 32 < 16) x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);  // half a warp\n"
                      "    else __syncthreads();                                                  // the other half\n",
                  None, 0, "divergent deadlocked"),
    "stuck": (("common.cuh", "tensor_core.cuh", "tma.cuh"),
              "    extern __shared__ __align__(16) unsigned char smem[];\n"
              "    const unsigned bar = smem_u32(smem);\n"
              "    if (threadIdx.x == 0) mbar_init(bar, 2);  // two arrivals a phase, and only thread 0 arrives\n"
              "    __syncthreads();\n"
              "    if (threadIdx.x == 0) mbar_arrive(bar);\n"
              "    mbar_wait(bar, 0);\n"
              "    x[threadIdx.x] = 1.0f;\n",
              {"floatX": "float"}, 16, r"stuck: .*thread \d+ of block 0 waits forever on the mbarrier"),
}


@pytest.mark.parametrize("name", list(_NEVER_FINISH))
def test_the_emulator_reports_a_launch_that_cannot_finish(tmp_path, monkeypatch, name):
    headers, body, defines, shared, match = _NEVER_FINISH[name]
    for header in headers:
        shutil.copy(_source.SOURCE_DIR / header, tmp_path / header)
    (tmp_path / f"{name}.cu").write_text("".join(f'#include "{h}"\n' for h in headers)
                                         + f'extern "C" __global__ void {name}(float* x) {{\n{body}}}\n')
    monkeypatch.setattr(_source, "SOURCE_DIR", tmp_path)
    x = np.zeros(64, np.float32)
    with rt.emulation(), pytest.raises(RuntimeError, match=match):
        rt.launch(rt.function(name, name, defines), 1, 64, (x,), shared_mem=shared)


@pytest.mark.parametrize("barrier", [True, False], ids=["synchronised", "racy"])
def test_the_emulator_runs_blocks_threads_shuffles_and_shared_memory(tmp_path, monkeypatch, barrier):
    """Each thread reads another's shared element: right after a barrier; without one, the emulator's
    poisoned shared memory (NaN) shows the race, where a GPU would often hide it."""
    (tmp_path / "probe.cu").write_text(
        '#include "common.cuh"\n'
        'extern "C" __global__ void probe(const float* x, float* out, int n) {\n'
        "    extern __shared__ float rows[];\n"
        "    __shared__ float scratch[32];\n"
        "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    rows[threadIdx.x] = i < n ? x[i] : 0.0f;\n"
        + ("    __syncthreads();\n" if barrier else "") +
        "    const float total = block_sum(rows[blockDim.x - 1 - threadIdx.x], scratch);\n"
        "    if (i < n) out[i] = total + warp_max(x[i]);\n"
        "}\n")
    (tmp_path / "common.cuh").write_text((_source.SOURCE_DIR / "common.cuh").read_text())
    monkeypatch.setattr(_source, "SOURCE_DIR", tmp_path)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    out = np.full(256, np.nan, np.float32)
    with rt.emulation():
        rt.launch(rt.function("probe", "probe"), 2, 128, (x, out, np.int32(256)), shared_mem=128 * 4)
    if not barrier:
        assert np.isnan(out).all()
        return
    blocks = x.reshape(2, 128)
    expected = blocks.sum(axis=1)[:, None] + blocks.reshape(2, 4, 32).max(axis=2).repeat(32, axis=1)
    np.testing.assert_allclose(out.reshape(2, 128), expected, rtol=1e-5)


def _check_onepass(logits, targets, dlosses, n_valid, dtype):
    """cupy_raw's crossentropy_onepass in the emulator, dlogits poisoned first: losses and dlogits
    against float64 naive, the padded columns exactly 0."""
    from backends.cupy_raw import crossentropy_onepass as onepass
    from backends.naive import crossentropy as naive
    with rt.emulation():
        losses, saved = onepass.forward({"logits": logits, "targets": targets, "dlosses": dlosses}, {"n_valid": n_valid})
        dlogits = np.full(logits.shape, np.nan, dtype=logits.dtype)
        onepass.backward(saved, dlosses, {"logits": dlogits})
    z = logits.astype(np.float64)
    ref_losses, ref_saved = naive.forward({"logits": z, "targets": targets}, {"n_valid": n_valid})
    ref_dlogits = naive.backward(ref_saved, dlosses.astype(np.float64), {})["logits"]
    _check("losses", losses, ref_losses, dtype, "forward")
    _check("dlogits", dlogits, ref_dlogits, dtype, "gradient")
    assert (dlogits.astype(np.float64)[..., n_valid:] == 0).all(), "padded columns of dlogits not 0"


@pytest.mark.parametrize("staged", [True, False], ids=["row-in-shared-memory", "row-read-again"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_crossentropy_onepass_staged_and_unstaged_match_float64(dtype, staged, monkeypatch):
    """crossentropy_onepass.cu's second walk from the row's copy in shared memory, and (a row too
    large for it: here the limit is lowered) from the logits again, 16-byte packs with the pack that
    straddles n_valid, an ignored row; losses and dlogits against float64 naive, dlogits poisoned."""
    from backends.cupy_raw import crossentropy_onepass as onepass
    if not staged:
        monkeypatch.setattr(rt, "MAX_SHARED_PER_BLOCK", 256)
    rng = np.random.default_rng(3)
    B, T, V, n_valid = 2, 3, 96, 83
    logits = _as(dtype, 3 * rng.standard_normal((B, T, V)))
    targets = rng.integers(0, n_valid, (B, T))
    targets[1, 2] = -1
    dlosses = rng.standard_normal((B, T)).astype(np.float32)
    with rt.recording() as rec:
        onepass.forward({"logits": logits, "targets": targets, "dlosses": dlosses}, {"n_valid": n_valid})
    # staged: the exps (as wide as the logits), then one group max a thread (96 logits: one group)
    assert rec[0].shared_mem == (V * logits.itemsize + 4 * onepass.THREADS if staged else 0)
    _check_onepass(logits, targets, dlosses, n_valid, dtype)


@pytest.mark.parametrize("n_valid", [2090, 700], ids=["pad-in-last-group", "groups-all-padding"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_crossentropy_onepass_groups_of_kept_exps_match_float64(dtype, n_valid, monkeypatch):
    """The staged walks over several groups a thread (32 threads, so 128 packs between a thread's
    groups): each group's max and kept exps, the scale walk 2 gives them, groups wholly past n_valid
    (their max never set), the tail past the last pack (V = 2100 is not a multiple of 8); logits
    spread widely, so that groups' maxima lie far apart and far below the row's."""
    from backends.cupy_raw import crossentropy_onepass as onepass
    monkeypatch.setattr(onepass, "THREADS", 32)
    rng = np.random.default_rng(4)
    B, T, V = 2, 2, 2100
    logits = _as(dtype, 6 * rng.standard_normal((B, T, V)) + np.linspace(-20, 8, V))
    targets = rng.integers(0, n_valid, (B, T))
    targets[0, 1] = n_valid - 1
    dlosses = rng.standard_normal((B, T)).astype(np.float32)
    _check_onepass(logits, targets, dlosses, n_valid, dtype)
