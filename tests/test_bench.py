"""euler_core.measure: records, the check before timing, planted slow and wrong variants, --backend auto,
run comparison, and the timing protocol's batching. Runs at `small` shapes with quick timing."""

import json

import numpy as np
import pytest

from euler_core.measure import auto
from euler_core.measure.ops import BenchConfig, run
from euler_core.measure.records import load_records
from euler_core.measure.report import PlotsUnavailable, compare_runs, render
from euler_core.measure.timing import Timing, TimingConfig, measure
from euler_core.kernels import Kernels
from euler_core.registry import Registry
from planted_bench import Planted  # tests/ is on sys.path under pytest

QUICK = TimingConfig.quick()
REQUIRED_FIELDS = {"op", "variant", "direction", "shape", "dims", "dtype", "p20_s", "p50_s", "p80_s", "device",
                   "device_key", "versions", "driver", "git_sha", "time", "loadavg", "flops", "bytes", "tflops",
                   "gbps", "roofline_fraction", "check", "conformance", "run_id", "status"}


@pytest.fixture(scope="module")
def registry():
    return Registry(plugins=[Planted()])


@pytest.fixture(scope="module")
def planted_run(registry, tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    cfg = BenchConfig(backend="naive,planted", ops=["gelu"], timing=QUICK, peak_timing=QUICK)
    records = run(cfg, out, registry=registry, log=lambda *a: None, copy_to_cache=False)
    return out, records


def by(records, variant, direction="forward"):
    return next(r for r in records if r.get("variant") == variant and r.get("direction") == direction)


# ---- tests ------------------------------------------------------------------------------------------------
def test_records_are_tidy_and_complete(planted_run):
    out, records = planted_run
    assert load_records([out]) == records  # what is returned is what is on disk
    assert (out / "run.json").exists() and json.loads((out / "run.json").read_text())["config"]["ops"] == ["gelu"]
    ok = [r for r in records if r.get("kind") == "op" and r["status"] == "ok"]
    assert {(r["variant"], r["direction"]) for r in ok} == {
        (v, d) for v in ("naive:reference", "planted:slow") for d in ("forward", "backward")}
    for r in ok:
        assert REQUIRED_FIELDS <= set(r), REQUIRED_FIELDS - set(r)
        assert r["p20_s"] <= r["p50_s"] <= r["p80_s"] and r["check"] == "passed" and r["conformance"] == "passed"
        assert r["flops"] > 0 and r["tflops"] == pytest.approx(r["flops"] / r["p50_s"] / 1e12)
        assert r["baseline"] == "naive:reference"
    assert by(records, "naive:reference")["speedup"] == pytest.approx(1.0)
    assert by(records, "planted:slow")["speedup"] < 0.5  # 2 ms per call against a few microseconds
    peaks = [r for r in records if r.get("kind") == "peak"]
    assert len(peaks) == 1 and peaks[0]["peak_flops"] > 0 and peaks[0]["peak_bw"] > 0


def test_wrong_variants_are_reported_and_never_timed(planted_run):
    _, records = planted_run
    off = [r for r in records if r.get("variant") == "planted:off"]
    assert off and all(r["status"] == "failed" and "p50_s" not in r for r in off)
    assert all(r["conformance"] == "failed" and "differs from" in r["message"] for r in off)
    wide = [r for r in records if r.get("variant") == "planted:widerows"]
    assert wide and all(r["status"] == "failed" and "p50_s" not in r for r in wide)
    # conformance passed (its cases are narrow); the check at the benchmarked shape caught it
    assert all(r["conformance"] == "passed" and r["check"] == "failed" for r in wide)
    assert "wrong at the benchmarked shape N=32,C=128" in wide[0]["message"]


def test_auto_ranks_the_slow_variant_last_and_never_chooses_a_wrong_one(planted_run, registry):
    out, _ = planted_run
    choice = auto.choose("gelu", "float32", registry, dirs=[out])
    ranked = [name for name, _ in choice.ranking]
    assert ranked[-1] == "planted:slow"
    assert choice.variant == "naive:reference"
    assert {"planted:off", "planted:widerows"} <= set(choice.excluded)
    assert "planted:off" not in ranked and "planted:widerows" not in ranked


def test_backend_auto_in_kernels_reads_the_bench_cache(planted_run, registry, monkeypatch, tmp_path):
    out, _ = planted_run
    monkeypatch.setenv("EULER_BENCH_DIR", str(out))
    k = Kernels("naive,gelu=auto", dtype="float32", registry=registry)
    assert k.variants["gelu"].qualname == "naive:reference"
    assert any(n.startswith("gelu: auto chose naive:reference") for n in k.notes)
    monkeypatch.setenv("EULER_BENCH_DIR", str(tmp_path / "empty"))
    k = Kernels("auto", dtype="float32", registry=registry)
    assert all(v.backend == "naive" for v in k.variants.values())
    assert any("gelu: auto: no benchmark records of gelu in float32 for this device" in n and
               "falling back to naive" in n for n in k.notes)


def _record(variant, p50, when, device_key=None, spread=0.02, **kw):
    from euler_core.measure.records import current_device_key
    r = {"kind": "op", "op": "gelu", "variant": variant, "direction": "forward", "shape_set": "small",
         "shape": "mlp", "dtype": "float32", "status": "ok", "check": "passed", "conformance": "passed",
         "p20_s": p50 * (1 - spread), "p50_s": p50, "p80_s": p50 * (1 + spread), "time": when,
         "device_kind": "cpu", "device_key": device_key or current_device_key("cpu"), "run_id": when}
    r.update(kw)
    return r


def test_auto_uses_only_this_device_and_the_latest_record(registry):
    records = [
        _record("planted:slow", 1e-6, "2026-01-01", device_key="cpu:some other machine:64"),  # not here
        _record("planted:slow", 1e-6, "2026-01-01"),        # fast once ...
        _record("planted:slow", 9e-3, "2026-02-01"),        # ... superseded by the latest run
        _record("naive:reference", 1e-3, "2026-01-15"),
        _record("planted:off", 1e-9, "2026-02-01", status="failed", check="failed"),
    ]
    choice = auto.choose("gelu", "float32", registry, records=records)
    assert choice.variant == "naive:reference"
    assert [n for n, _ in choice.ranking] == ["naive:reference", "planted:slow"]
    assert "planted:off" in choice.excluded


def test_comparing_runs_separates_changes_from_noise():
    base = [_record("a:x", 1.0e-3, "t0"), _record("b:y", 1.0e-3, "t0"), _record("c:z", 1.0e-3, "t0")]
    new = [_record("a:x", 0.5e-3, "t1"), _record("b:y", 1.01e-3, "t1"), _record("c:z", 2.0e-3, "t1")]
    verdicts = {r["variant"]: r["verdict"] for r in compare_runs(base, new)}
    assert verdicts == {"a:x": "faster", "b:y": "within spread", "c:z": "slower"}


def test_report_renders_markdown_and_plots(planted_run, tmp_path):
    out, _ = planted_run
    files = render([out], tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## gelu" in text and "`planted:slow`" in text and "FAILED" in text and "roofline" in text
    names = {f.name for f in files}
    assert "speedup-gelu.png" in names and any(n.startswith("roofline-") for n in names)
    assert all(f.stat().st_size > 1000 for f in files if f.suffix == ".png")


def test_report_of_two_runs_compares_them(planted_run, registry, tmp_path):
    out, _ = planted_run
    cfg = BenchConfig(backend="naive,planted", ops=["gelu"], timing=QUICK, peak_timing=QUICK)
    run(cfg, tmp_path / "second", registry=registry, log=lambda *a: None, copy_to_cache=False)
    render([out, tmp_path / "second"], tmp_path / "report", plots=False)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## gelu" in text and "## Changes: `" in text and "`planted:slow`" in text


def test_report_without_matplotlib_says_so(planted_run, tmp_path, monkeypatch):
    out, _ = planted_run
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(PlotsUnavailable, match=r"pip install 'nanoeuler\[plot\]'"):
        render([out], tmp_path / "r")
    assert (tmp_path / "r" / "report.md").exists()  # the markdown is written regardless


class FakeCudaTimer:
    """Stands in for the CUDA-event timer: records the batch sizes it is asked to time."""

    device = "cuda"

    def __init__(self):
        self.batches = []
        self.host_per_call = None

    def batch(self, call, indices):
        self.batches.append(list(indices))
        for i in indices:
            call(i)
        self.host_per_call = 5e-6  # Python's side of each call
        return 1e-6  # a 1 us kernel

    def sync(self):
        pass


def test_gpu_timing_batches_back_to_back_calls_and_rotates_inputs():
    timer, seen = FakeCudaTimer(), []
    cfg = TimingConfig(warmup_s=0.0, warmup_calls=2, sample_s=1e-4, min_samples=5, max_samples=5, min_time_s=0.0)
    t = measure(seen.append, 3, timer, cfg)
    assert isinstance(t, Timing) and len(t.samples) == 5
    assert t.calls_per_sample >= cfg.min_batch_gpu  # never one kernel per pair of events
    assert all(len(b) == t.calls_per_sample for b in timer.batches[-5:])
    assert set(seen) == {0, 1, 2} and seen[:6] == [0, 1, 2, 0, 1, 2]  # inputs rotate call after call
    assert t.host_samples == [5e-6] * 5 and t.host_p50 == 5e-6   # the host's time is kept beside the GPU's


def test_unknown_shape_set_and_op_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown shape set 'huge'; sets: small, mid, gpt2"):
        run(BenchConfig(backend="naive", shapes=["huge"]), tmp_path, log=lambda *a: None)
    with pytest.raises(ValueError, match="unknown op"):
        run(BenchConfig(backend="naive", ops=["softmax"]), tmp_path, log=lambda *a: None)


def test_every_shape_set_covers_the_gpt2_ops_and_small_examples_validate():
    from euler_core.measure.shapes import SHAPE_SETS
    from euler_core.ops import OPS
    for name, shapes in SHAPE_SETS.items():
        row_ops = {"embedding", "layernorm", "matmul", "attention", "gelu", "residual", "crossentropy"}
        assert set(shapes) == row_ops | ({"adamw"} if name != "gpt2-b32" else set()) and set(shapes) <= set(OPS)
    assert SHAPE_SETS["gpt2-b32"]["layernorm"][0][1] == {"N": 32768, "C": 768}
    for op, entries in SHAPE_SETS["small"].items():
        for _, dims in entries:
            inputs, attrs = OPS[op].example(dims, "float32", np.random.default_rng(0))
            OPS[op].validate(inputs, OPS[op].fill_attrs(attrs))


def test_the_check_runs_the_launch_configuration_that_is_timed(tmp_path, monkeypatch):
    """splits:past1024 is wrong only in the configuration it picks for more than 1024 rows: the
    suite's cases never reach it and a check on 1024 rows passes; timed at 2048 rows, the check of
    that very call catches it, and it is never timed."""
    from euler_core.measure import shapes
    from euler_core.measure.ops import check_variant, make_reference
    from planted_bench import Splits
    registry = Registry(plugins=[Splits()])
    variant = registry.find("splits:past1024", "gelu")
    assert check_variant(variant, "gelu", make_reference("gelu", {"N": 1024, "C": 8}, "float32", 0, registry),
                         "float32")[0] == "passed"
    monkeypatch.setitem(shapes.SHAPE_SETS, "tall", {"gelu": [("tall", {"N": 2048, "C": 8})]})
    monkeypatch.setattr(shapes, "HOST_ROWS", 2048)  # the host reference of 2048 x 8 is affordable
    cfg = BenchConfig(backend="splits", ops=["gelu"], shapes=["tall"], timing=QUICK, peak_timing=QUICK)
    records = run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    split = [r for r in records if r.get("variant") == "splits:past1024"]
    assert split and all(r["status"] == "failed" and "p50_s" not in r for r in split)
    assert all(r["conformance"] == "passed" and r["check"] == "failed" for r in split)
    message = split[0]["message"]
    assert "wrong at the benchmarked shape N=2048,C=8" in message and "worst at (2047, " in message
    assert by(records, "naive:reference")["status"] == "ok"  # the baseline, right, is timed


def test_cpu_variants_are_benchmarked_only_where_their_host_reference_is_affordable(registry, tmp_path,
                                                                                   monkeypatch):
    from euler_core.measure import shapes
    for name in ("small", "mid"):
        for op, entries in shapes.SHAPE_SETS[name].items():
            assert all(shapes.host_reference_refusal(op, dims) is None for _, dims in entries), (name, op)
    g = {op: entries[-1][1] for op, entries in shapes.SHAPE_SETS["gpt2"].items()}
    assert "at most 1024 rows" in shapes.host_reference_refusal("matmul", g["matmul"])
    assert "this shape has 16384" in shapes.host_reference_refusal("crossentropy", g["crossentropy"])
    assert "elements" in shapes.host_reference_refusal("adamw", g["adamw"])
    monkeypatch.setattr(shapes, "HOST_ROWS", 8)  # small/mlp is N=32, C=128
    cfg = BenchConfig(backend="naive", ops=["gelu"], timing=QUICK, peak_timing=QUICK, conformance=False)
    records = run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    skipped = by(records, "naive:reference")
    assert skipped["status"] == "skipped" and "p50_s" not in skipped and "at most 8 rows" in skipped["message"]


def test_make_inputs_follow_the_op_spec_at_the_timed_shape():
    from euler_core.measure.ops import make_inputs
    ce = make_inputs("crossentropy", {"B": 2, "T": 8, "V": 64, "n_valid": 50}, "bfloat16", 0, "cpu")
    assert ce.typed["logits"].shape == (2, 8, 64) and str(ce.typed["logits"].dtype) == "bfloat16"
    assert ce.typed["targets"].dtype == np.int32 and ce.typed["targets"].max() < 50
    assert ce.dout.shape == (2, 8) and ce.dout.dtype == np.float32  # the losses' gradient: float32
    adamw = make_inputs("adamw", {"N": 100}, "float32", 0, "cpu")
    assert adamw.dout is None and (adamw.typed["v"] >= 0).all()


def test_a_backend_baseline_is_its_fastest_variant_and_a_wrong_reference_is_timed_but_marked(tmp_path):
    registry = Registry(plugins=[Planted(), __import__("planted_bench").References()])
    cfg = BenchConfig(backend="planted:slow", baseline="refs", ops=["gelu"], timing=QUICK, peak_timing=QUICK)
    records = run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    timed = {r["variant"] for r in records if r.get("kind") == "op" and r["status"] == "ok"}
    assert timed == {"planted:slow", "refs:slow", "refs:fast", "refs:off"}  # every reference is timed
    for direction in ("forward", "backward"):
        assert by(records, "planted:slow", direction)["baseline"] == "refs:fast"
    off = by(records, "refs:off")
    assert off["reference"] and off["check"] == "failed" and off["conformance"] == "failed"
    assert "differs from" in off["message"] and not by(records, "planted:slow")["reference"]
    assert "refs:off" in auto.choose("gelu", "float32", registry, dirs=[tmp_path]).excluded
    render([tmp_path], tmp_path / "report", plots=False)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "`refs:off` (ref.) ‡" in text and "timed although it missed" in text


def test_an_interrupted_run_keeps_its_records_speedups_and_run_json(registry, tmp_path, monkeypatch):
    import euler_core.measure.ops as ops
    timed = []
    real = ops.time_variant

    def time_once_then_stop(*args, **kwargs):
        if timed:
            raise KeyboardInterrupt  # as SIGTERM from `timeout` arrives in `euler bench ops`
        timed.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(ops, "time_variant", time_once_then_stop)
    cfg = BenchConfig(backend="naive", ops=["gelu", "residual"], timing=QUICK, peak_timing=QUICK, conformance=False)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    records = load_records([tmp_path])
    ok = [r for r in records if r.get("kind") == "op" and r["status"] == "ok"]
    assert {r["op"] for r in ok} == {"gelu"} and all(r["speedup"] == pytest.approx(1.0) for r in ok)
    assert json.loads((tmp_path / "run.json").read_text())["interrupted"] is True


def test_gpu_batches_wait_behind_a_spin_long_enough_for_python_to_queue_them():
    from euler_core.measure.timing import MAX_SPIN_S, spin_seconds
    assert spin_seconds(None, 50) == 1e-3                      # nothing measured yet
    assert spin_seconds(100e-6, 40) == 1.5 * 100e-6 * 40 + 50e-6   # 1.5x the host's launch time, + 50 us
    assert spin_seconds(1.0, 10_000) == MAX_SPIN_S              # bounded


def test_the_at_shape_check_lets_a_rounding_tail_pass_and_nothing_more():
    from euler_core.numerics import CheckFailed, Tol, compare
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(2_000_000)
    tol = Tol(0.04, 0.02)
    allowed = tol.rtol * np.abs(ref) + tol.atol * np.sqrt(np.mean(ref * ref))

    def with_errors(at, factor):
        got = ref.copy()
        got[at] += factor * allowed[at]
        return got

    assert compare("y", ref, ref, tol, outliers_per_million=1.0) == ""
    note = compare("y", with_errors([7], 1.5), ref, tol, outliers_per_million=1.0)
    assert "1 of 2000000 elements" in note and "outlier allowance" in note      # 2 allowed in 2M
    with pytest.raises(CheckFailed, match="at 3 of 2000000"):                    # more than one in a million
        compare("y", with_errors([1, 2, 3], 1.5), ref, tol, outliers_per_million=1.0)
    with pytest.raises(CheckFailed, match="at 1 of 2000000"):                    # far past the bound
        compare("y", with_errors([7], 3.0), ref, tol, outliers_per_million=1.0)
    with pytest.raises(CheckFailed, match="at 1 of 2000000"):                    # the suite allows none
        compare("y", with_errors([7], 1.5), ref, tol)


def test_a_backward_that_moves_nothing_gets_no_roofline_fraction(registry, tmp_path):
    """residual's backward hands back its output gradient as both input gradients: no work, so no
    percentage of a peak (it once read 4,315,629% of the roofline), and the report says why."""
    cfg = BenchConfig(backend="naive", ops=["residual"], timing=QUICK, peak_timing=QUICK, conformance=False)
    records = run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    forward, backward = by(records, "naive:reference"), by(records, "naive:reference", "backward")
    assert 0 < forward["roofline_fraction"] and forward["bound"] == "memory"
    assert backward["roofline_fraction"] is None and backward["bound"] == "none" and backward["bytes"] == 0
    render([tmp_path], tmp_path / "report", plots=False)
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| - | none |" in text and "no roofline: the call computes and moves nothing" in text


def test_a_gpu_reference_that_raises_is_computed_on_the_host(monkeypatch):
    """The at-shape reference of a GPU variant runs on the GPU; where that raises (its float64
    temporaries past the card's memory), the same check runs against a host reference instead of
    leaving the variant untimed."""
    from euler_core.measure import ops as bench_ops
    real = bench_ops.make_reference

    def on_host_only(op, dims, dtype, seed, registry=None, device="cpu"):
        if device != "cpu":
            raise MemoryError("out of memory allocating 13,194,139,648 bytes")
        return real(op, dims, dtype, seed, registry, device)

    monkeypatch.setattr(bench_ops, "make_reference", on_host_only)
    said = []
    ref = bench_ops._reference_for("gelu", {"N": 64, "C": 48}, "float32", 0, None, "cuda", said.append)
    assert isinstance(ref, bench_ops.Reference) and isinstance(ref.expected["out"], np.ndarray)
    assert "raised MemoryError: out of memory" in said[0] and "computing it on the host" in said[0]
    monkeypatch.setattr(bench_ops, "make_reference", lambda *a, **k: (_ for _ in ()).throw(MemoryError("no")))
    failed = bench_ops._reference_for("gelu", {"N": 64, "C": 48}, "float32", 0, None, "cuda", said.append)
    assert isinstance(failed, str) and "on cuda, then MemoryError" in failed
