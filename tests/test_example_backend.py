"""The out-of-tree example backend (examples/euler-example-backend), installed as its own
distribution: found by its entry point with no change to the core, listed by `euler backends`,
passing the conformance suite, and training when selected (gelu from it, every other op from naive).

CI installs it (.ci/run) and sets EULER_REQUIRE_EXAMPLE_BACKEND=1, so there a missing install fails;
elsewhere these tests skip with the command that installs it."""

import os
from importlib import metadata

import numpy as np
import pytest

import conformance
from euler_core.cli import main
from euler_core.kernels import Kernels
from euler_core.registry import Registry
from euler_core.train import TrainConfig, train

try:
    metadata.distribution("euler-example-backend")
    INSTALLED = True
except metadata.PackageNotFoundError:
    INSTALLED = False

if not INSTALLED:
    if os.environ.get("EULER_REQUIRE_EXAMPLE_BACKEND") == "1":
        raise RuntimeError("euler-example-backend is not installed: pip install -e examples/euler-example-backend")
    pytest.skip("euler-example-backend is not installed (pip install -e examples/euler-example-backend)",
                allow_module_level=True)


def test_found_by_entry_point_and_listed(capsys):
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="nanoeuler.backends")}
    assert eps.get("example") == "euler_example_backend.plugin"
    registry = Registry()
    assert "example" in registry.backends and "example" not in registry.broken
    assert main(["backends"]) == 0
    listing = capsys.readouterr().out
    assert any(line.split()[:3] == ["example", "gelu", "sigmoid"] and line.rstrip().endswith("yes")
               for line in listing.splitlines())
    assert any(line.split()[:2] == ["example", "attention"] and "falls back to naive" in line
               for line in listing.splitlines())


def test_passes_conformance():
    report = conformance.run(backend="example")
    assert report.ok, report.table()
    assert {r.op for r in report if r.status == "passed"} == {"gelu", "model"}


def test_trains_when_selected(shards, tmp_path):
    kernels = Kernels("example", dtype="float32")
    assert kernels.variants["gelu"].qualname == "example:sigmoid"
    assert kernels.variants["attention"].qualname == "naive:reference"
    notes = []
    cfg = TrainConfig(preset="micro", backend="example", train_data=shards[0], val_data=shards[1], vocab_size=64,
                      batch_size=4, steps=8, lr=1e-2, warmup=2, eval_every=4, eval_batches=2, checkpoint_every=8,
                      out=str(tmp_path / "run"), progress=False)
    summary = train(cfg, log=lambda *a: notes.append(" ".join(map(str, a))))
    assert np.isfinite(summary["val_loss"]) and summary["val_loss"] < summary["first_val_loss"]
    assert any("falling back to naive" in n for n in notes)
