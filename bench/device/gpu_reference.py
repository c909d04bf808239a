"""The benchmark's float64 reference on the GPU against the same reference on the host (issue 15).

`euler bench ops` checks a CUDA variant against naive:reference run on the GPU: the naive kernels'
NumPy code given float64 CuPy arrays (euler_core/measure/ops.py make_reference). This script shows
that the GPU run computes what the host run computes: for every op and shape of the chosen sets, in
float32 and bfloat16 inputs, it makes the inputs on the GPU, computes the reference there, copies
the same inputs to the host, computes the reference there, and compares every output and gradient
with the float64 tolerance. Then it times the GPU reference at the largest shape of each op.

    python bench/device/gpu_reference.py                # small, gpt2 and gpt2-b32 on the GPU
    SETS=small DRY=1 python bench/device/gpu_reference.py   # no GPU: both sides on the host

Prints one line per (op, shape, dtype) and exits 1 if any differs.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from euler_core.measure.ops import make_reference
from euler_core.measure.shapes import dims_text, shapes_for
from euler_core.numerics import CheckFailed, compare, host, host64, is_float, tolerance
from euler_core.ops import OPS
from euler_core.registry import get_registry

DRY = os.environ.get("DRY") == "1"
DEVICE = "cpu" if DRY else "cuda"
SETS = os.environ.get("SETS", "small,gpt2,gpt2-b32").split(",")
DTYPES = os.environ.get("DTYPES", "float32,bfloat16").split(",")


def host_reference(op, ref, registry):
    """naive:reference on the host, from the GPU reference's own inputs."""
    naive = registry.find("naive:reference", op).load()
    spec = OPS[op]
    exact = {k: (host64(v) if is_float(v) else host(v)) for k, v in ref.typed.items()}
    full = spec.fill_attrs(ref.attrs)
    if spec.output is None:
        naive.forward(exact, full, None)
        return {k: exact[k] for k in ("param", "m", "v")}
    out, saved = naive.forward(exact, full, None)
    grads = {p: np.zeros_like(exact[p]) for p in spec.params if p in exact}
    result = naive.backward(saved, host64(ref.dout), grads)
    return {"out": out, **{f"d{n}": result[n] for n in spec.differentiable if n in exact}}


def main() -> int:
    registry = get_registry()
    failures = 0
    for op in OPS:
        for set_name, label, dims in shapes_for(SETS, op):
            for dtype in DTYPES:
                start = time.perf_counter()
                try:
                    ref = make_reference(op, dims, dtype, 0, registry, DEVICE)
                    if not DRY:
                        import cupy
                        cupy.cuda.Device().synchronize()
                except Exception as e:
                    failures += 1
                    print(f"FAIL {op} {set_name}/{label} {dims_text(dims)} {dtype}: the reference on {DEVICE} "
                          f"raised {type(e).__name__}: {e}", flush=True)
                    continue
                seconds = time.perf_counter() - start
                if set_name != "small":  # the host reference of GPT-2's shapes is what the GPU replaces
                    print(f"ok   {op} {set_name}/{label} {dims_text(dims)} {dtype}: reference on {DEVICE} "
                          f"{seconds:.2f} s (inputs included)", flush=True)
                    del ref
                    continue
                host = host_reference(op, ref, registry)
                try:
                    for name, expected in host.items():
                        compare(f"{op} {name}", ref.expected[name], expected, tolerance("float64", "forward"),
                                what="the host's float64 reference")
                except CheckFailed as e:
                    failures += 1
                    print(f"FAIL {op} {set_name}/{label} {dtype}: {e}", flush=True)
                    continue
                print(f"ok   {op} {set_name}/{label} {dims_text(dims)} {dtype}: {DEVICE} = host "
                      f"({', '.join(host)}), {seconds:.2f} s", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
