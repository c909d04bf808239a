"""Devices: NumPy arrays live on "cpu", CuPy arrays on "cuda". Nothing here imports CuPy until a
CUDA array is actually met or asked for."""

from __future__ import annotations

import numpy as np

DEVICES = ("cpu", "cuda")


def device_of(array) -> str:
    """'cpu' for a NumPy array, 'cuda' for anything exposing __cuda_array_interface__ (CuPy)."""
    if isinstance(array, np.ndarray):
        return "cpu"
    if hasattr(array, "__cuda_array_interface__"):
        return "cuda"
    raise TypeError(f"expected a NumPy or CuPy array, got {type(array).__name__}")


def array_module(device: str):
    """numpy for 'cpu', cupy for 'cuda'."""
    if device == "cpu":
        return np
    if device == "cuda":
        import cupy
        return cupy
    raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")


def module_of(array):
    """numpy or cupy: the array module of `array` (for code written once for both)."""
    return array_module(device_of(array))


def to_device(array, device: str):
    """The same values on `device` (the array itself when it is already there)."""
    if array is None or device_of(array) == device:
        return array
    if device == "cpu":
        return array.get()
    return array_module("cuda").asarray(array)


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device can be used here, else why not (cached after the first call)."""
    if "_reason" not in _CUDA:
        _CUDA["_reason"] = _probe_cuda()
    return _CUDA["_reason"]


_CUDA: dict = {}


def _probe_cuda() -> str | None:
    try:
        import cupy
    except ImportError:
        return "cupy not installed (pip install -e '.[gpu]')"
    except Exception as e:  # a broken install is a reason too, not a crash
        return f"cupy failed to import: {e}"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as e:
        return f"no CUDA device ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    return None


#: float dtypes a model or an array can be stored in; bfloat16 comes from ml_dtypes
STORAGE_DTYPES = ("float64", "float32", "bfloat16", "float16")


def storage_dtype(name: str):
    """The NumPy dtype (CuPy uses NumPy's) of a storage dtype name; bfloat16 needs ml_dtypes."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("bfloat16 arrays need ml_dtypes (pip install ml_dtypes; the gpu extra has it)") from None
        return np.dtype(ml_dtypes.bfloat16)
    if name not in STORAGE_DTYPES:
        raise TypeError(f"unknown storage dtype {name!r}; expected one of {', '.join(STORAGE_DTYPES)}")
    return np.dtype(name)
