"""Tokenizers: what turns text into token ids and back.

Every tokenizer offers the same small surface, which training, checkpoints and generation use:

    n_vocab        the number of token ids (the model's vocabulary before padding)
    eot_token      the end-of-text id, or None when the tokenizer has none
    encode(text) -> list[int]
    decode(ids) -> str
    to_checkpoint(directory) -> dict   writes what it needs beside a checkpoint, returns JSON metadata

`tokenizer_from_checkpoint(directory, meta)` is the inverse of `to_checkpoint`.
"""

from __future__ import annotations

from pathlib import Path


class ByteTokenizer:
    """The simplest tokenizer: one token per UTF-8 byte (vocabulary 256, no merges, no specials).

    Decoding invalid UTF-8 (a sample cut inside a multi-byte character) replaces the broken bytes
    with U+FFFD, as tiktoken does.
    """

    kind = "bytes"
    n_vocab = 256
    eot_token = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def to_checkpoint(self, directory: str | Path) -> dict:
        return {"kind": self.kind}


def tokenizer_from_checkpoint(directory: str | Path, meta: dict):
    """Rebuild the tokenizer a checkpoint was trained with from its metadata."""
    kind = meta.get("kind")
    if kind == "bytes":
        return ByteTokenizer()
    raise ValueError(f"checkpoint {directory}: unknown tokenizer kind {kind!r} (known: 'bytes')")
