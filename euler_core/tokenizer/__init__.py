"""Tokenizers: what turns text into token ids and back.

Every tokenizer offers the same small surface, which training, checkpoints and generation use:

    n_vocab        the number of token ids (the model's vocabulary before padding)
    eot_token      the end-of-text id, or None when the tokenizer has none
    encode(text) -> list[int]
    decode(ids) -> str
    to_checkpoint(directory) -> dict   writes what it needs beside a checkpoint, returns JSON metadata

`encode_prompt(tokenizer, text, flag)` encodes a generation prompt (special tokens allowed in it).

`tokenizer_from_checkpoint(directory, meta)` is the inverse of `to_checkpoint`.

The byte-level BPE tokenizer (exact against tiktoken with GPT-2's ranks, trainable here) lives in
`bpe.py` (readable reference), `fast.py` (numba fast path), `train.py` (training), `gpt2.py`
(GPT-2's ranks) and `default.py` (the cached small vocabulary `euler train` uses by default).
Nothing heavy is imported here: numba loads when a BPE tokenizer first encodes.
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
    if kind == "bpe":
        from .bpe import BPETokenizer

        return BPETokenizer.from_checkpoint(directory, meta)
    raise ValueError(f"checkpoint {directory}: unknown tokenizer kind {kind!r} (known: 'bytes', 'bpe')")


def encode_prompt(tokenizer, text: str, flag: str = "--prompt") -> list[int]:
    """A prompt's ids, for generation. Special tokens written in it (`<|endoftext|>`) are encoded as
    themselves: `--prompt "<|endoftext|>"` is GPT-2's unconditional sample. A prompt that makes no
    token is refused, naming the flag."""
    specials = getattr(tokenizer, "special_tokens", None)
    ids = tokenizer.encode(text, allowed_special="all") if specials else tokenizer.encode(text)
    if not ids:
        hint = " (for an unconditional sample give '<|endoftext|>')" if specials and "<|endoftext|>" in specials else ""
        raise ValueError(f"{flag}: {text!r} is not allowed: expected text that makes at least one token{hint}")
    return ids


def load_tokenizer(spec: str | Path, fast: bool | None = None):
    """A tokenizer by name or file, as the CLI's `--tokenizer` takes it.

    "gpt2": GPT-2's own ranks (see gpt2.py for where they are found); "bytes": `ByteTokenizer`;
    otherwise the path of a `.tiktoken` file (with its `.json` sidecar when there is one).
    """
    if str(spec) == "gpt2":
        from .gpt2 import gpt2_tokenizer

        return gpt2_tokenizer(fast=fast)
    if str(spec) == "bytes":
        return ByteTokenizer()
    from .bpe import BPETokenizer

    return BPETokenizer.load(spec, fast=fast)


def default_tokenizer(text: str, vocab_size: int, cache_dir: str | Path | None = None):
    """The BPE tokenizer `euler train` uses by default: trained on `text`, cached on disk.

    See default.py. Returns a `BPETokenizer` with `<|endoftext|>` as its last id.
    """
    from .default import default_tokenizer as _default

    return _default(text, vocab_size, cache_dir=cache_dir)
