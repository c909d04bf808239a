"""The CUDA C runtime of the cupy_raw backend: load a `.cu` source, compile it with NVRTC through
CuPy's RawModule (cached), launch its kernels with exactly typed arguments, and, with no GPU,
compile the same source for sm_90 (nvcc or NVRTC) or record what would have been launched.

Sources. `source(name, defines)` and `signature(src, kernel)` (_source.py, re-exported here) give a
`.cu` file's complete text and a kernel's parsed parameters; every distinct set of defines is its
own compiled module.

Arguments. CuPy does not check a kernel's arguments against its C signature: a Python float goes
in as a double and an int as a 64-bit integer, and the kernel reads garbage. `launch` therefore
takes only NumPy scalars of an exact C type (np.int32, np.uint32, np.int64, np.uint64, np.float32,
np.float64) and device arrays (passed as pointers); anything else is a TypeError before launch.
In recording mode it also checks every argument against the kernel's parsed C signature (pointer
element types included), which is how CI catches a mismatched launch without a GPU.

Modes:

    CuPy arrays    the kernel is compiled on first use (NVRTC, OPTIONS, the current GPU's arch) and
                   launched on CuPy's current stream (so stream capture records it)
    recording      inside `with recording() as rec:` nothing is compiled or run; NumPy arrays stand
                   in for device arrays and every launch is noted (module, defines, kernel, grid,
                   block, shared memory, argument types) and checked against the kernel's signature
    emulation      inside `with emulation():` kernels are compiled by g++ against a small CPU
                   emulation of CUDA (_emulator.py) and run on NumPy arrays, arguments checked
                   against the signature as in recording mode (tests on machines with no GPU)

`compile_check(name, defines)` compiles a source for sm_90 with no GPU, with nvcc (`-cubin`,
reporting each kernel's registers and static shared memory from ptxas) or with NVRTC using the very
options RawModule would use; a compile error raises CompileError with the compiler's message.

CuPy is imported lazily (first compile or launch); plugin.py imports neither CuPy nor this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _source
from ._source import C_ELEMENTS, C_SCALARS, ByValue, CompileError, Param, signature, source  # noqa: F401

__all__ = ["OPTIONS", "source", "module", "function", "launch", "compile_check",
           "recording", "Recording", "emulation", "CompileError", "Kernel", "signature", "MAX_SHARED_PER_BLOCK", "is_array",
           "cdiv"]

#: NVRTC options every module is compiled with (CuPy's RawModule adds its include paths, -ftz=true
#: and -arch=sm_<the current GPU's> itself; -arch=sm_90 here pins Hopper, the card this is tuned for)
OPTIONS = ("--std=c++17", "-arch=sm_90", "-lineinfo")

#: the most shared memory one block may have on sm_90 (227 KB; above 48 KB it must be opted into)
MAX_SHARED_PER_BLOCK = 227 * 1024
DEFAULT_SHARED_LIMIT = 48 * 1024
#: shared memory of one sm_90 SM, and what the hardware keeps of it for each resident block
SM_SHARED, BLOCK_RESERVED_SHARED = 228 * 1024, 1024


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _key(name: str, defines: dict | None) -> tuple:
    return (name, tuple(sorted((k, str(v)) for k, v in (defines or {}).items())))


def _check_args(kernel: str, params: list[Param], args) -> None:
    if len(params) != len(args):
        raise TypeError(f"cupy_raw: kernel {kernel} takes {len(params)} arguments "
                        f"({', '.join(p.describe() for p in params)}), got {len(args)}")
    for p, a in zip(params, args):
        if p.pointer:
            if not is_array(a):
                raise TypeError(f"cupy_raw: kernel {kernel}: parameter '{p.describe()}' needs an array, "
                                f"got {type(a).__name__}")
            allowed = C_ELEMENTS.get(p.ctype, ())
            if allowed is None:  # void *: any array
                continue
            if str(a.dtype) not in allowed:
                raise TypeError(f"cupy_raw: kernel {kernel}: parameter '{p.describe()}' needs an array of "
                                f"{' or '.join(allowed) or p.ctype}, got {a.dtype}")
        elif isinstance(a, ByValue) or p.ctype not in C_SCALARS:
            if not isinstance(a, ByValue) or a.ctype != p.ctype:
                raise TypeError(f"cupy_raw: kernel {kernel}: parameter '{p.describe()}' needs a ByValue of "
                                f"C type {p.ctype}, got {type(a).__name__} {getattr(a, 'ctype', '')}")
        else:
            want = C_SCALARS.get(p.ctype)
            if want is None:
                raise TypeError(f"cupy_raw: kernel {kernel}: parameter '{p.describe()}' has a C type this "
                                "runtime does not know how to pass")
            if type(a) is not want:
                raise TypeError(f"cupy_raw: kernel {kernel}: parameter '{p.describe()}' needs "
                                f"np.{want.__name__}, got {type(a).__name__} {a!r}")


# ---- recording --------------------------------------------------------------------------------
_LOCAL = threading.local()


@dataclass
class Launch:
    """One launch noted in recording mode."""

    module: str
    defines: dict
    kernel: str
    arch: str
    grid: tuple
    block: tuple
    shared_mem: int
    arg_types: tuple    # 'ptr:bfloat16', 'int32', ...


class Recording(list):
    """The launches seen inside `recording()` (Launch records)."""

    def modules(self) -> list[tuple[str, dict, str]]:
        """Each distinct (source name, defines, arch) the launches used, in first-use order: the
        arguments of compile_check."""
        seen = {}
        for e in self:
            seen.setdefault(_key(e.module, e.defines) + (e.arch,), (e.module, e.defines, e.arch))
        return list(seen.values())


@contextlib.contextmanager
def recording():
    """Note every launch instead of compiling and running it (NumPy arrays stand in for device ones)."""
    old = getattr(_LOCAL, "record", None)
    rec = Recording()
    _LOCAL.record = rec
    try:
        yield rec
    finally:
        _LOCAL.record = old


def is_recording() -> bool:
    return getattr(_LOCAL, "record", None) is not None


@contextlib.contextmanager
def emulation():
    """Compile kernels for the CPU emulator and run them on NumPy arrays (tests; see _emulator.py)."""
    old = getattr(_LOCAL, "emulate", False)
    _LOCAL.emulate = True
    try:
        yield
    finally:
        _LOCAL.emulate = old


def is_emulating() -> bool:
    return getattr(_LOCAL, "emulate", False)


# ---- modules and kernels ----------------------------------------------------------------------
_MODULES: dict = {}
_FUNCTIONS: dict = {}
_SIGNATURES: dict = {}


def options(arch: str = "sm_90") -> tuple:
    """OPTIONS for `arch` ("sm_90a": Hopper's wgmma / setmaxnreg, which plain sm_90 refuses)."""
    return tuple(f"-arch={arch}" if o.startswith("-arch=") else o for o in OPTIONS)


def module(name: str, defines: dict | None = None, arch: str = "sm_90"):
    """cupy.RawModule of <name>.cu with `defines`, compiled with options(arch), cached per (name,
    defines, arch, device)."""
    import cupy
    key = _key(name, defines) + (arch, cupy.cuda.Device().id)
    mod = _MODULES.get(key)
    if mod is None:
        mod = cupy.RawModule(code=source(name, defines), options=options(arch))
        _MODULES[key] = mod
    return mod


@dataclass(frozen=True)
class Kernel:
    """A kernel of a module: what `function` returns and `launch` takes. `fn` is the CuPy function
    (None in recording mode, where nothing is compiled)."""

    module: str
    name: str
    defines: dict = field(default_factory=dict, hash=False, compare=False)
    fn: object = field(default=None, hash=False, compare=False, repr=False)
    arch: str = "sm_90"


def function(name: str, kernel: str, defines: dict | None = None, arch: str = "sm_90") -> Kernel:
    """The kernel `kernel` of <name>.cu compiled with `defines` for `arch` (on first use, cached)."""
    defines = dict(defines or {})
    if is_recording():
        return Kernel(name, kernel, defines, arch=arch)
    if is_emulating():  # cached by _emulator, per source text
        from . import _emulator
        return Kernel(name, kernel, defines, _emulator.function(name, kernel, defines))
    import cupy
    key = _key(name, defines) + (kernel, arch, cupy.cuda.Device().id)
    k = _FUNCTIONS.get(key)
    if k is None:
        try:
            fn = module(name, defines, arch).get_function(kernel)
        except cupy.cuda.compiler.CompileException as e:
            raise CompileError(f"cupy_raw: {name}.cu with {defines} does not compile:\n{e}") from e
        k = Kernel(name, kernel, defines, fn, arch)
        _FUNCTIONS[key] = k
    return k


def kernel_signature(k: Kernel) -> list[Param]:
    key = (str(_source.SOURCE_DIR),) + _key(k.module, k.defines) + (k.name,)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = signature(source(k.module, k.defines), k.name, k.defines)
    return _SIGNATURES[key]


_SCALAR_TYPES = (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64)
_DEVICE_TYPE: list = []


def _device_array_type():
    if not _DEVICE_TYPE:
        try:
            import cupy
            _DEVICE_TYPE.append(cupy.ndarray)
        except ImportError:
            _DEVICE_TYPE.append(())
    return _DEVICE_TYPE[0]


def is_array(a) -> bool:
    """A NumPy or CuPy array (not a scalar)."""
    return isinstance(a, np.ndarray) or isinstance(a, _device_array_type())




def _dims(what: str, k: Kernel, dims) -> tuple:
    dims = tuple(int(d) for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"cupy_raw: kernel {k.name}: {what} must have 1 to 3 dimensions, got {dims}")
    return dims + (1,) * (3 - len(dims))


def _check_launch(k: Kernel, grid: tuple, block: tuple, shared_mem: int) -> None:
    threads = block[0] * block[1] * block[2]
    if threads > 1024 or block[2] > 64:
        raise ValueError(f"cupy_raw: kernel {k.name}: block {block} exceeds 1024 threads (or 64 in z)")
    if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"cupy_raw: kernel {k.name}: grid {grid} exceeds (2^31-1, 65535, 65535)")
    if shared_mem > MAX_SHARED_PER_BLOCK:
        raise ValueError(f"cupy_raw: kernel {k.name}: {shared_mem} bytes of dynamic shared memory, more than "
                         f"the {MAX_SHARED_PER_BLOCK} one block may have on sm_90")


def _arg_type(a) -> str:
    if isinstance(a, ByValue):
        return f"value:{a.ctype}"
    return f"ptr:{a.dtype}" if is_array(a) else type(a).__name__


def launch(k: Kernel, grid, block, args, shared_mem: int = 0) -> None:
    """Launch `k` on `grid` x `block` (ints or tuples of up to 3) with `args`: device arrays (passed
    as pointers) and NumPy scalars of the kernel's exact C types. An empty grid launches nothing.
    Launches on CuPy's current stream; never synchronises."""
    grid, block = _dims("grid", k, grid), _dims("block", k, block)
    shared_mem = int(shared_mem)
    for i, a in enumerate(args):
        if not (isinstance(a, (_SCALAR_TYPES, ByValue)) or is_array(a)):
            raise TypeError(f"cupy_raw: kernel {k.name}: argument {i} is a {type(a).__name__} ({a!r}); pass "
                            "device arrays and NumPy scalars of the exact C type (np.int32, np.float32, ...)")
    _check_launch(k, grid, block, shared_mem)
    if min(grid) < 1:
        return
    rec = getattr(_LOCAL, "record", None)
    if rec is not None:
        if any(isinstance(a, _device_array_type()) for a in args):
            raise TypeError(f"cupy_raw: kernel {k.name}: device arrays passed while recording (use NumPy arrays)")
        _check_args(k.name, kernel_signature(k), args)
        rec.append(Launch(k.module, dict(k.defines), k.name, k.arch, grid, block, shared_mem,
                          tuple(_arg_type(a) for a in args)))
        return
    if is_emulating():
        from . import _emulator
        _emulator.check_host_arrays(k.name, args)
        _check_args(k.name, kernel_signature(k), args)
        k.fn(grid, block, tuple(args), shared_mem=shared_mem)
        return
    if any(isinstance(a, np.ndarray) for a in args):
        raise TypeError(f"cupy_raw: kernel {k.name}: a NumPy array passed to a GPU kernel "
                        "(the cupy_raw backend runs on CuPy arrays)")
    fn = k.fn
    _allow_shared(fn, shared_mem)
    args = tuple(np.frombuffer(a.data, dtype=f"V{len(a.data)}") if isinstance(a, ByValue) else a for a in args)
    fn(grid, block, args, shared_mem=shared_mem)


def _allow_shared(fn, shared_mem: int) -> None:
    """Opt the CuPy function into `shared_mem` bytes of dynamic shared memory where that is above 48 KB."""
    if shared_mem > DEFAULT_SHARED_LIMIT and fn.max_dynamic_shared_size_bytes < shared_mem:
        fn.max_dynamic_shared_size_bytes = shared_mem


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig (cuda.h), without launch attributes
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


_CLUSTERS: dict = {}


def max_active_clusters(k: Kernel, block: int, shared_mem: int, cluster: int, off_gpu: int) -> int:
    """How many clusters of `cluster` blocks of `k` (a kernel with __cluster_dims__(cluster, 1, 1)) the
    current GPU holds at once with `block` threads and `shared_mem` bytes a block: the driver's
    cuOccupancyMaxActiveClusters, through ctypes (CuPy wraps no cluster occupancy query). A
    persistent grid of clusters is no larger than this, since the clusters past it would start only
    as the first ones finish all their work. Clusters are placed within one GPC, so where a GPC has
    an odd number of free SMs this is less than SMs / cluster. `off_gpu` is the answer when
    recording or emulating (nothing to ask)."""
    if k.fn is None or is_emulating():
        return off_gpu
    import cupy
    key = _key(k.module, k.defines) + (k.name, k.arch, cupy.cuda.Device().id, block, shared_mem, cluster)
    if key not in _CLUSTERS:
        _allow_shared(k.fn, shared_mem)
        config = _LaunchConfig((cluster, 1, 1), (block, 1, 1), shared_mem, None, None, 0)
        count = ctypes.c_int(0)
        status = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(
            ctypes.byref(count), ctypes.c_void_p(k.fn.kernel.ptr), ctypes.byref(config))
        if status != 0 or count.value < 1:
            raise RuntimeError(f"cupy_raw: kernel {k.name}: cuOccupancyMaxActiveClusters gave CUresult {status} "
                               f"and {count.value} clusters of {cluster} x {block} threads with {shared_mem} bytes "
                               "of shared memory (none fits: the launch would fail)")
        _CLUSTERS[key] = count.value
    return _CLUSTERS[key]


# ---- compiling without a GPU ------------------------------------------------------------------
@dataclass
class KernelResources:
    """What ptxas reports for one kernel (nvcc compiles only)."""

    registers: int
    shared_bytes: int       # static shared memory
    stack_bytes: int
    spill_bytes: int
    wgmma_serialized: bool = False  # ptxas C7520: its wgmma instructions made to wait for one another


def nvcc_path() -> str | None:
    """nvcc on PATH, else CUDA's default location, else None."""
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in (os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        path = Path(candidate) / "bin" / "nvcc"
        if candidate and path.is_file():
            return str(path)
    return None


def nvrtc_options(arch: str = "sm_90", device_arch: str = "sm_90") -> tuple:
    """The options RawModule hands NVRTC for options(arch) on a GPU of `device_arch` (an H200's
    sm_90): CuPy's include paths, ours, then what CuPy's compiler adds (-ftz=true, the device's own
    -arch, the default execution space, a precompiled header)."""
    import cupy._core.core as cupy_core
    return cupy_core.assemble_cupy_compiler_options(options(arch)) + (
        "-ftz=true", f"-arch={device_arch}", "--device-as-default-execution-space", "--pch")


def _parse_ptxas(log: str) -> dict[str, KernelResources]:
    out, current = {}, None
    for line in log.splitlines():
        m = re.search(r"wgmma\.mma_async instructions are serialized.* function '([^']+)'", line)
        if m:  # a performance warning naming its kernel (e.g. a wgmma under a run-time branch)
            out.setdefault(m.group(1), KernelResources(0, 0, 0, 0)).wgmma_serialized = True
            continue
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
        if m:
            out.setdefault(current, KernelResources(0, 0, 0, 0))
            out[current].stack_bytes, out[current].spill_bytes = int(m.group(1)), int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            res = out.setdefault(current, KernelResources(0, 0, 0, 0))
            res.registers = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            res.shared_bytes = int(s.group(1)) if s else 0
    return out


def compile_check(name: str, defines: dict | None = None, arch: str = "sm_90",
                  compiler: str = "nvcc") -> dict[str, KernelResources]:
    """Compile <name>.cu with `defines` for `arch` with no GPU; raise CompileError with the compiler's
    message on failure. compiler="nvcc": `nvcc -cubin` (the options OPTIONS maps to, plus
    -ftz=true as CuPy adds), returning ptxas's registers and shared memory per kernel;
    compiler="nvrtc": NVRTC with exactly the options RawModule uses (nvrtc_options), returning {}."""
    src = source(name, defines)
    label = f"{name}.cu with {defines or {}}"
    if compiler == "nvrtc":
        from cupy.cuda import compiler as cupy_compiler
        prog = cupy_compiler._NVRTCProgram(src, f"{name}.cu", (), (), name_expressions=None, method="cubin")
        try:
            prog.compile(nvrtc_options(arch))
        except cupy_compiler.CompileException as e:
            raise CompileError(f"cupy_raw: {label} does not compile with NVRTC for {arch}:\n{e}") from e
        return {}
    if compiler != "nvcc":
        raise ValueError(f"compile_check: compiler must be 'nvcc' or 'nvrtc', got {compiler!r}")
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("compile_check: nvcc not found (on PATH or in /usr/local/cuda/bin)")
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / f"{name}.cu"
        cu.write_text(src)
        cmd = [nvcc, f"-arch={arch}", "-cubin", "-std=c++17", "-lineinfo", "-ftz=true", "-Xptxas", "-v",
               "-o", str(Path(tmp) / f"{name}.cubin"), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompileError(f"cupy_raw: {label} does not compile with nvcc for {arch}:\n{proc.stderr}{proc.stdout}")
    return _parse_ptxas(proc.stderr + proc.stdout)
