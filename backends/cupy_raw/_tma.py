"""TMA tensor maps for the cupy_raw kernels: `cuTensorMapEncodeTiled` through ctypes into libcuda.

A tensor map tells Hopper's tensor memory accelerator how a 2-D array lies in global memory (its
base, extents and row stride) and which box one `cp.async.bulk.tensor` copies into shared memory,
and how (here always the 128-byte swizzle of matmul_layout.cuh, out-of-bounds elements read as
zero). It is a 128-byte opaque struct that a kernel takes by value as a `__grid_constant__`
parameter (`TmaDescriptor` in matmul.cu), so a captured CUDA graph keeps its own copy.

`tiled_2d` checks what the driver requires (dtype, 16-byte-aligned base and row stride, box sizes)
and raises ValueError naming what is wrong before calling it; maps are cached by everything they
encode. In recording mode (NumPy arrays, no GPU: _runtime.recording) the checks run and the map is
128 zero bytes, which nothing reads; in the CPU emulator (_runtime.emulation) it is this module's own
description of the array (EMULATOR_LAYOUT), which matmul.cu's emulated TMA copy reads. Nothing here
imports CuPy.
"""

from __future__ import annotations

import ctypes
import struct
from collections import OrderedDict

import numpy as np

from . import _runtime as rt

#: CUtensorMapDataType for the dtypes the kernels take
DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
SWIZZLE_128B = 3            # CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunks XOR (row % 8) within 128 bytes
L2_PROMOTION_256B = 3       # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
INTERLEAVE_NONE = 0
OOB_FILL_ZERO = 0           # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements are zeros
MAP_BYTES = 128
#: the C type kernels name for a tensor map parameter
CTYPE = "TmaDescriptor"

#: the emulator's tensor map (matmul.cu's EmuTensorMap): base address, row stride in bytes, element
#: bytes, rows, columns, box columns, box rows
EMULATOR_LAYOUT = struct.Struct("<QQIIIII")

_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 1024
_ENCODE: list = []


def _encode_fn():
    if not _ENCODE:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"cupy_raw: TMA needs the CUDA driver (libcuda.so.1): {e}") from e
        fn = lib.cuTensorMapEncodeTiled
        u32, u64p, u32p = ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
        _ENCODE.append(fn)
    return _ENCODE[0]


def _pointer(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def tiled_2d(a, rows: int, cols: int, row_stride: int, box_cols: int, box_rows: int):
    """The tensor map of `a` seen as `rows` x `cols` elements, element (r, c) at r * row_stride + c
    (c contiguous), copied in boxes of box_rows x box_cols with the 128-byte swizzle. Returns an
    rt.ByValue for a `TmaDescriptor` kernel parameter."""
    dt = str(a.dtype)
    if dt not in DATA_TYPES:
        raise ValueError(f"cupy_raw TMA: no tensor map for dtype {dt}; takes {', '.join(DATA_TYPES)}")
    size = a.dtype.itemsize
    ptr = _pointer(a)
    if ptr % 16:
        raise ValueError(f"cupy_raw TMA: the array must start on a 16-byte boundary (it starts at {ptr:#x})")
    if (row_stride * size) % 16:
        raise ValueError(f"cupy_raw TMA: the row stride must be a multiple of 16 bytes, got {row_stride} "
                         f"elements of {size} bytes")
    if not (1 <= rows < 2**32 and 1 <= cols < 2**32) or row_stride < cols:
        raise ValueError(f"cupy_raw TMA: extents {rows} x {cols} with row stride {row_stride} do not describe "
                         "a 2-D array (need 1 <= extents < 2^32 and row stride >= columns)")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256) or box_cols * size > 128:
        raise ValueError(f"cupy_raw TMA: box {box_rows} x {box_cols} of {size}-byte elements: each side at most "
                         "256 and a row of the box at most 128 bytes (the swizzle span)")
    if (rows - 1) * row_stride + cols > a.size:
        raise ValueError(f"cupy_raw TMA: {rows} rows of {cols} at stride {row_stride} exceed the array's {a.size} "
                         "elements")
    key = (ptr, dt, rows, cols, row_stride, box_cols, box_rows)
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    if isinstance(a, np.ndarray):  # recording (checked, not encoded) or the emulator (its own layout)
        if not rt.is_emulating():
            return rt.ByValue(CTYPE, bytes(MAP_BYTES))
        packed = EMULATOR_LAYOUT.pack(ptr, row_stride * size, size, rows, cols, box_cols, box_rows)
        return rt.ByValue(CTYPE, packed + bytes(MAP_BYTES - len(packed)))
    raw = ctypes.create_string_buffer(MAP_BYTES + 64)        # the driver wants it 64-byte aligned
    at = (ctypes.addressof(raw) + 63) // 64 * 64
    dims = (ctypes.c_uint64 * 2)(cols, rows)                  # innermost first
    strides = (ctypes.c_uint64 * 1)(row_stride * size)        # bytes, for every dimension but the first
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    steps = (ctypes.c_uint32 * 2)(1, 1)
    status = _encode_fn()(ctypes.c_void_p(at), DATA_TYPES[dt], 2, ctypes.c_void_p(ptr), dims, strides, box, steps,
                          INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_ZERO)
    if status != 0:
        raise RuntimeError(f"cupy_raw TMA: cuTensorMapEncodeTiled failed (CUresult {status}) for {dt} "
                           f"{rows} x {cols}, row stride {row_stride}, box {box_rows} x {box_cols}")
    value = rt.ByValue(CTYPE, ctypes.string_at(at, MAP_BYTES))
    _CACHE[key] = value
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value
