"""The cupy_raw kernels on the CPU: each .cu source compiled by g++ against emulator/emulator.hpp
(just enough CUDA: threads, barriers, shuffles, atomics, 16-bit floats, mma.sync) into a shared
library, and launched through ctypes on NumPy arrays. For tests on machines with no GPU.

    with _runtime.emulation():
        y, saved = backends.cupy_raw.layernorm.forward(inputs_as_numpy, attrs)

runs the very kernels the GPU would, with the same launch configuration, so the conformance suite's
case checks (poisoned outputs, accumulation, repeatability, inputs unchanged) apply to them in CI.
It is slow (a fiber per CUDA thread, blocks one after another, on one core): use small shapes. Kernels that use
what the emulator lacks (cp.async, ldmatrix, wgmma, TMA) do not compile here; the compile tests
cover them. The source is changed in one way only: each `extern __shared__ T name[];` becomes a
pointer to the launch's dynamic shared buffer (C++ has no such declaration); a launcher per kernel
is appended.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from . import _source

EMULATOR_DIR = Path(__file__).resolve().parent / "emulator"
CXX_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-U_FORTIFY_SOURCE")  # fortify's longjmp check
# would reject the emulator's jumps between fiber stacks

_CTYPES = {"int": ctypes.c_int32, "int32_t": ctypes.c_int32, "unsigned": ctypes.c_uint32,
           "unsigned int": ctypes.c_uint32, "uint32_t": ctypes.c_uint32, "long long": ctypes.c_int64,
           "long long int": ctypes.c_int64, "int64_t": ctypes.c_int64, "unsigned long long": ctypes.c_uint64,
           "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_uint64, "float": ctypes.c_float,
           "double": ctypes.c_double}

_DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s]*?)\s+"
                             r"([A-Za-z_]\w*)\s*\[\s*\]\s*;")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+' + _source.BOUNDS + r"void\s+" + _source.ATTRIBUTES
                     + r"([A-Za-z_]\w*)\s*\(([^)]*)\)")


def compiler() -> str | None:
    """g++ (or $CXX) where it exists, else None."""
    return os.environ.get("CXX") or shutil.which("g++")


def unavailable_reason() -> str | None:
    return None if compiler() else "no C++ compiler (g++) for the CPU emulator"


def _cache_dir() -> Path:
    d = Path(os.environ.get("EULER_CUPY_RAW_EMU_CACHE", Path(tempfile.gettempdir()) / "nanoeuler-cupy-raw-emu"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def emulator_source(name: str, defines: dict | None) -> str:
    """<name>.cu as the emulator compiles it, with a launcher per kernel appended."""
    src = _source.source(name, defines)
    src = _DYNAMIC_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>"
                                        "(emu::dynamic_shared());", src)
    launchers = []
    for kernel, params in _KERNEL.findall(_source._strip_comments(src)):
        names = [p.name for p in _source.signature(src, kernel, defines)]
        # weak: a kernel left out by the preprocessor (an #ifdef'd variant) leaves its launcher unused
        launchers.append(
            f'extern "C" void {kernel}({params}) __attribute__((weak));\n'
            f'extern "C" int emu_launch_{kernel}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, '
            f"unsigned bz, size_t shared_bytes{', ' if params.strip() else ''}{params}) {{\n"
            f"    return emu::launch(gx, gy, gz, bx, by, bz, shared_bytes, EMU_CLUSTER_X, [&] {{ {kernel}({', '.join(names)}); }});\n}}")
    # (a module's kernels launch in clusters of EMU_CLUSTER_X blocks where its source defines it)
    return (src + "\n// ---- launchers (emulator) ----\n#ifndef EMU_CLUSTER_X\n#define EMU_CLUSTER_X 1\n#endif\n"
            + 'extern "C" const char* emu_last_error() { return emu::last_error; }\n' + "\n".join(launchers) + "\n")


class _Struct128(ctypes.Structure):  # a 128-byte struct passed by value (_source.ByValue: a TMA descriptor)
    _fields_ = [("q", ctypes.c_uint64 * 16)]


class EmulatedFunction:
    """One kernel of an emulated module: called like a CuPy RawKernel, on NumPy arrays."""

    def __init__(self, library, name: str, params: list):
        self.name = name
        self.params = params
        self.fn = getattr(library, f"emu_launch_{name}")
        self.last_error = library.emu_last_error
        self.last_error.restype = ctypes.c_char_p
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_size_t] + [
            ctypes.c_void_p if p.pointer else _CTYPES.get(p.ctype, _Struct128) for p in params]

    def __call__(self, grid, block, args, shared_mem=0):
        values = []
        for p, a in zip(self.params, args):
            if isinstance(a, _source.ByValue):
                values.append(_Struct128.from_buffer_copy(a.data))
            else:
                values.append(a.ctypes.data if p.pointer else a.item())
        status = self.fn(*grid, *block, int(shared_mem), *values)
        if status == 2:
            raise RuntimeError(f"cupy_raw emulator: kernel {self.name}: {self.last_error().decode()}")
        if status:
            raise RuntimeError(f"cupy_raw emulator: kernel {self.name} deadlocked: a barrier (__syncthreads, a "
                               "warp shuffle, a cluster barrier) that not every thread of a block, warp or cluster "
                               "reaches (or a grid that is not whole clusters)")


_LIBRARIES: dict = {}
_FUNCTIONS: dict = {}


def function(name: str, kernel: str, defines: dict | None) -> EmulatedFunction:
    """The kernel compiled for the CPU emulator (cached on disk by the source's hash)."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError(unavailable_reason())
    src = emulator_source(name, defines)
    header = (EMULATOR_DIR / "emulator.hpp").read_text()
    digest = hashlib.sha256((src + header + " ".join(CXX_FLAGS)).encode()).hexdigest()[:24]
    if digest not in _LIBRARIES:
        lib = _cache_dir() / f"{name}-{digest}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory() as tmp:
                cpp = Path(tmp) / f"{name}.cpp"
                cpp.write_text(src)
                out = Path(tmp) / lib.name
                proc = subprocess.run([cxx, *CXX_FLAGS, "-I", str(EMULATOR_DIR), "-include",
                                       str(EMULATOR_DIR / "emulator.hpp"), str(cpp), "-o", str(out)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise _source.CompileError(f"cupy_raw emulator: {name}.cu with {defines} does not compile "
                                          f"with {cxx}:\n{proc.stderr[-4000:]}")
                os.replace(out, lib)
        _LIBRARIES[digest] = ctypes.CDLL(str(lib))
    if (digest, kernel) not in _FUNCTIONS:
        _FUNCTIONS[(digest, kernel)] = EmulatedFunction(_LIBRARIES[digest], kernel, _source.signature(src, kernel, defines))
    return _FUNCTIONS[(digest, kernel)]


def check_host_arrays(kernel: str, args) -> None:
    for a in args:
        if hasattr(a, "__cuda_array_interface__"):
            raise TypeError(f"cupy_raw emulator: kernel {kernel}: a device array passed (use NumPy arrays)")
