"""Checks and small helpers the host launchers of the cupy_raw backend share.

The dispatcher (euler_core.kernels) already checks shapes, dtypes against a variant's declared
ones, and contiguity; these repeat the few a launcher cannot run without, so that a direct call (a
test, a benchmark) also fails with a clear error before any launch. Nothing here imports CuPy: a
launcher's arrays are CuPy arrays on the GPU and NumPy arrays in recording mode (_runtime), and
`xp_of` picks the module that allocates like them.
"""

from __future__ import annotations

import numpy as np

#: the float dtypes every variant of this backend takes
DTYPES = ("float32", "float16", "bfloat16")

#: the C type a kernel names for each storage dtype (the `floatX`-style defines of the .cu sources)
CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double",
          "int32": "int", "int64": "long long"}


def ctype(a_or_dtype) -> str:
    """The C type of an array's elements (or of a dtype name): 'float', '__half', '__nv_bfloat16', ..."""
    dt = str(getattr(a_or_dtype, "dtype", a_or_dtype))
    if dt not in CTYPES:
        raise TypeError(f"cupy_raw: no C type for dtype {dt}")
    return CTYPES[dt]


def check_float(op: str, name: str, a) -> str:
    dt = str(a.dtype)
    if dt not in DTYPES:
        raise TypeError(f"{op}: the cupy_raw backend takes {', '.join(DTYPES)} for '{name}', got {dt}")
    return dt


def check_contiguous(op: str, **arrays) -> None:
    for name, a in arrays.items():
        if a is not None and not a.flags.c_contiguous:
            raise ValueError(f"{op}: the cupy_raw backend needs '{name}' C-contiguous; "
                             "pass a contiguous copy (ascontiguousarray)")


def check_param_grad(op: str, name: str, buf, param) -> None:
    """A parameter-gradient buffer: the parameter's shape, contiguous, and its dtype or float32
    (mixed precision: 16-bit parameters accumulate into float32 gradient buffers)."""
    if tuple(buf.shape) != tuple(param.shape):
        raise ValueError(f"{op}: grads['{name}'] must have shape {tuple(param.shape)}, got {tuple(buf.shape)}")
    if str(buf.dtype) not in (str(param.dtype), "float32"):
        raise TypeError(f"{op}: grads['{name}'] must be {param.dtype} or float32, got {buf.dtype}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{op}: grads['{name}'] must be C-contiguous")


def output(op: str, xp, out, shape, dtype, name: str = "out"):
    """`out` checked (shape, dtype, contiguous), or a new uninitialised array."""
    dtype = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    if out is None:
        return xp.empty(shape, dtype=np_dtype(dtype))
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: '{name}' must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if str(out.dtype) != dtype:
        raise TypeError(f"{op}: '{name}' must have dtype {dtype}, got {out.dtype}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{op}: '{name}' must be C-contiguous")
    return out


def grad_buffer(op: str, grads: dict, name: str, like, xp):
    """The activation-gradient buffer the caller passed (overwritten), or a new array like `like`."""
    return output(op, xp, grads.get(name), like.shape, str(like.dtype), name=f"grads['{name}']")


def np_dtype(dtype: str):
    """The NumPy dtype for a dtype name (bfloat16 from ml_dtypes, as CuPy uses it too)."""
    if dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def xp_of(a):
    """numpy or cupy, whichever `a` belongs to."""
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


def aligned(*arrays, nbytes: int = 16) -> bool:
    """Whether every array's data starts on an `nbytes` boundary (vector loads need it)."""
    for a in arrays:
        ptr = a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr
        if ptr % nbytes:
            return False
    return True


#: SMs of the GPU that recorded (compile-test) launches are sized for: an H200's
H200_SMS = 132
_SMS: dict = {}


def num_sms(xp) -> int:
    """Multiprocessors of the current GPU (for persistent grids); H200_SMS off the GPU."""
    if xp is np:
        return H200_SMS
    dev = xp.cuda.Device().id
    if dev not in _SMS:
        _SMS[dev] = xp.cuda.Device(dev).attributes["MultiProcessorCount"]
    return _SMS[dev]


def i32(v) -> np.int32:
    """A Python int as the C int a kernel takes, refusing what does not fit."""
    v = int(v)
    if not -2**31 <= v < 2**31:
        raise ValueError(f"cupy_raw: {v} does not fit the kernel's 32-bit int")
    return np.int32(v)


def f32(v) -> np.float32:
    return np.float32(float(v))


#: threads per block and blocks per SM of the grid-stride elementwise kernels
ELEMENTWISE_THREADS, ELEMENTWISE_BLOCKS_PER_SM = 256, 8


def elementwise_grid(items: int, xp) -> int:
    """Blocks for a grid-stride loop over `items` (enough to fill the GPU, no more than needed)."""
    return min(-(-int(items) // ELEMENTWISE_THREADS), ELEMENTWISE_BLOCKS_PER_SM * num_sms(xp))


def vector_ok(*arrays) -> bool:
    """Whether 16-byte pack loads are safe for these arrays (every base pointer 16-byte aligned)."""
    return aligned(*arrays, nbytes=16)
