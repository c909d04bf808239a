"""`euler bench ops` on every CPU backend installed here, at small shapes, and `euler bench report` on
its records: the CI smoke run of the benchmark (quick timing; the conformance suite itself runs in
conformance/, so it is skipped here and the check at the benchmarked shape is what guards timing)."""

import json

import pytest

from euler_core.cli import main
from euler_core.ops import OPS
from euler_core.registry import get_registry


def cpu_backends():
    return sorted(b.name for b in get_registry().backends.values()
                  if any(v.device == "cpu" and v.unavailable_reason() is None for v in b.variants))


def test_bench_ops_on_every_cpu_backend_and_the_report_renders(tmp_path, capsys):
    backends = cpu_backends()
    assert "naive" in backends
    out = tmp_path / "bench"
    status = main(["bench", "ops", "--backend", ",".join(backends), "--shapes", "small", "--quick",
                   "--no-conformance", "--no-cache", "--out", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    ops = [r for r in records if r["kind"] == "op"]
    assert all(r["status"] == "ok" for r in ops), [r["message"] for r in ops if r["status"] != "ok"]
    timed_backends = {r["backend"] for r in ops}
    assert timed_backends == set(backends)
    bench_ops = {"embedding", "layernorm", "matmul", "attention", "gelu", "residual", "crossentropy", "adamw"}
    assert {r["op"] for r in ops if r["backend"] == "naive"} == bench_ops & set(OPS)
    assert all(r["conformance"] == "not run" and r["check"] == "passed" for r in ops)

    report = tmp_path / "report"
    assert main(["bench", "report", str(out), "--out", str(report)]) == 0
    text = (report / "report.md").read_text()
    for op in bench_ops:
        assert f"## {op}" in text
    assert (report / "speedup-matmul.png").exists() and list(report.glob("roofline-*.png"))


def test_bench_ops_exit_status_says_a_variant_failed(tmp_path, monkeypatch, capsys):
    from planted_bench import Planted
    from euler_core.registry import Registry
    import euler_core.measure.ops as bench_ops
    registry = Registry(plugins=[Planted()])
    monkeypatch.setattr(bench_ops, "get_registry", lambda: registry)
    status = main(["bench", "ops", "--backend", "planted:off", "--ops", "gelu", "--quick", "--no-conformance",
                   "--no-cache", "--out", str(tmp_path)])
    assert status == 1
    assert "FAILED the check at this shape, not timed" in capsys.readouterr().out


def test_bench_step_profiles_a_training_run_op_by_op(tmp_path, capsys):
    prof = tmp_path / "prof.json"
    status = main(["bench", "step", "--backend", "naive", "--preset", "micro", "--steps", "4", "--eval-every", "0",
                   "--checkpoint-every", "0", "--sample-tokens", "2", "--out", str(tmp_path / "run"),
                   "--skip-steps", "1", "--profile-out", str(prof)])
    printed = capsys.readouterr().out
    assert status == 0 and "| op | direction | calls/step | ms/step | % of step |" in printed
    summary = json.loads(prof.read_text())
    assert summary["steps"] == 3 and summary["skipped"] == 1  # 4 steps, the first left out
    rows = {(r["op"], r["direction"]): r for r in summary["rows"]}
    assert rows[("adamw", "forward")]["calls"] == 2           # decayed and non-decayed halves
    # 4 linears per layer, 2 layers, the lm_head: naive offers the fused ops, so the attention
    # projection is matmul_residual (it adds itself to the stream), the MLP (c_fc, the GELU, c_proj)
    # is one mlp call and the lm_head is fused with the loss: c_attn alone is a matmul
    assert rows[("matmul", "forward")]["calls"] == rows[("matmul_residual", "forward")]["calls"] == 2
    assert rows[("mlp", "forward")]["calls"] == 2 and ("matmul_gelu", "forward") not in rows
    assert rows[("classifier_crossentropy", "forward")]["calls"] == 1
    assert 0 < summary["kernels_s"] <= summary["wall_s"]


@pytest.mark.parametrize("args,message", [
    ([], "give --out or --once"),
    (["--once", "prose", "4096"], "--once MIX: 'prose' is not a mix; the mixes: uniform, english, python"),
    (["--once", "english", "1000"], "--once N: '1000' must be a multiple of T = 1024"),
    (["--once", "english", "0"], "--once N: '0' must be a multiple of T = 1024"),
])
def test_embedding_tokens_refuses_bad_arguments_before_touching_a_gpu(args, message):
    """bench/tune/embedding_tokens.py (a GPU benchmark) names the bad argument and exits 2 before it
    imports CuPy, so the refusal is the same on a machine without a GPU."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "bench" / "tune" / "embedding_tokens.py"
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
