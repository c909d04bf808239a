"""`euler new-backend NAME`: the skeleton it writes is a working backend (its plugin registers, it
passes the conformance suite as written, its entry point is declared), and bad names are refused."""

import importlib
import sys
import tomllib

import pytest

import conformance
from euler_core.cli import main
from euler_core.kernels import Kernels
from euler_core.registry import Registry
from euler_core.scaffold import new_backend


@pytest.mark.parametrize("op", ["gelu", "residual"])
def test_skeleton_passes_conformance_and_is_selectable(tmp_path, monkeypatch, op):
    name = f"skel_{op}"
    assert main(["new-backend", name, "--op", op, "--dir", str(tmp_path)]) == 0
    root = tmp_path / f"euler-skel-{op}"
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == f"euler-skel-{op}"
    assert meta["project"]["entry-points"]["nanoeuler.backends"] == {name: f"euler_{name}.plugin"}
    assert (root / "tests" / "test_conformance.py").exists() and (root / "README.md").exists()

    monkeypatch.syspath_prepend(str(root))
    plugin = importlib.import_module(f"euler_{name}.plugin")
    try:
        registry = Registry(plugins=[plugin])
        report = conformance.run(backend=name, registry=registry)
        assert report.ok, report.table()
        assert any(r.op == op and r.status == "passed" for r in report)
        kernels = Kernels(name, dtype="float32", registry=registry)
        assert kernels.variants[op].qualname == f"{name}:numpy"
        assert any("falling back to naive" in n for n in kernels.notes)
    finally:
        for mod in [m for m in sys.modules if m.startswith(f"euler_{name}")]:
            del sys.modules[mod]


@pytest.mark.parametrize("name, message", [
    ("My-Backend", "not a usable backend name"),
    ("class", "not a usable backend name"),
    ("auto", "reserved"),
    ("naive", "already installed"),
])
def test_bad_names_are_refused(tmp_path, name, message):
    with pytest.raises(ValueError, match=message):
        new_backend(name, tmp_path)


def test_refuses_to_overwrite(tmp_path):
    new_backend("twice", tmp_path)
    with pytest.raises(ValueError, match="exists and is not empty"):
        new_backend("twice", tmp_path)
    new_backend("twice", tmp_path, force=True)
