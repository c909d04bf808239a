"""TMA tensor maps for the cupy_raw kernels: `cuTensorMapEncodeTiled` through ctypes into libcuda.

A tensor map tells Hopper's tensor memory accelerator how a 2-D or 3-D array lies in global memory
(its base, extents and strides) and which box one `cp.async.bulk.tensor` copies into shared memory,
and how (the 128-byte swizzle of matmul_layout.cuh, or rows packed; out-of-bounds elements read
as zero). It is a 128-byte opaque struct that a kernel takes by value as a `__grid_constant__`
parameter (`TmaDescriptor`, common.cuh), so a captured CUDA graph keeps its own copy.

`tiled` (and `tiled_2d`, its 2-D swizzled case) checks what the driver requires (dtype, 16-byte
aligned base and strides, box sizes) and raises ValueError naming what is wrong before calling it; maps are cached by everything they
encode. In recording mode (NumPy arrays, no GPU: _runtime.recording) the checks run and the map is
128 zero bytes, which nothing reads; in the CPU emulator (_runtime.emulation) it is this module's own
description of the array (EMULATOR_LAYOUT), which tma.cuh's emulated TMA copy reads. Nothing here
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
SWIZZLE_NONE = 0            # CU_TENSOR_MAP_SWIZZLE_NONE: box rows packed one after another
SWIZZLE_128B = 3            # CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunks XOR (row % 8) within 128 bytes
L2_PROMOTION_256B = 3       # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
INTERLEAVE_NONE = 0
OOB_FILL_ZERO = 0           # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements are zeros
MAP_BYTES = 128
#: the C type kernels name for a tensor map parameter
CTYPE = "TmaDescriptor"

#: the emulator's tensor map (tma.cuh's EmuTensorMap): base address, row and plane strides in bytes,
#: element bytes, columns, rows, planes, box columns, box rows, the 128-byte swizzle (0 / 1)
EMULATOR_LAYOUT = struct.Struct("<QQQIIIIIII")

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
    return tiled(a, (cols, rows), (row_stride,), (box_cols, box_rows))


def tiled_planes(a, planes: int, rows: int, cols: int, box_cols: int, box_rows: int):
    """The tensor map of `a` seen as `planes` contiguous rows x cols arrays one after another (a
    (planes, rows, cols) C-contiguous array, or one (rows, cols) array with planes 1), copied in boxes
    of one plane's box_rows x box_cols with the 128-byte swizzle: the GEMMs' C, and split-K's slices."""
    return tiled(a, (cols, rows, planes), (cols, rows * cols), (box_cols, box_rows, 1))


def tiled(a, extents, strides, box, swizzle: bool = True):
    """The tensor map of `a` seen as a 2-D or 3-D array: `extents` (columns, rows[, planes])
    innermost first, `strides` the element strides of rows (and planes), the columns contiguous;
    copied in boxes of `box` (columns, rows[, 1]) elements, into the 128-byte swizzle
    (`swizzle`: box rows of 128 bytes, the layout the wgmma tiles read) or packed row after row.
    Returns an rt.ByValue for a `TmaDescriptor` parameter."""
    extents, strides, box = tuple(int(e) for e in extents), tuple(int(e) for e in strides), tuple(int(b) for b in box)
    rank = len(extents)
    if rank not in (2, 3) or len(strides) != rank - 1 or len(box) != rank:
        raise ValueError(f"cupy_raw TMA: a map of 2 or 3 dimensions needs as many extents and box sides and one "
                         f"stride fewer; got extents {extents}, strides {strides}, box {box}")
    dt = str(a.dtype)
    if dt not in DATA_TYPES:
        raise ValueError(f"cupy_raw TMA: no tensor map for dtype {dt}; takes {', '.join(DATA_TYPES)}")
    size = a.dtype.itemsize
    ptr = _pointer(a)
    if ptr % 16:
        raise ValueError(f"cupy_raw TMA: the array must start on a 16-byte boundary (it starts at {ptr:#x})")
    if any((st * size) % 16 for st in strides):
        raise ValueError(f"cupy_raw TMA: every stride must be a multiple of 16 bytes, got {strides} "
                         f"elements of {size} bytes")
    spans = [extents[0]]  # the elements a row spans, then a plane
    if rank == 3:
        spans.append((extents[1] - 1) * strides[0] + extents[0])
    if not all(1 <= e < 2**32 for e in extents) or any(st < span for st, span in zip(strides, spans)):
        raise ValueError(f"cupy_raw TMA: extents {extents} with strides {strides} do not describe an array "
                         "(need 1 <= extents < 2^32 and each stride at least the span of the dimensions inside it)")
    if not all(1 <= b <= 256 for b in box) or (swizzle and box[0] * size != 128) or (box[0] * size) % 16:
        raise ValueError(f"cupy_raw TMA: box {box} of {size}-byte elements: each side at most 256, a row of the "
                         "box a multiple of 16 bytes" + (" and exactly 128 (the swizzle span)" if swizzle else ""))
    if rank == 3 and box[2] != 1:
        raise ValueError(f"cupy_raw TMA: a 3-D box takes one plane at a time, got {box[2]}")
    last = sum((e - 1) * st for e, st in zip(extents[1:], strides)) + extents[0]
    if last > a.size:
        raise ValueError(f"cupy_raw TMA: extents {extents} at strides {strides} reach element {last} of an array "
                         f"of {a.size}")
    key = (ptr, dt, extents, strides, box, swizzle)
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    if isinstance(a, np.ndarray):  # recording (checked, not encoded) or the emulator (its own layout)
        if not rt.is_emulating():
            return rt.ByValue(CTYPE, bytes(MAP_BYTES))
        cols, rows, planes = (extents + (1,))[:3]
        row_stride, plane_stride = (strides + (0,))[:2]
        packed = EMULATOR_LAYOUT.pack(ptr, row_stride * size, plane_stride * size, size, cols, rows, planes,
                                      box[0], box[1], int(swizzle))
        return rt.ByValue(CTYPE, packed + bytes(MAP_BYTES - len(packed)))
    raw = ctypes.create_string_buffer(MAP_BYTES + 64)        # the driver wants it 64-byte aligned
    at = (ctypes.addressof(raw) + 63) // 64 * 64
    dims = (ctypes.c_uint64 * rank)(*extents)                 # innermost first
    byte_strides = (ctypes.c_uint64 * (rank - 1))(*(st * size for st in strides))  # every dimension but the first
    box_dims = (ctypes.c_uint32 * rank)(*box)
    steps = (ctypes.c_uint32 * rank)(*([1] * rank))
    status = _encode_fn()(ctypes.c_void_p(at), DATA_TYPES[dt], rank, ctypes.c_void_p(ptr), dims, byte_strides,
                          box_dims, steps, INTERLEAVE_NONE, SWIZZLE_128B if swizzle else SWIZZLE_NONE,
                          L2_PROMOTION_256B, OOB_FILL_ZERO)
    if status != 0:
        raise RuntimeError(f"cupy_raw TMA: cuTensorMapEncodeTiled failed (CUresult {status}) for {dt} "
                           f"extents {extents}, strides {strides}, box {box}")
    value = rt.ByValue(CTYPE, ctypes.string_at(at, MAP_BYTES))
    _CACHE[key] = value
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value

