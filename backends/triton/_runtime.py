"""The Triton runtime of this backend: import, driver, launching on CuPy arrays (GPU) or on NumPy
arrays (Triton's interpreter, on the CPU), and a record mode that compiles every launch for sm_90.

Why this file exists. Triton 3.6 assumes PyTorch: its CUDA driver asks torch for the device and the
stream, its argument binder imports torch on the first launch, and its interpreter wants tensors
(`data_ptr()`, `untyped_storage()`, ...). NanoEuler has no torch, so:

- `_block_torch()` puts `sys.modules["torch"] = None` before triton is imported, unless torch is
  already imported (a benchmark that compares with PyTorch imports torch first; then Triton uses it
  for nothing but its type checks). Importing torch *after* this module fails: do it before.
- `CupyDriver` is Triton's own CUDA driver with the device, capability and current stream taken
  from CuPy. Made active on the first GPU launch, it makes Triton launch on CuPy's current stream,
  so `with cupy.cuda.Stream():` and CuPy graph capture see Triton kernels like any other.
- `Kernel` wraps a `@kernel`-decorated function and builds the `triton.jit` (GPU) or the interpreted
  (CPU) version of it when first launched that way, so one process can do both: compile for sm_90
  in tests and run the same kernels under the interpreter on NumPy arrays.
- `HostArray` is the ~20-line adapter that lets the interpreter read and write NumPy memory in
  place (it never copies: the "device" storage and the "host" storage are the same bytes).

Modes, chosen by the arrays a host launcher is given:

    CuPy arrays    compiled for the current GPU and launched on CuPy's current stream
    NumPy arrays   the interpreter, only inside `with interpreter():` or with TRITON_INTERPRET=1
                   (tests on CPU machines; bf16 is broken there, use float32/float16)
    recording      inside `with recording() as rec:` no kernel runs; every launch is noted
                   (kernel, argument types, constexprs, num_warps, num_stages) for compile checks

The heavy imports (triton, cupy) happen when this module is imported, which happens when a variant
of this backend is first used: plugin.py never imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

import numpy as np


def _block_torch() -> None:
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # Triton's binder would import torch (11 s) just to type-check


_block_torch()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402,F401

__all__ = ["triton", "tl", "kernel", "launch", "compiled", "interpreter", "recording", "xp_of", "next_pow2",
           "TL_DTYPES", "cdiv"]

cdiv = triton.cdiv


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


#: the storage dtypes of this backend, as Triton names them in a kernel signature
TL_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
             "int32": "i32", "int64": "i64", "int16": "i16", "uint16": "u16", "int8": "i8", "uint8": "u8"}

_LOCAL = threading.local()


def _interpret_env() -> bool:
    return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")


@contextlib.contextmanager
def interpreter():
    """Run this backend's kernels on NumPy arrays with Triton's interpreter (tests, CPU machines)."""
    old = getattr(_LOCAL, "interpret", False)
    _LOCAL.interpret = True
    try:
        yield
    finally:
        _LOCAL.interpret = old


class Recording(list):
    """The launches seen inside `recording()`: dicts with kernel, signature, constexprs, options."""


@contextlib.contextmanager
def recording():
    """Note every launch instead of running it (NumPy arrays stand in for device arrays)."""
    old = getattr(_LOCAL, "record", None)
    rec = Recording()
    _LOCAL.record = rec
    try:
        yield rec
    finally:
        _LOCAL.record = old


# ---- the interpreter's view of a NumPy array ------------------------------------------------------
class _HostStorage:
    def __init__(self, array):
        self.array = array

    def data_ptr(self):
        return self.array.ctypes.data

    def cpu(self):  # already on the host: the interpreter reads and writes these very bytes
        return self

    def copy_(self, other):  # ... so copying "back to the device" is nothing to do
        return self


class HostArray:
    """What Triton's interpreter expects of a tensor, for a NumPy array (no copies are made)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.dtype = array.dtype

    def data_ptr(self):
        return self.array.ctypes.data

    def untyped_storage(self):
        return _HostStorage(self.array)

    def new_empty(self, *args, **kwargs):
        return HostArray(self.array)

    def set_(self, *args):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def copy_(self, other):
        return self


class DevicePointer:
    """What Triton's launcher expects of a tensor, for a CuPy array: its address and its dtype."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype: str):
        self.ptr = ptr
        self.dtype = dtype

    def data_ptr(self):
        return self.ptr


# ---- the CUDA driver, asking CuPy instead of torch --------------------------------------------------
_DRIVER: dict = {}


def _ensure_driver():
    if "driver" in _DRIVER:
        return
    import cupy
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher, CudaUtils

    class CupyDriver(CudaDriver):
        """Triton's CUDA driver with device, capability and stream from CuPy (no torch)."""

        def __init__(self):  # deliberately not CudaDriver.__init__ (it imports torch)
            self.utils = CudaUtils()
            self.launcher_cls = CudaLauncher
            self.get_current_device = cupy.cuda.runtime.getDevice
            self.set_current_device = cupy.cuda.runtime.setDevice
            self.get_current_stream = lambda device=None: cupy.cuda.get_current_stream().ptr
            self.get_device_capability = _capability

        def get_active_torch_device(self):
            raise RuntimeError("NanoEuler's Triton driver has no torch device")

        def get_device_interface(self):
            raise RuntimeError("NanoEuler's Triton driver has no torch device interface")

        def get_empty_cache_for_benchmark(self):
            return cupy.empty(256 * 1024 * 1024 // 4, dtype=cupy.int32)

        def clear_cache(self, cache):
            cache.fill(0)

        @staticmethod
        def is_active():
            return True

    def _capability(device):
        cc = str(cupy.cuda.Device(device).compute_capability)  # "90"
        return int(cc[:-1]), int(cc[-1])

    driver = CupyDriver()
    triton.runtime.driver.set_active(driver)
    _DRIVER["driver"] = driver


# ---- kernels and launches -------------------------------------------------------------------------
class Kernel:
    """A Triton kernel written as a plain function, compiled (GPU) or interpreted (CPU) on demand."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._jit = None
        self._interpreted = None

    @property
    def jit(self):
        if self._jit is None:
            self._jit = triton.runtime.jit.JITFunction(self.fn)
        return self._jit

    @property
    def interpreted(self):
        if self._interpreted is None:
            from triton.runtime.interpreter import InterpretedFunction
            self._interpreted = InterpretedFunction(self.fn)
        return self._interpreted

    @property
    def arg_names(self):
        return self.jit.arg_names

    def __repr__(self):
        return f"<triton kernel {self.__name__}>"


def kernel(fn) -> Kernel:
    """Decorator: a Triton kernel of this backend (launch it with `launch`)."""
    return Kernel(fn)


def _is_device_array(a) -> bool:
    return hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray)


def _specialize(value):
    """(type, specialization) of a runtime argument exactly as Triton's JIT binder sees it:
    ('*bf16', 'D') for a 16-byte-aligned pointer, ('i32', 'D') for an int divisible by 16,
    ('constexpr', 1) for the int 1, ('fp32', None) for a float."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend
    if isinstance(value, np.ndarray) or _is_device_array(value):
        ptr = value.ctypes.data if isinstance(value, np.ndarray) else value.data.ptr
        value = DevicePointer(ptr, str(value.dtype))
    return native_specialize_impl(CUDABackend, value, False, True, True)


def launch(k: Kernel, grid, *args, num_warps: int = 4, num_stages: int = 3, launch_pdl: bool = False,
           **constexprs):
    """Launch `k` on `grid` (a tuple) with positional runtime arguments (arrays, ints, floats) and
    keyword constexprs. Arrays are CuPy (GPU) or NumPy (interpreter or recording); mixing is an error.
    launch_pdl: a programmatic dependent launch (Hopper): the grid may start before the previous
    kernel on the stream has finished, so `k` must call gdc_wait() before it reads anything that
    kernel wrote (see `dependent_launch`). Ignored by the interpreter."""
    grid = tuple(int(g) for g in grid)
    if any(g < 1 for g in grid):
        return  # nothing to do (an empty tensor)
    rec = getattr(_LOCAL, "record", None)
    if rec is not None:
        names = k.arg_names
        runtime_names = [n for n in names if n not in constexprs]
        if len(runtime_names) != len(args):
            raise TypeError(f"{k.__name__}: {len(args)} runtime arguments for parameters {runtime_names}")
        signature, consts, attrs = {}, dict(constexprs), {}
        for name, value in zip(runtime_names, args):
            ty, spec = _specialize(value)
            signature[name] = ty
            if ty == "constexpr":
                consts[name] = spec
            elif spec:
                attrs[(names.index(name),)] = [["tt.divisibility", 16]] if "D" in spec else []
        signature.update({n: "constexpr" for n in constexprs})
        rec.append({"kernel": k, "signature": {n: signature[n] for n in names}, "constexprs": consts,
                    "attrs": attrs, "num_warps": num_warps, "num_stages": num_stages, "launch_pdl": launch_pdl,
                    "grid": grid})
        return
    device_type = _device_array_type()
    wrapped, on_host, on_device = [], False, False
    for a in args:  # one pass, isinstance only: CuPy's __cuda_array_interface__ builds a dict per access
        if device_type is not None and isinstance(a, device_type):
            on_device = True
            wrapped.append(DevicePointer(a.data.ptr, a.dtype))
        else:
            on_host = on_host or isinstance(a, np.ndarray)
            wrapped.append(a)
    if on_device and not on_host:
        _ensure_driver()
        if launch_pdl:
            constexprs["launch_pdl"] = True
        k.jit[grid](*wrapped, num_warps=num_warps, num_stages=num_stages, **constexprs)
        return
    if on_device:
        raise TypeError(f"{k.__name__}: NumPy and CuPy arrays mixed in one launch")
    if not (getattr(_LOCAL, "interpret", False) or _interpret_env()):
        raise TypeError(f"{k.__name__}: the triton backend runs on CuPy arrays; NumPy arrays run only under "
                        "Triton's interpreter (backends.triton._runtime.interpreter() or TRITON_INTERPRET=1)")
    wrapped = [HostArray(a) if isinstance(a, np.ndarray) else a for a in args]
    with _library_interpreted():
        k.interpreted[grid](*wrapped, **constexprs)


_INTERPRETED: dict = {}


def _call_interpreted(self, *args, **kwargs):
    """JITFunction.__call__ while interpreting: run the function (tl.sum, tl.max, ... are themselves
    @triton.jit functions of Triton's standard library) through the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang
    if self.fn not in _INTERPRETED:
        _INTERPRETED[self.fn] = InterpretedFunction(self.fn)
    # InterpretedFunction.__call__ would patch triton.language for the call and never undo it; a
    # kernel's own @triton.jit helper then leaves tl.arange & co. patched, and a later compile in the
    # same process fails. So: patch, run, restore.
    scope = _patch_lang(self.fn)
    try:
        return _INTERPRETED[self.fn].rewrite()(*args, **kwargs)
    finally:
        scope.restore()


@contextlib.contextmanager
def _library_interpreted():
    """Triton decides at import time (TRITON_INTERPRET) whether its standard library's @jit
    functions are compiled or interpreted; this makes them interpretable for one launch, so the
    same process can also compile for the GPU."""
    jit_function = triton.runtime.jit.JITFunction
    if os.environ.get("TRITON_INTERPRET") and _interpret_env() and not isinstance(
            getattr(tl, "sum", None), jit_function):
        yield  # Triton was imported in interpreter mode: nothing to patch
        return
    original = jit_function.__call__
    jit_function.__call__ = _call_interpreted
    try:
        yield
    finally:
        jit_function.__call__ = original


_DEVICE_TYPE: list = []


def _device_array_type():
    """cupy.ndarray, or None where CuPy is absent (looked up once)."""
    if not _DEVICE_TYPE:
        try:
            import cupy
            _DEVICE_TYPE.append(cupy.ndarray)
        except ImportError:
            _DEVICE_TYPE.append(None)
    return _DEVICE_TYPE[0]


def compiled(xp) -> bool:
    """Whether launches for arrays of `xp` are compiled for the GPU: on the GPU and when recording
    launches to compile for sm_90, not under the interpreter (it has no gdc_wait, no inline PTX)."""
    return xp is not np or getattr(_LOCAL, "record", None) is not None


def dependent_launch(xp) -> bool:
    """Whether kernels for arrays of `xp` take programmatic dependent launches: where they are compiled."""
    return compiled(xp)


def xp_of(a):
    """numpy or cupy, whichever `a` belongs to."""
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


def compile_recorded(entry: dict, arch: int = 90):
    """Compile one recorded launch for sm_`arch` with no GPU; returns Triton's CompiledKernel
    (its .metadata.shared is the shared memory it needs; .asm holds ttgir, ptx and cubin)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = ASTSource(entry["kernel"].jit, entry["signature"], entry["constexprs"], entry.get("attrs"))
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": entry["num_warps"], "num_stages": entry["num_stages"],
                                   "launch_pdl": entry.get("launch_pdl", False)})
