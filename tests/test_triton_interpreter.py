"""The triton backend's kernels under Triton's interpreter, on NumPy arrays: no GPU needed.

Every kernel runs through the conformance suite's own case checks (against float64 naive, out=
poisoned with NaN, gradients accumulated twice, activation buffers overwritten, inputs unchanged,
bitwise repeatable) at the suite's awkward shapes, in float32 and float16 (bfloat16 arithmetic is
wrong in Triton 3.6's interpreter: bf16 is checked on the GPU, reports/triton-h200/). A few cases
that take the interpreter many seconds are left to the GPU run; SLOW names them.

Plus the errors a caller gets before any launch: head size too large, wrong dtype, non-contiguous
input, NumPy arrays outside the interpreter, gradient buffers of a wrong dtype (mixed precision:
float32 parameter gradients of 16-bit inputs are right); the embedding backward's device-side radix
sort at awkward sizes; and a static guard against calls that break a CUDA-graph capture.
"""

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("triton", reason="triton not installed (pip install -e '.[gpu]' or triton==3.6.0)")

from backends.triton import _runtime  # noqa: E402
from backends.triton._testing import interpreted_variant  # noqa: E402
from backends.triton.plugin import _VARIANTS  # noqa: E402
from conformance.cases import CASES  # noqa: E402
from conformance.runner import PASSED, run_case  # noqa: E402

#: (op, case, dtype) the interpreter takes > 3 s for; they run in the H200 conformance run
SLOW = {("layernorm", "T257", "float32"), ("layernorm", "T257", "float16"),
        ("matmul", "K768-M2304", "float32"), ("matmul", "K768-M2304", "float16"),
        ("matmul", "N128-K65-M96", "float16"), ("attention", "T257", "float32"),
        ("attention", "HS64", "float32"), ("embedding", "T128", "float16"),
        ("layernorm_residual", "C768", "float32"), ("layernorm_residual", "C768", "float16"),
        ("matmul_gelu", "N128-K65-M96", "float16"), ("matmul_gelu", "K768-M3072", "float32"),
        ("matmul_gelu", "K768-M3072", "float16"), ("classifier_crossentropy", "V257", "float32"),
        ("classifier_crossentropy", "V257", "float16"), ("classifier_crossentropy", "C768-V2048", "float32"),
        ("classifier_crossentropy", "C768-V2048", "float16"),
        ("classifier_crossentropy", "T17-C36-V37", "float32"),  # in 5 chunks below instead
        # float32 logits and GEMMs of the classifier are covered by the 5-chunk test below; c_fc's
        # SCALE_A path in float32 by the other matmul_gelu cases
        ("classifier_crossentropy", "small", "float32"), ("classifier_crossentropy", "padded-vocab", "float32"),
        ("classifier_crossentropy", "large-logits", "float32"), ("matmul_gelu", "N128-K65-M96", "float32"),
        ("gelu_matmul", "K3072-M768", "float32"), ("gelu_matmul", "K3072-M768", "float16")}

OPS = list(dict.fromkeys(op for op, _, _ in _VARIANTS))  # the ops this backend implements
pytestmark = [pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning"),
              # GELU's exp(-2u) at pre ~ -15 is inf in float32, as on the GPU, and 1 / (1 + inf) = 0 is meant
              pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")]

_MANY = {op for op in OPS if sum(o == op for o, _, _ in _VARIANTS) > 1}  # ops with several variants
PARAMS = [pytest.param(op, name, case.name, dtype, id=f"{op}{':' + name if op in _MANY else ''}-{case.name}-{dtype}")
          for op, name, _ in _VARIANTS for case in CASES[op] for dtype in ("float32", "float16")
          if (op, case.name, dtype) not in SLOW]


@pytest.mark.parametrize("op,variant,case,dtype", PARAMS)
def test_case_checks_under_interpreter(op, variant, case, dtype):
    results = run_case(interpreted_variant(op, variant), op, case, dtype, seed=0)
    assert results, "no check ran"
    bad = [str(r) for r in results if r.status != PASSED]
    assert not bad, "\n".join(bad)


def _qkv(B, T, C, dtype="float32"):
    return np.random.default_rng(0).standard_normal((B, T, 3 * C)).astype(dtype)


def test_attention_refuses_head_size_over_128_before_launch():
    from backends.triton import attention
    with _runtime.recording() as rec, pytest.raises(ValueError, match="attention.*head sizes up to 128"):
        attention.forward({"qkv": _qkv(1, 4, 256)}, {"n_head": 1})
    assert not rec


@pytest.mark.parametrize("hs", [32, 64, 128])
def test_attention_takes_the_issue_head_sizes(hs):
    from backends.triton import attention
    with _runtime.recording() as rec:
        attention.forward({"qkv": _qkv(1, 8, 2 * hs)}, {"n_head": 2})
    assert rec and rec[0]["constexprs"]["BLOCK_D"] == hs


def test_flash_is_the_default_attention_and_ordered_a_named_variant():
    # the first variant listed is the default (plugin.py): `ordered` is 0.84-0.86x flash's backward
    # on the H200 (reports/triton-h200/notes-attention.md, "Eighth session"), so only when named
    from euler_core.registry import get_registry
    assert [v.name for v in get_registry().backend("triton").variants_of("attention")] == ["flash", "ordered"]


def test_tiles_refuse_an_unknown_dq_order():
    from backends.triton import attention
    with pytest.raises(ValueError, match="bwd_dq is 'walk' or 'ordered', got 'atomic'"):
        replace(attention.TILES[("16bit", 64)], bwd_dq="atomic")


def test_ordered_backward_adds_dq_in_key_block_order_at_several_block_shapes():
    """The ordered backward at tiles the registered variant does not take (queries a step smaller
    than the key block: several first adders per diagonal), ragged T, against the walk's backward,
    and repeatable. (Under the interpreter the programs run one after another, in ticket order, so
    the waits are met at once: the ordering itself is checked on the GPU, 10 calls bitwise equal at
    3,072 programs, reports/triton-h200/attention-ordered-f3ad957/.)"""
    from backends.triton import attention
    qkv = _qkv(1, 130, 64)
    dy = np.random.default_rng(1).standard_normal((1, 130, 64)).astype("float32")
    with _runtime.interpreter():
        y, saved = attention.forward({"qkv": qkv}, {"n_head": 2})
        walk = attention.backward(saved, dy, {})["qkv"].astype(np.float64)
        for block, step in ((32, 16), (32, 32), (64, 16)):
            t = replace(attention.tiles("float32", 130, 32), bwd=block, bwd_m1=step, bwd_n2=step, bwd_dq="ordered")
            first = attention.backward_tiled(t, saved, dy, {})["qkv"]
            np.testing.assert_allclose(first, walk, rtol=1e-5, atol=1e-5 * np.abs(walk).max())
            np.testing.assert_array_equal(attention.backward_tiled(t, saved, dy, {})["qkv"], first)


def test_attention_backward_computes_unpublished_deltas_itself(monkeypatch):
    """A program whose later blocks have not published their delta yet (flag still 0: they started
    late) computes those deltas itself instead of waiting. With publishing switched off (the flag's
    atomic exchange turned into an atomic read), every program takes that path: the same gradient,
    bit for bit."""
    from triton._C.libtriton import ir
    from triton.runtime import interpreter

    from backends.triton import attention
    qkv = _qkv(2, 200, 32)  # ragged T, several blocks a head
    dy = np.random.default_rng(1).standard_normal((2, 200, 32)).astype("float32")
    with _runtime.interpreter():
        y, saved = attention.forward({"qkv": qkv}, {"n_head": 2})
        published = attention.backward(saved, dy, {})["qkv"].copy()
        original = interpreter.InterpreterBuilder.create_atomic_rmw
        flag_writes = []

        def never_publish(self, op, ptr, val, mask, sem, scope):
            if op == ir.ATOMIC_OP.XCHG:
                flag_writes.append(op)
                op, val = ir.ATOMIC_OP.ADD, interpreter.TensorHandle(np.zeros_like(val.data), val.dtype)
            return original(self, op, ptr, val, mask, sem, scope)

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_atomic_rmw", never_publish)
        computed_here = attention.backward(saved, dy, {})["qkv"]
    assert flag_writes, "the backward published no flag: the path under test was not reached"
    assert np.isfinite(published).all()
    np.testing.assert_array_equal(computed_here, published)


def test_wrong_dtype_and_layout_are_refused_before_launch():
    from backends.triton import gelu, matmul
    with _runtime.recording() as rec:
        with pytest.raises(TypeError, match="gelu.*float64"):
            gelu.forward({"x": np.ones((4, 4))}, {})
        with pytest.raises(ValueError, match="gelu.*contiguous"):
            gelu.forward({"x": np.ones((4, 4), dtype=np.float32)[:, ::2]}, {})
        with pytest.raises(TypeError, match="matmul.*'weight'"):
            matmul.forward({"x": np.ones((4, 4), np.float32), "weight": np.ones((4, 4), np.float16)}, {})
        with pytest.raises(ValueError, match="attention.*contiguous"):
            from backends.triton import attention
            attention.forward({"qkv": _qkv(1, 4, 8)[:, ::-1]}, {"n_head": 2})
    assert not rec


def test_numpy_arrays_need_the_interpreter():
    from backends.triton import gelu
    with pytest.raises(TypeError, match="CuPy arrays"):
        gelu.forward({"x": np.ones((4, 4), dtype=np.float32)}, {})


@pytest.mark.parametrize("dtype, pre_dtype", [("float32", "float32"), ("float16", "float16"),
                                              ("float16", "bfloat16")])
@pytest.mark.parametrize("pre_grad", [False, True])
def test_gemm_gelu_epilogue_writes_the_pre_activation_or_its_derivative(pre_grad, dtype, pre_dtype):
    """gemm(act=1): gelu(x @ W.T + b) in the epilogue, and `pre` gets x @ W.T + b itself, or with
    pre_grad gelu' of it (what matmul_gelu saves for its backward), in pre's own dtype. float16 rows
    of 64 and 48 elements are 16-byte aligned: both stores go through TMA descriptors, in column
    halves, pre through C's descriptor type bit for bit when its dtype differs (matmul_gelu's bf16
    C and float16 gelu' on the GPU; here the other way round, bf16 arithmetic being wrong in the
    interpreter)."""
    from backends.naive import gelu as naive_gelu
    from backends.triton import matmul
    from backends.triton._testing import _np_dtype
    rng = np.random.default_rng(1)
    N, K, M = 17, 64, 48
    x = rng.standard_normal((N, K)).astype(dtype)
    w = (rng.standard_normal((M, K)) / 8).astype(dtype)
    b = rng.standard_normal(M).astype(dtype)
    y, pre = np.full((N, M), np.nan, dtype=dtype), np.full((N, M), np.nan, dtype=_np_dtype(pre_dtype))
    cfg = replace(matmul.CONFIGS[("16", "forward", matmul.ANY)], block_m=16, block_n=32, block_k=32, epi_halves=2)
    args = (x, w, y, (K, 1), (1, K), N, M, K)
    with _runtime.recording() as rec:
        matmul.gemm(*args, bias=b, act=1, pre=pre, pre_grad=pre_grad, config=cfg)
    assert rec[0]["constexprs"]["TMA_C"] == (dtype == "float16")
    with _runtime.interpreter():
        matmul.gemm(*args, bias=b, act=1, pre=pre, pre_grad=pre_grad, config=cfg)
    ref_pre = x.astype(np.float64) @ w.T.astype(np.float64) + b
    ones = np.ones_like(ref_pre)
    expected = naive_gelu.backward(naive_gelu.Saved(ref_pre), ones, {})["x"] if pre_grad else ref_pre
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
    np.testing.assert_allclose(pre.astype(np.float64), expected, rtol=tol[pre_dtype], atol=tol[pre_dtype])
    np.testing.assert_allclose(y, naive_gelu.forward({"x": ref_pre}, {})[0], rtol=tol[dtype], atol=tol[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gemm_gelu_grad_epilogue(dtype):
    """gemm(gelu_grad_of=x): (dy @ W) * gelu'(x) in the epilogue, never split along K (gelu_matmul's
    dx). float16 rows of 64 and 48 elements are 16-byte aligned: x's tiles come through a TMA
    descriptor beside C's store, in column halves; float32 takes the pointer loads."""
    from backends.naive import gelu as naive_gelu
    from backends.triton import matmul
    rng = np.random.default_rng(2)
    N, K, M = 17, 48, 64  # dx (N, K) = dy (N, M) @ W (M, K)
    dy = rng.standard_normal((N, M)).astype(dtype)
    w = (rng.standard_normal((M, K)) / 8).astype(dtype)
    x = (3 * rng.standard_normal((N, K))).astype(dtype)
    dx = np.full((N, K), np.nan, dtype=dtype)
    cfg = replace(matmul.CONFIGS[("16", "dx", matmul.ANY)], block_m=16, block_n=16, block_k=16, split_k=4)
    args = (dy, w, dx, (M, 1), (K, 1), N, K, M)
    with _runtime.recording() as rec:
        matmul.gemm(*args, product="dx", config=cfg, gelu_grad_of=x)
    assert rec[0]["constexprs"]["TMA_C"] == (dtype == "float16") and rec[0]["constexprs"]["GELU_GRAD"]
    assert len(rec) == 1  # one launch: no K slices to sum before the epilogue
    with _runtime.interpreter():
        matmul.gemm(*args, product="dx", config=cfg, gelu_grad_of=x)
    dh = dy.astype(np.float64) @ w.astype(np.float64)
    expected = naive_gelu.backward(naive_gelu.Saved(x.astype(np.float64)), dh, {})["x"]
    tol = {"float32": 1e-5, "float16": 3e-3}[dtype]
    np.testing.assert_allclose(dx, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_gemm_softmax_stats_epilogue():
    """gemm(softmax_stats=): per row and 32-column tile, the max over the columns below n_valid
    and the sum of exp(z - max) there, and z stored minus that max; tiles 2 and 3 lie wholly in the
    padding (max -inf, sum 0, z stored as it is). float16: through the TMA descriptors."""
    from backends.triton import matmul
    rng = np.random.default_rng(4)
    N, K, V, n_valid = 20, 32, 128, 50
    x = rng.standard_normal((N, K)).astype(np.float16)
    w = (rng.standard_normal((V, K)) / 2).astype(np.float16)
    z = np.full((N, V), np.nan, dtype=np.float16)
    stats = np.full((2, N, 4), np.nan, dtype=np.float32)
    cfg = replace(matmul.CONFIGS[("16", "forward", matmul.ANY)], block_m=16, block_n=32, block_k=16)
    with _runtime.interpreter():
        matmul.gemm(x, w, z, (K, 1), (1, K), N, V, K, config=cfg, softmax_stats=(stats, n_valid))
    ref = (x.astype(np.float64) @ w.T.astype(np.float64)).reshape(N, 4, 32)
    real = (np.arange(V) < n_valid).reshape(4, 32)
    top = np.where(real, ref, -np.inf).max(axis=2)
    np.testing.assert_allclose(stats[0], top, rtol=1e-3)
    shift = np.where(np.isinf(top), 0.0, top)[:, :, None]
    np.testing.assert_allclose(stats[1], np.where(real, np.exp(ref - shift), 0).sum(axis=2), rtol=1e-3)
    np.testing.assert_allclose(z.reshape(N, 4, 32), ref - shift, rtol=2e-3, atol=2e-3)


def test_classifier_crossentropy_in_several_chunks(monkeypatch):
    """With room for 4 rows of logits, the 17 rows of a case go through 5 chunks (the last one row):
    every case check still passes (chunk offsets, dW accumulated over chunks, the losses-only path)."""
    from backends.triton import classifier_crossentropy as cce
    four_rows = 4 * cce.row_bytes(37, 36, "float32", 4)  # 4 rows of V = 37 float32 logits
    monkeypatch.setattr(cce, "CONFIG", replace(cce.CONFIG, scratch_bytes=four_rows))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((17, 36)).astype(np.float32), rng.standard_normal((37, 36)).astype(np.float32)
    dlosses = rng.standard_normal(17).astype(np.float32)
    with _runtime.recording() as rec:
        cce.forward({"x": x, "weight": w, "targets": np.zeros(17, np.int32), "dlosses": dlosses}, {"n_valid": None})
    assert [e["grid"] for e in rec if e["kernel"].__name__ == "_losses"] == [(4,)] * 4 + [(1,)]
    results = run_case(interpreted_variant("classifier_crossentropy"), "classifier_crossentropy", "T17-C36-V37",
                       "float32", seed=0)
    assert {r.check for r in results} >= {"forward", "backward", "accumulate", "grad_ahead"}
    bad = [str(r) for r in results if r.status != PASSED]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("grad_dtype", ["float16", "float32"])
@pytest.mark.parametrize("fused", [True, False])
def test_dw_split_k_with_the_bias_gradient(fused, grad_dtype):
    """dW += dy.T @ x cut into K slices (float32 slices through the 3-D C descriptor, 64 x 64 tiles,
    ragged M), db += sum_n dy either fused into that kernel (row sums of A) or the column sum; into
    float16 gradients or float32 ones (mixed precision)."""
    from backends.triton import _reduce, matmul
    rng = np.random.default_rng(2)
    N, K, M = 1000, 64, 136                       # 3 x 1 tiles of 64 x 64, 1000 rows in 2 slices
    x, dy = rng.standard_normal((N, K)).astype(np.float16), rng.standard_normal((N, M)).astype(np.float16)
    g0, db0 = rng.standard_normal((M, K)).astype(grad_dtype), rng.standard_normal(M).astype(grad_dtype)
    dw, db = g0.copy(), db0.copy()
    cfg = matmul.GemmConfig(64, 64, 32, num_warps=4, num_stages=3, group_m=2, flatten=True, ctas_per_sm=1,
                            epi_halves=2, split_k=8, busy=0.9)
    with _runtime.recording() as rec:
        matmul.gemm(dy, x, dw, (1, M), (K, 1), M, K, N, accumulate=True, rowsum=db, config=cfg)
    assert rec[0]["grid"] == (6,) and rec[0]["constexprs"]["TMA_C"]   # 3 tiles x 2 slices
    with _runtime.interpreter():
        matmul.gemm(dy, x, dw, (1, M), (K, 1), M, K, N, accumulate=True, rowsum=db if fused else None, config=cfg)
        if not fused:
            _reduce.colsum_into(dy, db, np)
    d64 = dy.astype(np.float64)
    np.testing.assert_allclose(dw, d64.T @ x.astype(np.float64) + g0, rtol=2e-3, atol=2e-2)
    np.testing.assert_allclose(db, d64.sum(0) + db0, rtol=2e-3, atol=2e-2)


def _sort_cases():
    rng = np.random.default_rng(3)
    return [("N1", np.array([3]), 7), ("N17", rng.integers(0, 50, 17), 50),
            ("all-equal", np.full(300, 5), 50304), ("all-distinct", rng.permutation(300), 300),
            ("runs-in-many-blocks", rng.integers(0, 4, 300), 4),           # 10 blocks of 32, long runs
            ("V-2^31-int64", rng.integers(0, 2 ** 31 - 1, 200).astype(np.int64), 2 ** 31 - 1)]  # 4 passes


@pytest.mark.parametrize("name,tokens,V", _sort_cases(), ids=[c[0] for c in _sort_cases()])
def test_embedding_sort_is_a_stable_sort_by_token(name, tokens, V):
    """sort_by_token, the device-side radix sort of the embedding backward, gives what a stable sort
    gives: positions in order of (token, position), at awkward sizes and across several passes."""
    from backends.triton import embedding
    with _runtime.interpreter():
        sorted_tokens, order = embedding.sort_by_token(tokens, V)
    expected = np.argsort(tokens, kind="stable")
    assert order.dtype == sorted_tokens.dtype == np.int32
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(sorted_tokens, tokens[expected])


@pytest.mark.parametrize("name", ["one-long-run", "runs-across-pieces", "run-starting-on-a-piece"])
def test_embedding_backward_sums_long_runs_in_pieces(name):
    """Runs longer than RUN_PIECE sorted positions are summed in pieces (in parallel) and their
    partials added in order: the same dwte as float64 numpy, and the same bits twice."""
    from backends.triton import embedding
    rng = np.random.default_rng(5)
    B, T, C, V = 3, 300, 20, 9
    P = embedding.RUN_PIECE
    if name == "one-long-run":
        tokens = np.full((B, T), 4)
        tokens.flat[::97] = 1
    elif name == "runs-across-pieces":
        tokens = rng.integers(0, 3, (B, T))   # three runs of ~300 positions: each crosses piece starts
    else:
        tokens = np.full((B, T), 8)
        tokens.flat[:P] = 2                   # the run of 8 starts exactly on a piece's first position
    dout = rng.standard_normal((B, T, C)).astype(np.float32)
    wte, wpe = rng.standard_normal((V, C)).astype(np.float32), rng.standard_normal((T, C)).astype(np.float32)
    results = []
    for _ in range(2):
        with _runtime.interpreter():
            _, saved = embedding.forward({"tokens": tokens, "wte": wte, "wpe": wpe}, {})
            grads = {"wte": np.zeros_like(wte), "wpe": np.zeros_like(wpe)}
            embedding.backward(saved, dout, grads)
        results.append(grads["wte"])
    expected = np.zeros((V, C))
    np.add.at(expected, tokens.reshape(-1), dout.reshape(-1, C).astype(np.float64))
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-4)
    assert results[0].tobytes() == results[1].tobytes()


def test_wrong_gradient_buffers_are_refused_before_launch():
    """Parameter gradients: the inputs' dtype, or float32 for 16-bit inputs (mixed precision); an
    activation gradient only in the inputs' dtype. Anything else fails before any launch."""
    from backends.triton import embedding, layernorm, matmul
    rng = np.random.default_rng(4)
    x16 = rng.standard_normal((4, 8)).astype(np.float16)
    w16, b16 = x16[:3].copy(), rng.standard_normal(3).astype(np.float16)
    dy16 = rng.standard_normal((4, 3)).astype(np.float16)
    f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    with _runtime.recording() as rec:
        _, saved = matmul.forward({"x": x16, "weight": w16, "bias": b16}, {})
        matmul.backward(saved, dy16, {"weight": f32(3, 8), "bias": f32(3)})  # mixed precision: accepted
        launched = len(rec)
        with pytest.raises(TypeError, match=r"matmul: grads\['weight'\] must have dtype float16 or float32.*float64"):
            matmul.backward(saved, dy16, {"weight": np.zeros((3, 8)), "bias": f32(3)})
        with pytest.raises(TypeError, match=r"matmul: 'grads\['x'\]' must have dtype float16"):
            matmul.backward(saved, dy16, {"x": f32(4, 8), "weight": f32(3, 8), "bias": f32(3)})
        _, saved = layernorm.forward({"x": x16.astype(np.float32), "weight": f32(8) + 1, "bias": f32(8)}, {"eps": 1e-5})
        with pytest.raises(TypeError, match=r"layernorm: grads\['weight'\] must have dtype float32 for float32"):
            layernorm.backward(saved, x16.astype(np.float32), {"weight": np.zeros(8, np.float16), "bias": f32(8)})
        tokens = np.array([[1, 2]])
        _, saved = embedding.forward({"tokens": tokens, "wte": f32(5, 8), "wpe": f32(4, 8)}, {})
        with pytest.raises(ValueError, match=r"embedding: grads\['wte'\] must have shape \(5, 8\)"):
            embedding.backward(saved, f32(1, 2, 8), {"wte": f32(4, 8), "wpe": f32(4, 8)})
        assert len(rec) == launched + 2  # the two forwards; no refused backward launched anything


def test_plugin_imports_neither_triton_nor_cupy():
    import subprocess
    import sys
    code = ("import sys; import backends.triton.plugin as p; p.nanoeuler_backends(); "
            "bad = [m for m in ('triton', 'cupy') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


#: calls that break a CUDA-graph capture of the step (device-to-host copies, synchronisation, CuPy
#: functions backed by thrust or cuBLAS): none may appear in this backend's host launchers
CAPTURE_BREAKERS = (".get()", ".item()", "asnumpy", "synchronize", "argsort", "xp.sort", "xp.unique",
                    "xp.dot", "xp.matmul", "xp.nonzero", ".tolist()")


def test_host_launchers_make_no_call_that_breaks_a_graph_capture():
    """A static guard only (CI has no GPU): bench/device/mixed.sh captures every op on the H200."""
    import pathlib
    import re
    found = []
    for path in sorted(pathlib.Path(_runtime.__file__).parent.glob("*.py")):
        code = re.sub(r'"""(.|\n)*?"""', "", path.read_text())       # docstrings may name them
        for n, line in enumerate(code.splitlines(), 1):
            code_part = line.split("#")[0]
            found += [f"{path.name}: {call} in {line.strip()!r}" for call in CAPTURE_BREAKERS if call in code_part]
    assert not found, "\n".join(found)
