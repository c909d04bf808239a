"""The PyTorch reference backend (bench/euler-torch-reference), on the CPU: its variants pass the
conformance suite like any backend, and `euler bench ops --baseline torch` times them beside ours.

PyTorch is not a dependency of nanoeuler, nor installed in CI: these tests skip without it. The
reference's implementations are device-agnostic (NumPy arrays to CPU tensors through DLPack), so the
same code that runs on the GPU is checked here; SDPA's cuDNN and memory-efficient backends exist only
on CUDA and are checked on the GPU (bench/triton_h200.sh)."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed: the optional PyTorch reference backend "
                                    "(bench/euler-torch-reference) is tested only where it is")

import conformance  # noqa: E402
from euler_core.measure.ops import BenchConfig, run  # noqa: E402
from euler_core.measure.timing import TimingConfig  # noqa: E402
from euler_core.registry import Backend, Registry, hookimpl  # noqa: E402

try:
    from euler_torch_reference import plugin
except ImportError:  # not pip-installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "euler-torch-reference"))
    from euler_torch_reference import plugin

CUDA_ONLY = {"sdpa-cudnn", "sdpa-efficient"}


class CpuTorch:
    """The reference's variants on the CPU, under the backend name `torch`."""

    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("torch", "PyTorch on the CPU",
                        [v for v in plugin.variants("cpu", {"sdpa-flash": plugin.DTYPES})  # CPU flash takes fp32
                         if v.name not in CUDA_ONLY])]


@pytest.fixture(scope="module")
def registry():
    return Registry(plugins=[CpuTorch()], entry_points=False)


def test_the_plugin_registers_every_bench_op_on_cuda():
    names = {(v.op, v.name) for v in plugin.variants("cuda")}
    assert {op for op, _ in names} == {"embedding", "layernorm", "matmul", "attention", "gelu", "residual",
                                       "crossentropy", "adamw"}
    assert {n for op, n in names if op == "attention"} == {"sdpa-cudnn", "sdpa-flash", "sdpa-efficient"}
    assert all(v.device == "cuda" and v.requires == ("cupy",) for v in plugin.variants("cuda"))


def test_listing_backends_does_not_import_torch():
    import subprocess
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import euler_torch_reference.plugin; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(Path(plugin.__file__).parents[1])], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("variant", [v.qualname for v in CpuTorch().nanoeuler_backends()[0].variants])
def test_each_reference_variant_passes_conformance_in_float32(variant, registry):
    report = conformance.run(backend=variant, registry=registry, model=False, dtypes=["float32"])
    assert report.ok, "\n".join(str(f) for f in report.failures()[:3])
    assert any(r.status == "passed" for r in report)


def test_bench_times_ours_beside_the_reference(registry, tmp_path):
    registry = Registry(plugins=[CpuTorch()], entry_points=True)  # naive from its entry point, torch here
    cfg = BenchConfig(backend="naive", baseline="torch", ops=["matmul", "crossentropy", "attention"],
                      timing=TimingConfig.quick(), peak_timing=TimingConfig.quick())
    records = run(cfg, tmp_path, registry=registry, log=lambda *a: None, copy_to_cache=False)
    ok = [r for r in records if r.get("kind") == "op" and r["status"] == "ok"]
    assert {r["variant"] for r in ok} >= {"naive:reference", "torch:cublas", "torch:cross_entropy", "torch:sdpa-flash"}
    assert all(r["check"] == "passed" and r["conformance"] == "passed" for r in ok)
    naive = [r for r in ok if r["variant"] == "naive:reference"]
    assert naive and all(r["speedup"] > 0 and r["baseline"].startswith("torch:") for r in naive)
    assert all(r["reference"] for r in ok if r["backend"] == "torch")
