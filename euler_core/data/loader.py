"""Batches of (inputs, targets) from token arrays: memory-mapped shards or an in-memory corpus.

Batch number `index` is a pure function of (seed, index): B windows of T+1 tokens at offsets drawn
from a generator seeded with both. Training therefore needs no loader state to resume exactly where
it stopped: the step number is the position.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np

from .shards import open_shard


class TokenSource:
    """One or more 1-D token arrays sampled as one stream of windows.

    With `vocab_size` set, every batch is checked to hold only ids below it; an id beyond it is an
    error naming the shard (or array) and the position where it lies.
    """

    def __init__(self, arrays: list[np.ndarray], name: str = "tokens", paths: list | None = None,
                 vocab_size: int | None = None):
        paths = paths if paths is not None else [None] * len(arrays)
        kept = [(a, p) for a, p in zip(arrays, paths) if len(a) > 0]
        self.arrays = [a for a, _ in kept]
        self.paths = [p for _, p in kept]
        self.name = name
        self.vocab_size = vocab_size
        if not self.arrays:
            raise ValueError(f"{name}: no tokens")
        self.lengths = np.array([len(a) for a in self.arrays], dtype=np.int64)

    @classmethod
    def from_shards(cls, pattern: str, name: str) -> "TokenSource":
        """Every shard matching a glob pattern (or one path), memory-mapped and header-checked."""
        paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not paths or not all(Path(p).exists() for p in paths):
            raise FileNotFoundError(f"{name}: no token shards match {pattern!r}")
        return cls([open_shard(p) for p in paths], name=f"{name} ({len(paths)} shard(s))", paths=paths)

    def __len__(self) -> int:
        return int(self.lengths.sum())

    def batch(self, index: int, B: int, T: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """inputs, targets: (B,T) int32 each; targets are inputs shifted left by one token."""
        usable = self.lengths - T  # a window needs T+1 tokens
        if usable.max() < 1:
            raise ValueError(f"{self.name}: {int(self.lengths.max())} tokens is too few for windows of "
                             f"T+1={T + 1}; use a shorter --seq-len or more data")
        rng = np.random.default_rng([seed, index])
        weights = np.clip(usable, 0, None) / np.clip(usable, 0, None).sum()
        which = rng.choice(len(self.arrays), size=B, p=weights)
        windows = np.empty((B, T + 1), dtype=np.int32)
        starts = []
        for row, a in enumerate(which):
            start = int(rng.integers(0, usable[a]))
            starts.append(start)
            windows[row] = self.arrays[a][start:start + T + 1]
        if self.vocab_size is not None and int(windows.max()) >= self.vocab_size:
            row = int(np.argmax(windows.max(axis=1) >= self.vocab_size))
            col = int(np.argmax(windows[row] >= self.vocab_size))
            a = which[row]
            where = self.paths[a] or f"{self.name} array {a}"
            raise ValueError(f"{where}: token id {int(windows[row, col])} at token position {starts[row] + col:,} "
                             f"is outside the vocabulary of {self.vocab_size} (ids 0..{self.vocab_size - 1}); "
                             "were these shards made with another tokenizer?")
        return windows[:, :-1], windows[:, 1:]
