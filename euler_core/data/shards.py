"""llm.c's token shard format, read and written.

A shard is a 256-int32 header followed by the tokens:

    header[0] = 20240520      magic number
    header[1] = 1 or 2        version: 1 means uint16 tokens (llm.c's own), 2 means uint32 tokens
                              (our extension for vocabularies larger than 65,536)
    header[2] = n             the number of tokens that follow
    header[3..255] = 0

so shards written by llm.c's data scripts train here and ours train there (version 1). Reading is a
memory map: a 10 GB shard costs nothing until its batches are touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..files import write_atomic

MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPES = {1: np.dtype("<u2"), 2: np.dtype("<u4")}


class ShardError(ValueError):
    """A token shard that cannot be read: wrong magic, version, or length."""


def write_shard(path: str | os.PathLike, tokens, vocab_size: int | None = None) -> Path:
    """Write `tokens` as an llm.c shard, atomically (a temporary file renamed into place).

    Version 1 (uint16) when every token fits, else version 2 (uint32). Returns the path.
    """
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"write_shard: tokens must be 1-D, got shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0):
        raise ValueError("write_shard: tokens must be non-negative")
    top = int(tokens.max()) if tokens.size else 0
    needs_u32 = top >= 2**16 or (vocab_size is not None and vocab_size > 2**16)
    version = 2 if needs_u32 else 1
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, version, tokens.size

    def fill(f):
        f.write(header.tobytes())
        f.write(tokens.astype(TOKEN_DTYPES[version]).tobytes())
    return write_atomic(path, fill)


def open_shard(path: str | os.PathLike) -> np.ndarray:
    """Memory-map the tokens of one shard (read-only), after checking its header fully."""
    path = Path(path)
    if not path.is_file():
        raise ShardError(f"token shard {path}: no such file")
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise ShardError(f"token shard {path}: {size} bytes is shorter than the {HEADER_BYTES}-byte header "
                         "(truncated, or not a shard)")
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header[0] != MAGIC:
        raise ShardError(f"token shard {path}: magic number {int(header[0])}, expected {MAGIC} "
                         "(not an llm.c-format .bin shard)")
    version = int(header[1])
    if version not in TOKEN_DTYPES:
        raise ShardError(f"token shard {path}: version {version}, expected 1 (uint16) or 2 (uint32)")
    count = int(header[2])
    itemsize = TOKEN_DTYPES[version].itemsize
    expected = HEADER_BYTES + count * itemsize
    if size != expected:
        raise ShardError(f"token shard {path}: header says {count} tokens ({expected} bytes in all) "
                         f"but the file has {size} bytes (truncated or corrupt)")
    if count == 0:
        return np.zeros(0, dtype=TOKEN_DTYPES[version])
    return np.memmap(path, dtype=TOKEN_DTYPES[version], mode="r", offset=HEADER_BYTES, shape=(count,))
