"""The cupy_raw backend's CUDA C sources as text: `source(name, defines)` (a `.cu` file with its local
headers inlined and the defines first) and `signature(src, kernel)` (a kernel's parameters, parsed
from its C declaration). No GPU and no compiler here: _runtime.py compiles, launches and records,
_emulator.py runs the sources on the CPU; both read them through this module.

Each op's kernels live in `backends/cupy_raw/<name>.cu`, beside its Python launcher. A local
`#include "x.cuh"` is replaced by the header's own text (once each), so the text handed to a
compiler is complete: CuPy's kernel cache keys on the source text and options, and a header edited
on disk must change the key. `defines` (a dict, e.g. {"floatX": "__nv_bfloat16"}) become `#define`
lines at the top; they choose types and tile sizes at compile time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: where the .cu sources and .cuh headers live
SOURCE_DIR = Path(__file__).resolve().parent

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)


class CompileError(RuntimeError):
    """A .cu source that does not compile; the message holds the compiler's own output."""


# ---- sources ----------------------------------------------------------------------------------
def _read(path: Path, seen: set) -> str:
    text = path.read_text()

    def expand(match):
        header = (path.parent / match.group(1)).resolve()
        if not header.is_file():
            raise FileNotFoundError(f"{path.name}: #include \"{match.group(1)}\" not found beside it")
        if header in seen:
            return f"// {match.group(1)}: already included above"
        seen.add(header)
        return f"// ---- {match.group(1)} ----\n{_read(header, seen)}\n// ---- end of {match.group(1)} ----"

    return _INCLUDE.sub(expand, text)


def _define_lines(defines: dict | None) -> str:
    if not defines:
        return ""
    lines = []
    for key in sorted(defines):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            raise ValueError(f"cupy_raw: define name {key!r} is not a C identifier")
        value = defines[key]
        if isinstance(value, bool):
            value = int(value)
        lines.append(f"#define {key} {value}")
    return "\n".join(lines) + "\n"


def source(name: str, defines: dict | None = None) -> str:
    """The complete text of backends/cupy_raw/<name>.cu (local headers inlined), `defines` first."""
    path = SOURCE_DIR / f"{name}.cu"
    if not path.is_file():
        known = sorted(p.stem for p in SOURCE_DIR.glob("*.cu"))
        raise FileNotFoundError(f"cupy_raw: no source {name}.cu; sources: {', '.join(known)}")
    return _define_lines(defines) + _read(path, {path})


# ---- kernel signatures -----------------------------------------------------------------------
#: C scalar types and the NumPy scalar a launch must pass for them
C_SCALARS = {"int": np.int32, "int32_t": np.int32, "unsigned": np.uint32, "unsigned int": np.uint32,
             "uint32_t": np.uint32, "long long": np.int64, "long long int": np.int64, "int64_t": np.int64,
             "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
             "float": np.float32, "double": np.float64}

#: C element types of pointers and the array dtypes that may be passed for them
C_ELEMENTS = {"float": ("float32",), "double": ("float64",), "__half": ("float16",), "half": ("float16",),
              "__nv_bfloat16": ("bfloat16",), "nv_bfloat16": ("bfloat16",), "int": ("int32",),
              "int32_t": ("int32",), "unsigned": ("uint32",), "unsigned int": ("uint32",),
              "uint32_t": ("uint32",), "long long": ("int64",), "int64_t": ("int64",),
              "unsigned short": ("uint16", "bfloat16", "float16"), "uint16_t": ("uint16", "bfloat16", "float16"),
              "unsigned long long": ("uint64",), "uint64_t": ("uint64",), "void": None}

_QUALIFIERS = {"const", "__restrict__", "__restrict", "restrict", "volatile", "__grid_constant__"}


@dataclass(frozen=True)
class ByValue:
    """A C struct passed by value (e.g. a TMA tensor map, `const __grid_constant__ TmaDescriptor m`):
    its bytes and the C type the kernel's parameter names. CuPy passes it as a size-1 NumPy array of
    that many bytes, which it hands the driver by value."""

    ctype: str
    data: bytes


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str          # the element type for pointers, else the scalar type (defines substituted)
    pointer: bool

    def describe(self) -> str:
        return f"{self.ctype}{' *' if self.pointer else ''} {self.name}"


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


#: what may stand before a kernel's `void` (a __launch_bounds__(...) or __maxnreg__(...)) and after it
#: (that, then one attribute macro in capitals: matmul.cu's WG_CLUSTER_DIMS, a __cluster_dims__(...) or nothing)
BOUNDS = r"(?:(?:__launch_bounds__|__maxnreg__)\s*\([^)]*\)\s+)?"
ATTRIBUTES = BOUNDS + r"(?:[A-Z][A-Z0-9_]*\s+)?"


def signature(src: str, kernel: str, defines: dict | None = None) -> list[Param]:
    """The parameters of `extern "C" __global__ void <kernel>(...)` in `src` (BOUNDS before `void`,
    ATTRIBUTES after it allowed), with the defines' values substituted for names used as types
    (floatX -> __nv_bfloat16)."""
    text = _strip_comments(src)
    m = re.search(r'extern\s+"C"\s+__global__\s+' + BOUNDS + r"void\s+" + ATTRIBUTES + re.escape(kernel)
                  + r"\s*\(([^)]*)\)", text)
    if m is None:
        raise CompileError(f"cupy_raw: no kernel `extern \"C\" __global__ void {kernel}(...)` in the source")
    subst = {str(k): str(v) for k, v in (defines or {}).items()}
    params = []
    for raw in filter(None, (p.strip() for p in m.group(1).split(","))):
        pointer = "*" in raw
        tokens = [t for t in re.split(r"[\s*&]+", raw) if t and t not in _QUALIFIERS]
        if len(tokens) < 2:
            raise CompileError(f"cupy_raw: kernel {kernel}: cannot read parameter {raw!r}")
        name = tokens[-1]
        ctype = " ".join(subst.get(t, t) for t in tokens[:-1])
        params.append(Param(name, ctype, pointer))
    return params
