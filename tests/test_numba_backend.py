"""The numba backend: conformance, light registration, per-op mixing, the on-disk JIT cache, and
`euler train --backend numba`. Compile time dominates here: the conformance run compiles every
kernel in float32 and float64 (about 40 s on CI's 2 cores); the other tests reuse those kernels.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba")

import conformance  # noqa: E402
from euler_core.kernels import Kernels  # noqa: E402
from euler_core.ops import OPS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, env: dict | None = None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=timeout)


def test_conformance_numba():
    """`euler conformance --backend numba`: every variant of every op, float32 and float64, and a
    whole training step against the float64 naive run."""
    report = conformance.run(backend="numba")
    assert report.ok, report.table()


def test_plugin_does_not_import_numba():
    """Listing backends imports plugin.py, which must not pull numba in (DESIGN: heavy imports
    happen when a variant is first used)."""
    r = _python("""
        import sys
        from euler_core.registry import Registry
        reg = Registry()
        assert "numba" in reg.backends, sorted(reg.backends)
        print(json.dumps({"numba_imported": "numba" in sys.modules,
                          "ops": sorted({v.op for v in reg.backend("numba").variants})}))
    """.replace("import sys", "import sys, json"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["numba_imported"] is False
    assert out["ops"] == sorted(op for op in OPS if not OPS[op].replaces)  # every primitive (fused ops compose)


def test_registration():
    from euler_core.registry import get_registry
    backend = get_registry().backend("numba")
    for v in backend.variants:
        assert v.device == "cpu" and v.requires == ("numba",) and set(v.dtypes) == {"float32", "float64"}
        assert v.unavailable_reason() is None
    names = {op: [v.name for v in backend.variants_of(op)] for op in OPS}
    assert names["matmul"][:2] == ["blas", "blocked"] or set(names["matmul"]) == {"blas", "blocked"}
    assert names["attention"][0] == "blas" and set(names["attention"]) == {"flash", "rows", "blas"}


def test_blas_variants_give_way_where_numpy_has_no_suitable_openblas(monkeypatch):
    """Where NumPy bundles no OpenBLAS with the functions the blas variants call, they say why and
    `--backend numba` takes the next variant of each op instead."""
    from backends.numba import _openblas
    from euler_core.kernels import SelectionError
    monkeypatch.setattr(_openblas, "unavailable_reason", lambda: "no OpenBLAS here (test)")
    k = Kernels("numba")
    assert k.variants["matmul"].qualname == "numba:blocked"
    assert k.variants["attention"].qualname == "numba:flash"
    with pytest.raises(SelectionError, match="numba:blas of op matmul cannot run here: no OpenBLAS here"):
        Kernels("numba,matmul=numba:blas")


def test_openblas_functions_found():
    from backends.numba import _openblas
    assert _openblas.unavailable_reason() is None, _openblas.unavailable_reason()
    assert set(_openblas.addresses()) == set(_openblas.SYMBOLS) and all(_openblas.addresses().values())


def test_mixing_per_op():
    k = Kernels("naive,attention=numba")
    assert k.variants["attention"].qualname == "numba:blas"
    assert all(v.backend == "naive" for op, v in k.variants.items() if op != "attention")
    k = Kernels("numba,matmul=numba:blocked,attention=numba:rows,gelu=naive")
    assert k.variants["matmul"].qualname == "numba:blocked"
    assert k.variants["attention"].qualname == "numba:rows"
    assert k.variants["gelu"].qualname == "naive:reference"
    assert k.variants["layernorm"].qualname == "numba:fused"


def test_mixed_model_step_matches_naive():
    """A float64 training step of a tiny model with numba attention only, then all numba, against naive."""
    import numpy as np
    from euler_core.config import preset
    from euler_core.model import GPT
    cfg = preset("micro")
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, cfg.vocab_size, (2, 11)), rng.integers(0, cfg.vocab_size, (2, 11))
    grads = {}
    for sel in ("naive", "naive,attention=numba", "numba"):
        m = GPT(cfg, sel, dtype="float64", seed=0)
        m.zero_grad()
        _, loss = m.forward(x, y)
        m.backward()
        grads[sel] = (loss, m.flat_grads.copy())
    for sel in ("naive,attention=numba", "numba"):
        assert grads[sel][0] == pytest.approx(grads["naive"][0], rel=1e-12)
        np.testing.assert_allclose(grads[sel][1], grads["naive"][1], rtol=1e-9, atol=1e-12)


def test_on_disk_cache(tmp_path):
    """A second process loads the compiled kernels from the cache instead of compiling them."""
    code = """
        import time, json, numpy as np
        t = time.perf_counter()
        from backends.numba import layernorm
        x = np.ones((3, 5), np.float32); w = np.ones(5, np.float32)
        layernorm.forward({"x": x, "weight": w, "bias": w}, {"eps": 1e-5})
        print(json.dumps({"s": time.perf_counter() - t}))
    """
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        r = _python(code, env)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1])["s"])
    assert list(tmp_path.rglob("*.nbi")) and list(tmp_path.rglob("*.nbc")), "nothing written to the cache"
    cold, warm = runs
    assert warm < cold / 2, f"second process took {warm:.2f} s, first {cold:.2f} s: the cache was not used"


def test_euler_train_numba(tmp_path, shards):
    """`euler train --backend numba` runs end to end (a few steps of a small model on shards)."""
    train, val = shards
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "euler_core.cli", "train", "--backend", "numba", "--preset", "micro",
                        "--train-data", train, "--val-data", val, "--vocab-size", "64", "--steps", "3",
                        "--batch-size", "4", "--eval-every", "2", "--eval-batches", "1", "--checkpoint-every", "0",
                        "--no-progress", "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "numba:" in r.stdout + r.stderr
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["loss"] > 0 for line in lines)


def test_odd_shapes_and_poisoned_outputs():
    """T=1 and ragged T, head size 5, B=1: every output element written (NaN-poisoned out=)."""
    import numpy as np
    from backends.naive import attention as ref
    from backends.numba import attention as nb
    rng = np.random.default_rng(3)
    for B, T, NH, HS in ((1, 1, 1, 5), (2, 37, 3, 5), (1, 70, 2, 7)):
        qkv = rng.standard_normal((B, T, 3 * NH * HS))
        for impl in (nb.Flash, nb.Rows, nb.Blas):
            out = np.full((B, T, NH * HS), np.nan)
            y, saved = impl.forward({"qkv": qkv}, {"n_head": NH}, out)
            y0, s0 = ref.forward({"qkv": qkv}, {"n_head": NH})
            np.testing.assert_allclose(y, y0, rtol=1e-12, atol=1e-12)
            dy = rng.standard_normal(y.shape)
            buf = np.full(qkv.shape, np.nan)
            d = impl.backward(saved, dy, {"qkv": buf})["qkv"]
            np.testing.assert_allclose(d, ref.backward(s0, dy, {})["qkv"], rtol=1e-10, atol=1e-12)
            assert np.isfinite(y).all() and np.isfinite(d).all()
