"""bench/device/compare_bench.py: a kernel slower than its committed record is flagged, a card that
is slower across the board (the baseline as much) is not."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "device" / "compare_bench.py"


def _module():
    spec = importlib.util.spec_from_file_location("compare_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _records(folder: Path, times: dict):
    folder.mkdir()
    lines = []
    for (op, variant, direction), p50 in times.items():
        lines.append(json.dumps({"kind": "op", "status": "ok", "op": op, "variant": variant, "shape_set": "gpt2",
                                 "shape": "x", "direction": direction, "dtype": "bfloat16", "p50_s": p50,
                                 "baseline": None if variant.startswith("torch") else f"torch:{op}",
                                 "time": "2026-12-01T00:00:00"}))
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")


def test_only_a_slowdown_beyond_the_baselines_drift_is_flagged(tmp_path, capsys):
    committed = {("matmul", "triton:tiled", "forward"): 100e-6, ("matmul", "torch:matmul", "forward"): 100e-6,
                 ("gelu", "triton:fused", "forward"): 10e-6, ("gelu", "torch:gelu", "forward"): 10e-6,
                 ("gelu", "triton:fused", "backward"): 10e-6, ("gelu", "torch:gelu", "backward"): 10e-6}
    now = {**committed,
           ("matmul", "triton:tiled", "forward"): 110e-6,     # 10% slower, the baseline not: flagged
           ("gelu", "triton:fused", "forward"): 11e-6,        # 10% slower with the baseline: the card
           ("gelu", "torch:gelu", "forward"): 11e-6,
           ("gelu", "triton:fused", "backward"): 10.2e-6}     # 2%: within the tolerance
    _records(tmp_path / "committed", committed)
    _records(tmp_path / "now", now)
    assert _module().main([str(tmp_path / "now"), "--committed", str(tmp_path / "committed")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("compared 3 triton measurements")
    assert out[-1].endswith("drift: matmul/x (gpt2) triton:tiled fwd")
    matmul_line = next(line for line in out if line.startswith("matmul/x"))
    assert "1.100 (matmul 1.000) SLOWER" in matmul_line
