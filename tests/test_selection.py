"""The --backend string: every form of DESIGN.md, and clear errors for everything else."""

import pytest

from euler_core.kernels import Kernels, Selection, SelectionError
from euler_core.ops import OPS
from euler_core.registry import Backend, Registry, Variant, hookimpl


class ExtraBackend:
    """A second backend with one op, registered like a third-party plugin."""

    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("extra", "test backend", [
            Variant("gelu", "first", impl="backends.naive.gelu"),
            Variant("gelu", "second", impl="backends.naive.gelu"),
            Variant("layernorm", "gpu", impl="backends.naive.layernorm", device="cuda", requires=("cupy",)),
            Variant("matmul", "f64only", impl="backends.naive.matmul", dtypes=("float64",)),
            Variant("matmul", "plain", impl="backends.naive.matmul"),
            Variant("matmul_gelu", "optin", impl="backends.naive.matmul_gelu", opt_in=True),
        ])]


@pytest.fixture
def registry():
    return Registry(plugins=[ExtraBackend()])


def test_parse_forms():
    assert Selection.parse("numba") == Selection("numba", {})
    assert Selection.parse("cupy_raw,attention=triton") == Selection("cupy_raw", {"attention": "triton"})
    assert Selection.parse("attention=triton:flash, matmul=cupy_raw:cublas") == Selection(
        None, {"attention": "triton:flash", "matmul": "cupy_raw:cublas"})


@pytest.mark.parametrize("text, message", [
    ("attention=nope", "unknown backend 'nope'.*backends: (.*, )?extra, naive.*ops: embedding"),
    ("nope", "unknown backend 'nope'"),
    ("atention=naive", "unknown op 'atention'.*ops: embedding, layernorm"),
    ("naive,extra", "two default backends"),
    ("gelu=extra:third", "no variant 'third' of op gelu; its variants of gelu: first, second"),
    ("attention=extra", "backend extra offers no variant of op attention; backends that do: (.*, )?naive"),
    ("gelu=naive,gelu=extra", "named twice"),
])
def test_bad_selections_name_what_exists(registry, text, message):
    with pytest.raises(SelectionError, match=message):
        Kernels(text, registry=registry)


def test_default_backend_falls_back_per_op_and_says_so(registry):
    k = Kernels("extra,layernorm=naive,matmul=naive", dtype="float32", registry=registry)
    assert k.variants["gelu"].qualname == "extra:first"
    assert k.variants["attention"].qualname == "naive:reference"
    assert any("attention: backend extra has no usable variant; falling back to naive" in n for n in k.notes)


def test_named_variant_and_overrides(registry):
    k = Kernels("naive,gelu=extra:second", registry=registry)
    assert k.variants["gelu"].qualname == "extra:second"
    assert all(v.backend == "naive" for op, v in k.variants.items() if op != "gelu")
    assert not k.has("matmul_gelu") and not k.has("mlp")  # their gelu is another backend's: the model composes it


def test_fused_ops_only_where_they_cannot_change_the_selection(registry):
    """A fused op is selected when named, or when the one backend all its primitives come from
    offers it; otherwise the model composes the primitives (and never from naive's fused op)."""
    fused = ("layernorm_residual", "matmul_residual", "matmul_gelu", "mlp", "classifier_crossentropy")
    k = Kernels("naive", dtype="float32", registry=registry)        # naive offers every fused op
    assert all(k.has(op) and k.variants[op].backend == "naive" for op in fused)
    k = Kernels("numba", dtype="float32", registry=registry)        # numba offers none of them
    assert not any(k.has(op) for op in fused)
    k = Kernels("naive,layernorm=numba", dtype="float32", registry=registry)
    assert not k.has("layernorm_residual") and k.has("matmul_gelu") and k.has("mlp")
    assert any(n.startswith("layernorm_residual: not fused") for n in k.notes)
    k = Kernels("numba,matmul_gelu=naive", dtype="float32", registry=registry)
    assert k.variants["matmul_gelu"].qualname == "naive:reference" and not k.has("layernorm_residual")
    k = Kernels("numba,mlp=naive", dtype="float32", registry=registry)  # naive's MLP on numba's other kernels
    assert k.variants["mlp"].qualname == "naive:reference" and k.variants["matmul"].backend == "numba"
    assert not k.has("matmul_gelu") and not k.has("layernorm_residual")


def test_opt_in_fused_variants_and_op_none(registry):
    """An opt-in fused variant is used only when named; op=none composes even where it would fuse."""
    k = Kernels("naive,matmul=extra:plain,gelu=extra", dtype="float32", registry=registry)
    assert not k.has("matmul_gelu")  # extra serves matmul and gelu, but its matmul_gelu is opt-in
    k = Kernels("naive,matmul=extra:plain,gelu=extra,matmul_gelu=extra", dtype="float32", registry=registry)
    assert k.variants["matmul_gelu"].qualname == "extra:optin"
    k = Kernels("naive,matmul_gelu=none,classifier_crossentropy=none", dtype="float32", registry=registry)
    assert not k.has("matmul_gelu") and not k.has("classifier_crossentropy") and k.has("layernorm_residual")
    assert any("matmul_gelu=none" in n for n in k.notes)


def test_unusable_variants_are_errors_with_reasons(registry):
    with pytest.raises(SelectionError, match="extra:gpu of op layernorm cannot run here: (cupy not installed|no CUDA device)"):
        Kernels("layernorm=extra:gpu", registry=registry)
    with pytest.raises(SelectionError, match="does not take float32; it takes float64"):
        Kernels("matmul=extra:f64only", dtype="float32", registry=registry)
    # and where that dtype does run: here, only a GPU backend's embedding takes 16-bit storage
    with pytest.raises(SelectionError, match=r"naive:reference of op embedding does not take bfloat16; it takes "
                                             r"float64, float32 \(backends whose embedding takes bfloat16: cupy_raw, triton\)"):
        Kernels("naive", dtype="bfloat16")


def test_builtin_backends_come_from_entry_points():
    from importlib.metadata import entry_points
    names = {ep.name for ep in entry_points(group="nanoeuler.backends")}
    assert "naive" in names
    assert "naive" in Registry().backends


def test_dispatcher_rejects_wrong_dtype_for_variant(registry):
    import numpy as np
    k = Kernels("matmul=extra:f64only", registry=registry)
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="does not take dtype float32"):
        k["matmul"].forward({"x": x, "weight": np.ones((4, 3), dtype=np.float32)})


def test_dispatcher_takes_an_output_that_is_an_input_only_as_that_input():
    """layernorm_residual without b: its x is the input a itself (the stream already holds the sum),
    so out[0] must be a; another array is refused naming the op, before the variant runs."""
    import numpy as np
    k = Kernels("naive", dtype="float32")["layernorm_residual"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    inputs = {"a": a, "weight": np.ones(4, np.float32), "bias": np.zeros(4, np.float32)}
    y = np.full((3, 4), np.nan, np.float32)
    (x, got), _ = k.forward(inputs, out=(a, y))
    assert x is a and got is y and not np.isnan(y).any()
    (x, _), _ = k.forward(inputs)
    assert x is a
    with pytest.raises(ValueError, match=r"layernorm_residual: .*output x is input 'a' itself.*out\[0\] \(x\)"):
        k.forward(inputs, out=(a.copy(), y))
    (x, _), _ = k.forward({**inputs, "b": a}, out=(a.copy(), y))  # with b, x is a new stream: any buffer
    np.testing.assert_array_equal(x, 2 * a)


def test_ops_nobody_named_come_from_the_first_named_backend(registry):
    # no default backend: the rest from the backend named first, where it has a usable variant
    k = Kernels("attention=numba,matmul=naive", dtype="float32", registry=registry)
    assert k.variants["attention"].backend == "numba" and k.variants["matmul"].backend == "naive"
    assert k.variants["layernorm"].backend == "numba" and k.variants["adamw"].backend == "numba"
    # a default backend named first keeps the rest there
    k = Kernels("naive,attention=numba", dtype="float32", registry=registry)
    assert k.variants["layernorm"].backend == "naive"
    # where the first-named backend offers nothing (attention) or nothing usable here (a GPU-only
    # layernorm on a machine without one; a float64-only matmul at float32): naive, and a note
    k = Kernels("gelu=extra,residual=naive", dtype="float32", registry=registry)
    assert k.variants["gelu"].qualname == "extra:first"
    assert k.variants["attention"].backend == "naive"
    assert k.variants["matmul"].qualname == "extra:plain"
    try:
        import cupy  # noqa: F401
        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    if not has_gpu:
        assert k.variants["layernorm"].backend == "naive"
        assert any("layernorm: backend extra has no usable variant; falling back to naive" in n for n in k.notes)
