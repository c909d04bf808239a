"""The safetensors file format, read and written here without the `safetensors` package.

A file is three parts (https://github.com/huggingface/safetensors, "Format"):

    8 bytes        N, the header's length: an unsigned 64-bit little-endian integer
    N bytes        a JSON object: per tensor name {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
                   plus an optional "__metadata__" {str: str}; may be padded with spaces
    the rest       the byte buffer: each tensor's little-endian, C-order data at [b, e) of it

Nothing in a safetensors file can execute code: reading one is JSON parsing and byte copies, and
every offset is checked against the file before it is used. BF16 has no NumPy dtype: it is read
as uint16 bits and widened to float32 exactly (BF16 is float32's upper half), and written by
rounding float32 to the nearest BF16 (ties to even), as PyTorch does.

What it does not do: memory-map lazily (every tensor is read into memory), or the float8 dtypes.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

from ..files import parse_json, write_atomic

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16,
          "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_}
MAX_HEADER = 100 * 2**20  # the reference implementation's limit too: a larger header is not a real file


class SafetensorsError(ValueError):
    """A file that is not valid safetensors (truncated, bad header, offsets out of bounds)."""


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 BF16 bit patterns -> float32 values (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 BF16 bit patterns, rounded to nearest, ties to even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


def read_header(path) -> tuple[dict, int]:
    """The JSON header of a safetensors file and the offset where its byte buffer begins."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise SafetensorsError(f"{path}: {size} bytes is too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER or 8 + n > size:
            raise SafetensorsError(f"{path}: header length {n} does not fit the file of {size} bytes "
                                   "(not a safetensors file, or truncated)")
        header = parse_json(f.read(n), f"{path}: the header", SafetensorsError)
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is not a JSON object")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: __metadata__ must be a JSON object of strings, got "
                               f"{type(metadata).__name__}")
    return header, 8 + n


def read_safetensors(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every tensor of the file by name (BF16 widened to float32), and its `__metadata__`."""
    path = Path(path)
    header, start = read_header(path)
    metadata = header.pop("__metadata__", None) or {}
    buffer_size = path.stat().st_size - start
    tensors = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            try:
                dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in (*shape, begin, end)):
                    raise TypeError("shape and data_offsets must be integers")
            except (KeyError, TypeError, ValueError) as e:
                raise SafetensorsError(f"{path}: tensor {name!r} has a malformed entry {str(info)[:200]} ({e})") from None
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise SafetensorsError(f"{path}: tensor {name!r} has dtype {dtype!r}; known: {', '.join(DTYPES)}")
            np_dtype = np.dtype(DTYPES[dtype])
            count = math.prod(shape)  # exact: a crafted shape cannot wrap around to a small count
            if any(s < 0 for s in shape) or not 0 <= begin <= end <= buffer_size or \
                    end - begin != count * np_dtype.itemsize:
                raise SafetensorsError(f"{path}: tensor {name!r} ({dtype} {shape}) has data_offsets [{begin}, {end}] "
                                       f"that do not fit its size or the {buffer_size}-byte buffer")
            f.seek(start + begin)
            data = np.frombuffer(f.read(end - begin), dtype=np_dtype.newbyteorder("<")).reshape(shape)
            tensors[name] = bf16_bits_to_float32(data) if dtype == "BF16" else data.astype(np_dtype.newbyteorder("="))
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def write_safetensors(path, tensors: dict[str, np.ndarray], metadata: dict | None = None,
                      float_dtype: str | None = None) -> Path:
    """Write tensors (NumPy arrays) to `path`, atomically. float_dtype "F32", "F16" or "BF16" converts
    every float tensor to it (default: each keeps its own dtype; float64 stays F64)."""
    path = Path(path)
    names = {np.dtype(v): k for k, v in DTYPES.items() if k not in ("BF16",)}
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        a = np.asarray(array)
        if float_dtype is not None and np.issubdtype(a.dtype, np.floating):
            if float_dtype == "BF16":
                a, code = float32_to_bf16_bits(a.astype(np.float32)), "BF16"
            else:
                code = float_dtype
                a = a.astype({"F32": np.float32, "F16": np.float16, "F64": np.float64}[float_dtype])
        else:
            if a.dtype not in names:
                raise TypeError(f"write_safetensors: tensor {name!r} has dtype {a.dtype}, which safetensors cannot hold")
            code = names[a.dtype]
        data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}, **header}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # pad the header so the buffer starts 8-byte aligned
    path.parent.mkdir(parents=True, exist_ok=True)

    def fill(f):
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for chunk in chunks:
            f.write(chunk)
    write_atomic(path, fill)
    return path
