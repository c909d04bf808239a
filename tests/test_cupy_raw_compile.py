"""Every CUDA source of the cupy_raw backend, at every launch its host launchers make, compiled for
sm_90 (Hopper, the H200) with no GPU: with nvcc (ptxas's registers and shared memory checked against
sm_90's limits) and with NVRTC given exactly the options CuPy's RawModule uses.

The launches are not listed by hand: each op's forward and backward run in recording mode
(backends.cupy_raw._runtime.recording) at GPT-2 124M's training shapes (C=768, heads of 64 and 128,
V=50304) and at short, ragged ones, in float32, float16 and bfloat16 (16-bit inputs with float32
parameter-gradient buffers, the mixed-precision contract). Recording checks each launch against
its kernel's C signature (argument count, exact scalar C types, pointer element dtypes) and the
launch limits (1024 threads, 227 KB of dynamic shared memory); compiling then checks that the
source builds and that registers x threads and static + dynamic shared memory fit one SM.
A compile error fails here, with the compiler's message.
"""

import importlib.util

import pytest

from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import _source
from backends.cupy_raw._testing import recorded_launches
from backends.cupy_raw.plugin import _VARIANTS
from euler_core.ops import OPS

#: registers one SM has (sm_90), and the shared memory one block may use
SM90_REGISTERS = 65536
SM90_MAX_SHARED = rt.MAX_SHARED_PER_BLOCK

#: (op, dims): GPT-2 124M training shapes (rows cut down: launch configurations do not depend on
#: them) and short, ragged ones
SHAPES = {
    "embedding": [{"B": 2, "T": 64, "C": 768, "V": 50304}, {"B": 2, "T": 17, "C": 36, "V": 50, "maxT": 24}],
    "layernorm": [{"N": 64, "C": 768}, {"N": 17, "C": 36}, {"N": 8, "C": 1600}],
    "layernorm_residual": [{"N": 64, "C": 768}, {"N": 17, "C": 36}, {"N": 8, "C": 1600}],
    "attention": [{"B": 1, "T": 128, "C": 768, "NH": 12}, {"B": 1, "T": 128, "C": 768, "NH": 6},
                  {"B": 2, "T": 17, "C": 36, "NH": 3}],
    "attention_cached": [{"B": 1, "Tn": 1, "Tk": 1024, "C": 768, "NH": 12}, {"B": 2, "Tn": 7, "Tk": 20, "C": 20, "NH": 4}],
    "gelu": [{"N": 64, "C": 3072}, {"N": 17, "C": 37}],
    "residual": [{"N": 64, "C": 768}, {"N": 17, "C": 37}],
    "crossentropy": [{"B": 2, "T": 2, "V": 50304, "n_valid": 50257}, {"B": 2, "T": 3, "V": 37}],
    "crossentropy_onepass": [{"B": 2, "T": 2, "V": 50304, "n_valid": 50257}, {"B": 2, "T": 3, "V": 37}],
    "adamw": [{"N": 4099}],
    "sumsq": [{"N": 70001}],
}
DTYPES = ("float32", "float16", "bfloat16")


def _launches():
    """(op, variant, dtype, Launch) for every launch, and the distinct (source, defines) compiled."""
    launches, modules = [], {}
    for op, variant, impl, _ in _VARIANTS:
        if op not in SHAPES or op not in OPS or importlib.util.find_spec(f"backends.cupy_raw.{impl.partition(':')[0]}") is None:
            continue
        for dims in SHAPES[op]:
            for dtype in DTYPES:
                rec = recorded_launches(op, variant, dims, dtype, "float32")
                for launch in rec:
                    launches.append((op, variant, dtype, launch))
                    key = rt._key(launch.module, launch.defines) + (launch.arch,)
                    modules.setdefault(key, (launch.module, launch.defines, launch.arch))
    return launches, list(modules.values())


LAUNCHES, MODULES = _launches()
_RESOURCES: dict = {}


def _module_id(module):
    name, defines, arch = module
    return name + f"-{arch}-" + "-".join(f"{k}={v}".replace("__nv_", "").replace("__", "") for k, v in sorted(defines.items()))


def _nvcc_resources(module):
    key = rt._key(module[0], module[1]) + (module[2],)
    if key not in _RESOURCES:
        _RESOURCES[key] = rt.compile_check(*module, compiler="nvcc")
    return _RESOURCES[key]


def test_every_op_and_kernel_is_recorded():
    ops = {op for op, _, _, _ in LAUNCHES}
    assert ops == set(SHAPES) & set(OPS), f"ops recorded {sorted(ops)}"
    kernels = {launch.kernel for _, _, _, launch in LAUNCHES}
    assert {"embedding_forward", "embedding_dwpe", "embedding_count", "embedding_plan", "embedding_bucket",
            "embedding_dwte", "embedding_order", "embedding_dwte_heavy", "layernorm_forward", "layernorm_backward", "layernorm_finish",
            "layernorm_residual_forward", "layernorm_residual_backward", "gelu_forward",
            "gelu_backward", "residual_forward", "crossentropy_forward", "crossentropy_backward",
            "crossentropy_onepass", "adamw_update",
            "attention_simple_forward", "attention_simple_backward_query", "attention_simple_backward_key",
            "attention_flash_forward", "attention_flash_delta", "attention_flash_backward_dkdv",
            "attention_flash_backward_dq", "attention_wgmma_forward", "attention_wgmma_backward_dkdv",
            "attention_wgmma_backward_dq", "attention_cached_forward", "sumsq_partial", "sumsq_finish"} - (
        set() if "sumsq" in OPS else {"sumsq_partial", "sumsq_finish"}) <= kernels


@pytest.mark.skipif(rt.nvcc_path() is None, reason="nvcc not found (CUDA toolkit; /usr/local/cuda/bin)")
@pytest.mark.parametrize("module", MODULES, ids=[_module_id(m) for m in MODULES])
def test_compiles_with_nvcc_for_sm90(module):
    resources = _nvcc_resources(module)
    assert resources, f"ptxas reported no kernel for {_module_id(module)}"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="cupy not installed (its NVRTC path)")
@pytest.mark.parametrize("module", MODULES, ids=[_module_id(m) for m in MODULES])
def test_compiles_with_rawmodule_nvrtc_options_for_sm90(module):
    rt.compile_check(*module, compiler="nvrtc")


@pytest.mark.skipif(rt.nvcc_path() is None, reason="nvcc not found (CUDA toolkit; /usr/local/cuda/bin)")
def test_every_launch_fits_an_sm90_multiprocessor():
    problems = []
    for op, variant, dtype, launch in LAUNCHES:
        res = _nvcc_resources((launch.module, launch.defines, launch.arch)).get(launch.kernel)
        where = f"{op}:{variant} {dtype} {launch.kernel} grid {launch.grid} block {launch.block}"
        if res is None:
            problems.append(f"{where}: kernel not in the compiled module")
            continue
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if res.registers * threads > SM90_REGISTERS:
            problems.append(f"{where}: {res.registers} registers x {threads} threads > {SM90_REGISTERS}")
        if res.shared_bytes + launch.shared_mem > SM90_MAX_SHARED:
            problems.append(f"{where}: {res.shared_bytes} static + {launch.shared_mem} dynamic bytes of shared "
                            f"memory > {SM90_MAX_SHARED}")
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(rt.nvcc_path() is None, reason="nvcc not found (CUDA toolkit; /usr/local/cuda/bin)")
def test_gpt2_launches_do_not_spill_registers():
    """At GPT-2 124M's shapes (C=768, heads of 64), no kernel spills registers to local memory."""
    spills = []
    for op, variant, dtype, launch in LAUNCHES:
        if dtype == "float32" or launch.defines.get("HEAD_DIM", 64) != 64 or launch.defines.get("PACKS", 3) != 3:
            continue
        res = _nvcc_resources((launch.module, launch.defines, launch.arch)).get(launch.kernel)
        if res is not None and res.spill_bytes:
            spills.append(f"{op}:{variant} {dtype} {launch.kernel}: {res.spill_bytes} bytes spilled")
    assert not spills, "\n".join(spills)


def test_a_compile_error_is_reported_with_the_compilers_message(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text('extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }\n')
    monkeypatch.setattr(_source, "SOURCE_DIR", tmp_path)
    compilers = [c for c, ok in (("nvcc", rt.nvcc_path()), ("nvrtc", importlib.util.find_spec("cupy"))) if ok]
    if not compilers:
        pytest.skip("neither nvcc nor cupy's NVRTC is installed")
    for compiler in compilers:
        with pytest.raises(rt.CompileError, match="undefined_name"):
            rt.compile_check("broken", compiler=compiler)


@pytest.mark.skipif(rt.nvcc_path() is None, reason="nvcc not found (CUDA toolkit; /usr/local/cuda/bin)")
@pytest.mark.parametrize("ring", [2, 4, 5])
def test_the_overlapped_attention_forward_fits_one_block_an_sm(ring, monkeypatch):
    """attention's wgmma forward with forward_schedule "overlapped" (not in LAUNCHES: not the shipped
    schedule) at GPT-2's heads: one block of 288 threads an SM at its __maxnreg__ budget, no spills,
    no wgmma serialised by ptxas (its overlap is the point), its ring of 128-key stages within the
    shared memory; and NVRTC takes the module as RawModule compiles it."""
    import numpy as np
    from backends.cupy_raw import _common, attention
    monkeypatch.setattr(attention.wgmma, "forward_schedule", "overlapped")
    monkeypatch.setattr(attention.wgmma, "forward_ring", (ring, 1))
    qkv = np.ones((4, 1024, 3 * 768), dtype=_common.np_dtype("bfloat16"))
    with rt.recording() as rec:
        attention.wgmma.forward({"qkv": qkv}, {"n_head": 12})
    (launch,) = rec
    assert launch.kernel == "attention_wgmma_forward_overlapped" and launch.block[0] == 288
    res = rt.compile_check(launch.module, launch.defines, arch=launch.arch, compiler="nvcc")[launch.kernel]
    assert res.registers * 288 <= SM90_REGISTERS and not res.spill_bytes and not res.wgmma_serialized, res
    assert res.shared_bytes + launch.shared_mem <= SM90_MAX_SHARED
    if importlib.util.find_spec("cupy") is not None:
        rt.compile_check(launch.module, launch.defines, arch=launch.arch, compiler="nvrtc")
