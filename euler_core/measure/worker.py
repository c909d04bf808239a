"""The worker process of `euler bench train` and `euler bench quality` (workers.py says why processes):
`python -m euler_core.measure.worker SPEC_JSON` runs one role and prints its result as the last line."""

from __future__ import annotations

import time

T_START = time.time()  # when this worker's own code began (the interpreter and `import euler_core` before it)

import json  # noqa: E402  (after the clock: the imports count as the worker's time)
import sys  # noqa: E402


def worker_peaks(spec: dict) -> dict:
    """The device of each selection and its variants, the environment of each device, and the ceilings
    of the devices used (the bf16 matmul peak on a GPU, float32's on the CPU)."""
    from euler_core.kernels import Kernels

    from . import records as rec
    from .peaks import measure_peaks
    systems = {}
    for selection in spec["selections"]:
        kernels = Kernels(selection, dtype=spec["dtype"])
        systems[selection] = {"device": kernels.device, "notes": kernels.notes,
                              "variants": {op: v.qualname for op, v in kernels.variants.items()}}
    devices = {s["device"] for s in systems.values()}
    if spec["reference"]:  # the PyTorch reference runs on the GPU where there is one
        from euler_core.device import cuda_unavailable_reason
        devices.add("cuda" if cuda_unavailable_reason() is None else "cpu")
    peaks, environments = {}, {}
    for device in sorted(devices):
        environments[device] = rec.environment(device)
        if spec.get("measure", True):
            peaks[device] = measure_peaks(device, "bfloat16" if device == "cuda" else "float32", spec["peak_size"])
    return {"systems": systems, "peaks": peaks, "environments": environments}


def main(argv=None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    role = spec["role"]
    if role == "peaks":
        result = worker_peaks(spec)
    elif role in ("step", "profile"):
        from . import train
        result = train.worker_step(spec) if role == "step" else train.worker_profile(spec)
    elif role == "quality":
        from . import quality
        result = quality.worker_quality(spec)
    else:
        raise SystemExit(f"unknown worker role {role!r}")
    result["t_start"] = T_START
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
