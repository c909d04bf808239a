"""`euler bench train` and `euler bench quality` on the CPU: the naive backend at the micro preset (the
CI smoke runs of the machinery: worker processes, records, MFU arithmetic, reports), the plan that
makes batches identical across systems, and the PyTorch reference beside ours where an interpreter
with torch is at hand ($EULER_TORCH_PYTHON, or this one): skipped, with the reason, where not."""

import json
import math

import numpy as np
import pytest

from euler_core.measure import quality, train
from euler_core.measure.workers import torch_python, torch_unavailable_reason
from euler_core.cli import main
from euler_core.config import preset


def load(folder):
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def test_flops_per_token_is_6n_plus_12lct_with_n_excluding_the_position_embedding():
    config = preset("gpt2")
    C, L, Vp = 768, 12, 50304
    n = Vp * C + L * (12 * C * C + 13 * C) + 2 * C   # wte (tied), 12 blocks, ln_f; wpe left out
    assert n == 123_689_472                           # nanoGPT's get_num_params() for the same model
    assert train.flops_per_token(config, 1024) == 6 * n + 12 * L * C * 1024
    assert round(train.flops_per_token(config, 1024) / 1e6, 1) == 855.4


def test_mfu_is_achieved_flops_over_the_peak():
    assert train.mfu(500_000, 855.4e6, 740e12) == pytest.approx(500_000 * 855.4e6 / 740e12)
    assert train.mfu(0.0, 1.0, 1.0) == 0.0


@pytest.fixture(scope="module")
def naive_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-train")
    status = main(["bench", "train", "--backend", "naive", "--preset", "micro", "--batch-sizes", "2,3", "--steps", "2",
                   "--warmup", "1", "--peak-size", "small", "--out", str(out)])
    return status, out, load(out)


def test_bench_train_measures_every_batch_size_with_records_that_agree_with_their_arithmetic(naive_run):
    status, out, records = naive_run
    assert status == 0
    peak = next(r for r in records if r["kind"] == "peak")
    rows = [r for r in records if r["kind"] == "train"]
    assert [(r["system"], r["B"], r["status"]) for r in rows] == [("nanoeuler naive", 2, "ok"), ("nanoeuler naive", 3, "ok")]
    for r in rows:
        assert r["T"] == 16 and r["dtype"] == "float32" and r["steps"] == 2 and len(r["losses"]) == 1 + 1 + 2
        assert r["step_s_p20"] <= r["step_s_p50"] <= r["step_s_p80"]
        assert r["tokens_per_s"] == pytest.approx(r["B"] * 16 / r["step_s_p50"])
        assert r["mfu"] == pytest.approx(r["tokens_per_s"] * train.flops_per_token(preset("micro"), 16) / peak["peak_flops"])
        assert r["maxrss_mb"] > 0 and abs(r["first_loss"] - math.log(64)) < 0.5   # random tokens: about ln(V)
        assert r["variants"]["matmul"] == "naive:reference" and r["device_kind"] == "cpu" and r["run_id"] == peak["run_id"]


def test_bench_train_times_the_first_step_cold_then_warm_and_profiles_one_step(naive_run):
    _, _, records = naive_run
    firsts = [(r["B"], r["cache"]) for r in records if r["kind"] == "first_step" and r["status"] == "ok"]
    assert firsts == [(2, "cold"), (2, "warm"), (3, "warm")]
    for r in (r for r in records if r["kind"] == "first_step"):
        assert r["seconds"] == pytest.approx(r["startup_s"] + r["build_s"] + r["step_s"]) and r["step_s"] > 0
    prof = [r for r in records if r["kind"] == "op_profile"]
    assert {(r["op"], r["direction"]) for r in prof} >= {("matmul", "forward"), ("matmul", "backward"),
                                                         ("attention", "backward"), ("adamw", "forward")}
    calls = {(r["op"], r["direction"]): r for r in prof}
    # naive offers the fused ops: per block qkv through matmul, attn_proj through matmul_residual (it
    # adds itself to the stream), the MLP through mlp; the classifier fused with the loss
    assert calls[("matmul", "forward")]["calls"] == calls[("matmul_residual", "forward")]["calls"] == 2
    assert calls[("matmul", "forward")]["profile"]["steps"] == 2
    assert calls[("mlp", "forward")]["calls"] == 2 and calls[("classifier_crossentropy", "forward")]["calls"] == 1


def test_bench_train_writes_a_report_and_a_plot_that_bench_report_remakes(naive_run, tmp_path):
    _, out, _ = naive_run
    text = (out / "train.md").read_text()
    for heading in ("## Throughput", "## Time to first step", "## Where one step's time goes: nanoeuler naive, B=2"):
        assert heading in text
    assert "| nanoeuler naive | 3 |" in text and (out / "train-tokens-per-s.png").stat().st_size > 1000
    assert main(["bench", "report", str(out), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "train.md").read_text() == text and (tmp_path / "train-tokens-per-s.png").exists()


def test_a_failed_measurement_is_reported_with_its_reason():
    failed = {"kind": "train", "system": "nanoeuler triton", "impl": "nanoeuler", "B": 64, "status": "failed",
              "message": "Traceback ...\ncupy.cuda.memory.OutOfMemoryError: Out of memory allocating 4,294,967,296 bytes"}
    text = train.markdown([failed])
    assert "| nanoeuler triton | 64 | failed: cupy.cuda.memory.OutOfMemoryError: Out of memory" in text


@pytest.mark.parametrize("args, said", [
    (["--reference", "jit"], "unknown --reference ['jit']; expected eager, compile"),
    (["--batch-sizes", "2,x"], "--batch-sizes must be comma-separated integers, got '2,x'"),
    (["--dtype", "float16"], "variant naive:reference of op embedding does not take float16"),
], ids=["unknown-reference", "batch-sizes-not-integers", "dtype-the-selection-lacks"])
def test_bench_train_refuses_what_it_cannot_measure(args, said, tmp_path, capsys):
    assert main(["bench", "train", "--backend", "naive", "--preset", "micro", *args, "--out", str(tmp_path)]) == 2
    assert said in capsys.readouterr().err


# ---- quality ----------------------------------------------------------------------------------------------
def test_the_plan_holds_the_batches_euler_train_draws_and_the_scheduled_learning_rate():
    from euler_core.optim import learning_rate
    cfg = quality.QualityConfig(backends=["naive"], preset="micro", tokenizer="bytes", batch_size=3, steps=5, warmup=2,
                                lr=1e-3, seed=7)
    config, tokens, lrs, about = quality.make_plan(cfg, log=lambda *a: None)
    assert config.vocab_size == 256 and tokens.shape == (5, 3, 17) and tokens.dtype == np.int32
    assert "default corpus" in about
    from euler_core.corpus import default_corpus
    from euler_core.data.loader import TokenSource
    source = TokenSource([np.frombuffer(default_corpus().encode(), dtype=np.uint8).astype(np.int32)])
    x, y = source.batch(3, 3, 16, 7)
    assert np.array_equal(tokens[3, :, :-1], x) and np.array_equal(tokens[3, :, 1:], y)
    assert lrs.tolist() == [learning_rate(s, 1e-3, 2, 5, 0.1) for s in range(5)]


def test_relative_difference_step_by_step():
    d = quality.relative_difference([1.0, 2.2, 3.0, 9.0], [1.0, 2.0, 3.3])
    assert d["steps_compared"] == 3
    assert d["mean_rel_diff"] == pytest.approx((0 + 0.1 + 0.3 / 3.3) / 3)
    assert d["max_rel_diff"] == pytest.approx(0.1) and d["max_rel_diff_step"] == 1
    assert d["last_tenth_mean_rel_diff"] == pytest.approx(0.3 / 3.3)


def test_two_systems_trained_through_one_plan_start_alike_and_stay_alike(tmp_path):
    """The same selection twice: the second loads the first one's weights and runs the same batches,
    so the curves are identical, bit for bit; the loss falls."""
    status = main(["bench", "quality", "--backend", "naive", "--backend", "naive", "--preset", "micro", "--tokenizer",
                   "bytes", "--batch-size", "4", "--steps", "12", "--warmup", "3", "--lr", "3e-3", "--out", str(tmp_path)])
    assert status == 0
    records = load(tmp_path)
    curves = [r for r in records if r["kind"] == "quality_curve"]
    assert len(curves) == 2 and all(len(c["losses"]) == 12 for c in curves)
    assert curves[0]["losses"] == curves[1]["losses"] and curves[0]["grad_norms"] == curves[1]["grad_norms"]
    assert curves[0]["losses"][-1] < curves[0]["losses"][0] - 0.3
    compare = next(r for r in records if r["kind"] == "quality_compare")
    assert compare["mean_rel_diff"] == 0.0 and compare["steps_compared"] == 12
    assert "| nanoeuler naive | nanoeuler naive | 12 | 0% |" in (tmp_path / "quality.md").read_text()
    assert (tmp_path / "quality-loss.png").stat().st_size > 1000


def test_a_budget_cuts_the_plan_for_every_system(tmp_path):
    assert main(["bench", "quality", "--backend", "naive", "--backend", "naive", "--preset", "micro", "--tokenizer",
                 "bytes", "--batch-size", "2", "--steps", "50", "--budget", "0", "--out", str(tmp_path)]) == 0
    curves = [r for r in load(tmp_path) if r["kind"] == "quality_curve"]
    assert [len(c["losses"]) for c in curves] == [1, 1]


# ---- beside PyTorch (an interpreter with torch: $EULER_TORCH_PYTHON or this one) --------------------------
def _needs_torch() -> str:
    python = torch_python()
    reason = torch_unavailable_reason(python)
    if reason:
        pytest.skip(f"no PyTorch for the reference: {reason}")
    return python


def test_quality_against_the_pytorch_reference_on_the_cpu_agrees_to_float32_rounding(tmp_path):
    _needs_torch()
    assert main(["bench", "quality", "--backend", "naive", "--reference", "eager", "--preset", "micro", "--tokenizer",
                 "bytes", "--batch-size", "4", "--steps", "20", "--warmup", "4", "--lr", "3e-3", "--out", str(tmp_path)]) == 0
    compare = next(r for r in load(tmp_path) if r["kind"] == "quality_compare")
    assert compare["against"] == "torch eager" and compare["steps_compared"] == 20
    assert compare["max_rel_diff"] < 1e-5


def test_bench_train_runs_the_reference_beside_ours(tmp_path):
    _needs_torch()
    assert main(["bench", "train", "--backend", "naive", "--preset", "micro", "--batch-sizes", "2", "--steps", "2",
                 "--warmup", "1", "--no-cold", "--no-profile", "--peak-size", "small", "--reference", "eager",
                 "--out", str(tmp_path)]) == 0
    rows = {r["system"]: r for r in load(tmp_path) if r["kind"] == "train"}
    assert rows["torch eager"]["status"] == "ok" and rows["torch eager"]["version"]
    assert "| nanoeuler naive | 2 |" in (tmp_path / "train.md").read_text()


def test_kept_kernel_caches_are_cold_when_empty_and_warm_once_filled(tmp_path):
    with train._kernel_cache(str(tmp_path), "nanoeuler triton,attention=naive") as (folder, state):
        assert folder == tmp_path / "nanoeuler-triton-attention-naive" and state == "cold"
        (folder / "triton").mkdir(parents=True)
        (folder / "triton" / "kernel.cubin").write_bytes(b"x")
    with train._kernel_cache(str(tmp_path), "nanoeuler triton,attention=naive") as (folder, state):
        assert state == "warm"
    with train._kernel_cache(None, "torch compile") as (folder, state):
        assert state == "cold" and folder.exists() and not any(folder.iterdir())
    assert not folder.exists()  # a temporary folder is removed afterwards
