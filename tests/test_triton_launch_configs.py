"""The triton backend's launch configurations at GPT-2 124M's shapes, held to a recorded table.

Every launch one forward and one backward of each triton op would make (kernel, grid, warps,
stages, programmatic dependent launch, constexprs, argument types) is recorded with no GPU
(backends.triton._runtime.recording: nothing runs) at the shapes `euler bench ops` times
(euler_core/measure/shapes.py: the `gpt2` and `gpt2-b32` sets, B*T = 16384 and 32768, and the fused
ops at the same widths), the linears' backward at 65536 rows (B=64: the deep dW entries) and at a decoding step's few rows (forward only: 1 and 16 rows, and a
cache of 1024 positions), in bfloat16 and float32, and compared with
tests/data/triton_launch_configs.json. That table was first recorded from the kernels as they were
before their configuration tables were rewritten (main at 1d4a510), so this test shows the rewrite
left every choice as it was; grids are for an H200's 132 SMs (`_common.num_sms` off the GPU).

A deliberate change of a configuration (a new sweep's winner, cited in reports/) changes this
table too: rewrite it with

    python tests/test_triton_launch_configs.py --write

and let the diff show which launches changed. Inputs are zeros that NumPy never touches (the
record mode reads no element), so even the (32768, 50304) logits cost no memory.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton", reason="triton not installed (pip install -e '.[gpu]' or triton==3.6.0)")

from backends.triton import _runtime  # noqa: E402
from backends.triton._testing import _np_dtype  # noqa: E402
from conformance.arrays import param_grad_dtype  # noqa: E402
from euler_core.measure.shapes import GPT2_PARAMS, SHAPE_SETS  # noqa: E402
from euler_core.ops import OPS  # noqa: E402

TABLE = Path(__file__).parent / "data" / "triton_launch_configs.json"
DTYPES = ("bfloat16", "float32")


def _cases() -> list[tuple[str, str, dict, bool]]:
    """(case id, op, dims, with backward)."""
    cases = []
    for set_name in ("gpt2", "gpt2-b32"):
        shapes = SHAPE_SETS[set_name]
        for op, entries in shapes.items():
            for label, dims in entries:
                cases.append((f"{set_name}/{op}/{label}", op, dims, True))
        N, C = shapes["layernorm"][0][1]["N"], shapes["layernorm"][0][1]["C"]
        V = shapes["crossentropy"][0][1]["V"]
        n_valid = shapes["crossentropy"][0][1]["n_valid"]
        cases += [(f"{set_name}/layernorm_residual/ln", "layernorm_residual", {"N": N, "C": C}, True),
                  (f"{set_name}/matmul_gelu/fc", "matmul_gelu", {"N": N, "K": C, "M": 4 * C}, True),
                  (f"{set_name}/gelu_matmul/fc_proj", "gelu_matmul", {"N": N, "K": 4 * C, "M": C}, True),
                  (f"{set_name}/classifier_crossentropy/lm_head", "classifier_crossentropy",
                   {"N": N, "C": C, "V": V, "n_valid": n_valid}, True),
                  (f"{set_name}/sumsq/grads", "sumsq", {"N": GPT2_PARAMS}, False)]
    C, V = 768, 50304
    linears = {"qkv": (C, 3 * C, True), "attn_proj": (C, C, True), "fc": (C, 4 * C, True),
               "fc_proj": (4 * C, C, True), "lm_head": (C, V, False)}
    for label, (K, M, bias) in linears.items():  # B=64: the deep dW entries (matmul.DEEP_ROWS)
        if label != "lm_head":
            cases.append((f"b64/matmul/{label}", "matmul", {"N": 65536, "K": K, "M": M, "bias": bias}, True))
    for rows in (1, 16):  # a decoding step: one new position for each of `rows` sequences
        for label, (K, M, bias) in linears.items():
            cases.append((f"decode{rows}/matmul/{label}", "matmul", {"N": rows, "K": K, "M": M, "bias": bias}, False))
        cases += [(f"decode{rows}/matmul_gelu/fc", "matmul_gelu", {"N": rows, "K": C, "M": 4 * C}, False),
                  (f"decode{rows}/layernorm/ln", "layernorm", {"N": rows, "C": C}, False),
                  (f"decode{rows}/layernorm_residual/ln", "layernorm_residual", {"N": rows, "C": C}, False),
                  (f"decode{rows}/attention_cached/cache1024", "attention_cached",
                   {"B": rows, "Tn": 1, "Tk": 1024, "C": C, "NH": 12}, False)]
    return cases


class _Untouched:
    """Stands in for the random generator of `OpSpec.example`: integer ids 0, no position ignored."""

    def integers(self, low, high, size):
        return np.full(size, low, dtype=np.int64)

    def random(self, size):
        return np.ones(size)


def _inputs(op: str, dims: dict, dtype: str) -> tuple[dict, dict]:
    """The op's example inputs at `dims` as zeros in `dtype` (float arrays) that are never touched."""
    spec = OPS[op]
    module = sys.modules[spec.example.__func__.__module__]  # where the example is written
    lazy = lambda rng, shape, dt, scale=1.0: np.zeros(shape, np.float32)  # noqa: E731
    original, module.random_float = module.random_float, lazy
    try:
        inputs, attrs = spec.example(dims, "float32", _Untouched())
    finally:
        module.random_float = original
    dt = _np_dtype(dtype)
    inputs = {k: (np.zeros(v.shape, dt) if v.dtype.kind == "f" and k != spec.grad_input else v)
              for k, v in inputs.items() if v is not None}
    return inputs, spec.fill_attrs(attrs)


def _adamw_inputs(dtype: str) -> tuple[dict, dict]:
    """adamw as the training step calls it: float32 state over every parameter, a 16-bit param_copy
    (16-bit training), the gradient's sum of squares for clipping, lr and step on the device."""
    n = GPT2_PARAMS
    inputs = {k: np.zeros(n, np.float32) for k in ("param", "grad", "m", "v")}
    if dtype != "float32":
        inputs["param_copy"] = np.zeros(n, _np_dtype(dtype))
    inputs["grad_sumsq"] = np.ones(1, np.float32)
    attrs = OPS["adamw"].fill_attrs({"lr": np.ones(1, np.float32), "step": np.ones(1, np.float32), "max_norm": 1.0})
    return inputs, attrs


def _describe(e: dict) -> str:
    """One launch as a line of text: what a configuration decides, no pointers or values."""
    consts = " ".join(f"{k}={v}" for k, v in sorted(e["constexprs"].items()))
    types = ",".join(t for t in e["signature"].values() if t != "constexpr")
    return (f"{e['kernel'].__name__} grid={list(e['grid'])} warps={e['num_warps']} stages={e['num_stages']} "
            f"pdl={int(e['launch_pdl'])} {consts} types={types}")


def record(op: str, dims: dict, dtype: str, backward: bool) -> list[str]:
    """Every launch of one forward (and backward) of `op`, described."""
    spec = OPS[op]
    impl = importlib.import_module(f"backends.triton.{op}")
    inputs, attrs = _adamw_inputs(dtype) if op == "adamw" else _inputs(op, dims, dtype)
    with _runtime.recording() as rec:
        out, saved = impl.forward(inputs, attrs, None)
        if backward and spec.output is not None:
            if spec.grad_input:
                dout = inputs[spec.grad_input]
            else:
                dout = tuple(np.zeros(o.shape, o.dtype) for o in out) if spec.outputs else \
                    np.zeros(out.shape, out.dtype)
            grad_dt = _np_dtype(param_grad_dtype(dtype))  # float32 for 16-bit inputs (mixed precision)
            impl.backward(saved, dout, {p: np.zeros(inputs[p].shape, grad_dt) for p in spec.params if p in inputs})
    return [_describe(e) for e in rec]


CASES = [(f"{case}/{dtype}", op, dims, backward, dtype) for case, op, dims, backward in _cases() for dtype in DTYPES]


def _table() -> dict:
    return json.loads(TABLE.read_text())


@pytest.mark.parametrize("case,op,dims,backward,dtype", CASES, ids=[c[0] for c in CASES])
def test_launches_are_the_recorded_ones(case, op, dims, backward, dtype):
    expected = _table().get(case)
    assert expected is not None, f"{case}: not in {TABLE.name} (python {Path(__file__).name} --write)"
    got = record(op, dims, dtype, backward)
    assert got == expected, f"{case}: launches differ from {TABLE.name}:\n" + "\n".join(
        f"  {'=' if g == x else '!'} got      {g}\n    expected {x}" for g, x in zip(got, expected)) + (
        f"\n  got {len(got)} launches, expected {len(expected)}" if len(got) != len(expected) else "")


def test_the_table_has_no_stale_cases():
    assert sorted(_table()) == sorted(c[0] for c in CASES)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python {sys.argv[0]} --write   (rewrites {TABLE})")
    TABLE.parent.mkdir(exist_ok=True)
    table = {case: record(op, dims, dtype, backward) for case, op, dims, backward, dtype in CASES}
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE}: {len(table)} cases, {sum(map(len, table.values()))} launches")
