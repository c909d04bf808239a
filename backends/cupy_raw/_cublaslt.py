"""cuBLASLt through ctypes: the GEMM of the cupy_raw:cublaslt matmul, capturable in a CUDA graph.

CuPy has no cuBLASLt binding, and its cuBLAS wrappers raise while a stream is capturing. cuBLASLt
itself supports stream capture when it is given its workspace explicitly, so this module calls the
library directly: one handle and one preallocated 32 MiB workspace per device, and per problem a
plan (operation descriptor, the four matrix layouts, the algorithm cuBLASLt's heuristic picks for
these shapes and pointer alignments) made once and cached. Every call is then one
`cublasLtMatmul` on CuPy's current stream: no allocation, no synchronisation.

The operation, in cuBLAS's column-major terms (matmul.py maps its row-major products onto it):

    D (m x n) = op(A) op(B) + beta C (+ bias[i] on row i of D)      compute and scale in float32

and its GELU epilogues (the references for the fused GELU products, what llm.c calls): with gelu,
D = gelu(op(A) op(B) + bias), the GELU's input also written to `aux` (C's layout) when given; with
dgelu, D = gelu'(aux) * op(A) op(B). cuBLASLt's GELU is the tanh form GPT-2 uses. DGELU gave a wrong
D on an H100 for bf16 at depth 50304 (the heuristic's algorithm there; float16, float32 and every
smaller depth right), so matmul.py's cublaslt engine does not offer it: only bench/tune's probe calls
it, at depth 768, and checks the result before timing it.

A and B in float16, bfloat16 or float32 (CUBLAS_COMPUTE_32F: float32 inputs are multiplied in
IEEE float32, no TF32), C = D in the inputs' dtype or float32. alpha and beta are host floats, read
when the call is made (a graph replays the values it was captured with: always 1 and 0 or 1 here).

In recording mode (NumPy arrays, no GPU: _runtime.recording) `matmul` checks its arguments and
returns without calling anything. Importing this module loads nothing; the library is opened on
first use, found the way CuPy finds the CUDA libraries (cuda.pathfinder), else by its soname.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

# cudaDataType_t
_CUDA_TYPES = {"float32": 0, "float16": 2, "bfloat16": 14}
CUBLAS_COMPUTE_32F = 68
OP_N, OP_T = 0, 1
# cublasLtMatmulDescAttributes_t
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_EPILOGUE_AUX_POINTER, DESC_EPILOGUE_AUX_LD = 11, 12
# cublasLtEpilogue_t: DEFAULT, BIAS (+ bias), GELU (D = gelu(...)); GELU | AUX also writes the GELU's
# input to the aux matrix; DGELU: D = gelu'(aux) * (op(A) op(B))
EPILOGUE_DEFAULT, EPILOGUE_BIAS, EPILOGUE_GELU, EPILOGUE_AUX, EPILOGUE_DGELU = 1, 4, 32, 128, 192
# cublasLtMatmulPreferenceAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = {"A": 5, "B": 6, "C": 7, "D": 8}

WORKSPACE_BYTES = 32 * 1024 * 1024
SONAMES = ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")

_STATUS = {0: "SUCCESS", 1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
           11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED"}


class CublasLtError(RuntimeError):
    """A cuBLASLt call that returned an error status."""


class _Heuristic(ctypes.Structure):  # cublasLtMatmulHeuristicResult_t
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_LIB: list = []


def library_path() -> str:
    """Where libcublasLt is (cuda.pathfinder first, as CuPy does; then the dynamic loader's search)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        return load_nvidia_dynamic_lib("cublasLt").abs_path
    except Exception as first:  # not installed, or not found by the pathfinder: ask the loader
        for name in SONAMES:
            try:
                ctypes.CDLL(name)
                return name
            except OSError:
                continue
        raise OSError(f"libcublasLt not found (cuda.pathfinder: {first}; tried {', '.join(SONAMES)})") from first


def _lib():
    if not _LIB:
        lib = ctypes.CDLL(library_path())
        p, vp, i, u64, i64, sz = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                                  ctypes.c_int64, ctypes.c_size_t)
        sigs = {
            "cublasLtCreate": [p],
            "cublasLtMatmulDescCreate": [p, i, i],
            "cublasLtMatmulDescSetAttribute": [vp, i, vp, sz],
            "cublasLtMatrixLayoutCreate": [p, i, u64, u64, i64],
            "cublasLtMatmulPreferenceCreate": [p],
            "cublasLtMatmulPreferenceSetAttribute": [vp, i, vp, sz],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i, ctypes.POINTER(_Heuristic),
                                               ctypes.POINTER(ctypes.c_int)],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
        }
        for name, args in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        lib.cublasLtGetVersion.argtypes = []
        _LIB.append(lib)
    return _LIB[0]


def version() -> int:
    """cuBLASLt's version number (e.g. 130100 for 13.1.0)."""
    return int(_lib().cublasLtGetVersion())


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasLtError(f"cuBLASLt: {what} failed: CUBLAS_STATUS_{_STATUS.get(status, status)}")


def _set(fn, obj, attr: int, value) -> None:
    _check(fn(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), f"setting attribute {attr}")


@dataclass
class _Device:
    handle: ctypes.c_void_p
    workspace: object  # cupy array of WORKSPACE_BYTES bytes


_DEVICES: dict = {}
_PLANS: dict = {}


def _device(cupy) -> _Device:
    dev = cupy.cuda.Device().id
    if dev not in _DEVICES:
        handle = ctypes.c_void_p()
        _check(_lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        _DEVICES[dev] = _Device(handle, cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8))
    return _DEVICES[dev]


def _alignment(ptr: int) -> int:
    """The largest power of two up to 256 that divides ptr (what cuBLASLt may assume of it)."""
    align = 256
    while ptr % align:
        align //= 2
    return align


@dataclass
class _Plan:
    desc: ctypes.c_void_p
    layouts: tuple          # A, B, C (= D)
    algo: _Heuristic


def _epilogue(bias: bool, gelu: bool, aux: bool, dgelu: bool) -> int:
    if dgelu:
        return EPILOGUE_DGELU
    if gelu:
        return EPILOGUE_GELU | (EPILOGUE_AUX if aux else 0) | (EPILOGUE_BIAS if bias else 0)
    return EPILOGUE_BIAS if bias else EPILOGUE_DEFAULT


def _plan(dev: _Device, key: tuple, aux_pointer: int) -> _Plan:
    """The plan of `key`; an aux matrix's pointer is set before the heuristic is asked (its alignment,
    in the key, matters to the choice) and again at every call."""
    (a_type, c_type, transa, transb, m, n, k, lda, ldb, ldc, epilogue, aligns) = key
    lib = _lib()
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, _CUDA_TYPES["float32"]),
           "cublasLtMatmulDescCreate")
    _set(lib.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSA, ctypes.c_int32(transa))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, DESC_TRANSB, ctypes.c_int32(transb))
    _set(lib.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE, ctypes.c_uint32(epilogue))
    if epilogue & EPILOGUE_AUX:
        _set(lib.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE_AUX_POINTER, ctypes.c_void_p(aux_pointer))
        _set(lib.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE_AUX_LD, ctypes.c_int64(ldc))
    layouts = []
    for dtype, rows, cols, ld in ((a_type, k if transa == OP_T else m, m if transa == OP_T else k, lda),
                                  (a_type, n if transb == OP_T else k, k if transb == OP_T else n, ldb),
                                  (c_type, m, n, ldc)):
        layout = ctypes.c_void_p()
        _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), _CUDA_TYPES[dtype], rows, cols, ld),
               "cublasLtMatrixLayoutCreate")
        layouts.append(layout)
    pref = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(WORKSPACE_BYTES))
    for name, align in zip("ABCD", aligns):
        _set(lib.cublasLtMatmulPreferenceSetAttribute, pref, PREF_MIN_ALIGNMENT[name], ctypes.c_uint32(align))
    result, found = _Heuristic(), ctypes.c_int(0)
    _check(lib.cublasLtMatmulAlgoGetHeuristic(dev.handle, desc, layouts[0], layouts[1], layouts[2], layouts[2],
                                              pref, 1, ctypes.byref(result), ctypes.byref(found)),
           f"cublasLtMatmulAlgoGetHeuristic for {key}")
    if found.value < 1 or result.state != 0:
        raise CublasLtError(f"cuBLASLt: no algorithm for {key} (state {result.state})")
    return _Plan(desc, tuple(layouts), result)


def _pointer(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def matmul(c, a, transa: int, b, transb: int, m: int, n: int, k: int, lda: int, ldb: int, ldc: int,
           bias=None, beta: float = 0.0, gelu: bool = False, dgelu: bool = False, aux=None) -> None:
    """c (m x n, column-major, leading dimension ldc) = op(a) op(b) + beta c (+ bias[i] on row i),
    op = transpose for OP_T; a and b in one float dtype, c in theirs or float32, bias in c's. With
    gelu, c = gelu(op(a) op(b) + bias) and the GELU's input goes to `aux` if given; with dgelu,
    c = gelu'(aux) * op(a) op(b). aux: c's dtype and layout (ldc a multiple of 8), beta 0."""
    a_type, c_type = str(a.dtype), str(c.dtype)
    if a_type not in _CUDA_TYPES or str(b.dtype) != a_type:
        raise TypeError(f"cuBLASLt matmul: A and B must share one of {', '.join(_CUDA_TYPES)}, "
                        f"got {a.dtype} and {b.dtype}")
    if c_type not in (a_type, "float32"):
        raise TypeError(f"cuBLASLt matmul: C must be {a_type} or float32, got {c_type}")
    if bias is not None and str(bias.dtype) != c_type:
        raise TypeError(f"cuBLASLt matmul: the bias must have C's dtype {c_type}, got {bias.dtype}")
    if min(m, n, k) < 1:
        raise ValueError(f"cuBLASLt matmul: m, n, k must be positive, got {m}, {n}, {k}")
    if gelu or dgelu:
        if (gelu and dgelu) or (dgelu and (aux is None or bias is not None)) or beta:
            raise ValueError("cuBLASLt matmul: one GELU epilogue at a time, gelu (bias and aux optional) or dgelu "
                             "(aux, no bias), with beta 0")
        if aux is not None and (str(aux.dtype) != c_type or ldc % 8 or aux.size < c.size):
            raise ValueError(f"cuBLASLt matmul: aux must be {c_type} like C, ldc {ldc} a multiple of 8, got "
                             f"{aux.dtype} of {aux.size} elements")
    elif aux is not None:
        raise ValueError("cuBLASLt matmul: aux is the GELU epilogues' (gelu or dgelu)")
    if isinstance(c, np.ndarray):  # recording mode: nothing runs
        return
    import cupy
    dev = _device(cupy)
    aux_pointer = _pointer(aux) if aux is not None else 0
    aligns = tuple(_alignment(_pointer(x)) for x in (a, b, c, c)) + ((_alignment(aux_pointer),) if aux is not None else ())
    key = (a_type, c_type, transa, transb, m, n, k, lda, ldb, ldc,
           _epilogue(bias is not None, gelu, aux is not None, dgelu), aligns)
    plan = _PLANS.get((cupy.cuda.Device().id,) + key)
    if plan is None:
        plan = _plan(dev, key, aux_pointer)
        _PLANS[(cupy.cuda.Device().id,) + key] = plan
    lib = _lib()
    if bias is not None:
        _set(lib.cublasLtMatmulDescSetAttribute, plan.desc, DESC_BIAS_POINTER, ctypes.c_void_p(_pointer(bias)))
    if aux is not None:
        _set(lib.cublasLtMatmulDescSetAttribute, plan.desc, DESC_EPILOGUE_AUX_POINTER, ctypes.c_void_p(aux_pointer))
    alpha, beta_ = ctypes.c_float(1.0), ctypes.c_float(beta)
    A, B, C = plan.layouts
    _check(lib.cublasLtMatmul(dev.handle, plan.desc, ctypes.byref(alpha), ctypes.c_void_p(_pointer(a)), A,
                              ctypes.c_void_p(_pointer(b)), B, ctypes.byref(beta_), ctypes.c_void_p(_pointer(c)), C,
                              ctypes.c_void_p(_pointer(c)), C, ctypes.byref(plan.algo.algo),
                              ctypes.c_void_p(dev.workspace.data.ptr), WORKSPACE_BYTES,
                              ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)),
           "cublasLtMatmul")
