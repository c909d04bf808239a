"""Byte-level BPE: the tokenizer itself, in its readable form, and the `.tiktoken` file format.

A byte-level BPE tokenizer is three things:

    mergeable ranks   bytes -> id, for every token made of ordinary text. All 256 single bytes are
                      tokens, so any string (any bytes at all) can be encoded. The id doubles as
                      the merge rank: a smaller id was merged earlier and is merged first.
    special tokens    str -> id, e.g. "<|endoftext|>" -> 50256; never produced by merging, only by
                      `encode(..., allowed_special=...)`.
    a pre-split       a regular expression (by name: see pattern.py) cutting text into pieces
                      that BPE never merges across.

Encoding one piece (what tiktoken does, and so exactly what we must do): if the piece's bytes are a
token, that is the answer. Otherwise start from its single bytes and repeatedly merge the adjacent
pair whose concatenation has the lowest rank (the leftmost one when the same pair occurs twice),
until no adjacent pair is a token. Decoding concatenates the tokens' bytes and decodes UTF-8,
replacing invalid bytes with U+FFFD as tiktoken does (`decode_bytes` gives the exact bytes).

The `.tiktoken` file is one line per mergeable token, `base64(bytes) rank`, in rank order. It
carries neither the special tokens nor the pattern: `save` writes those to a sidecar JSON
(`NAME.tiktoken.json`); a bare file (GPT-2's own, say) loads with the GPT-2 pattern and
`<|endoftext|>` as the next id after the ranks, which is exactly GPT-2.

This module is the reference: plain Python, a dict lookup per pair, a per-piece cache. The fast
path (fast.py, numba) implements the same algorithm on arrays and is tested against this one and
against tiktoken; `BPETokenizer` uses it automatically when numba is installed.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from pathlib import Path

from .pattern import compiled, pattern_string

ENDOFTEXT = "<|endoftext|>"
SIDECAR_SUFFIX = ".json"


class TokenizerFileError(ValueError):
    """A ranks file or tokenizer description that cannot be read (missing, malformed)."""


def bpe_merge(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """Encode one pre-split piece with the ranks: the whole piece if it is a token, else merges.

    The readable algorithm (quadratic in the piece length, which is fine: pieces are words).
    """
    token = ranks.get(piece)
    if token is not None:
        return [token]
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best_rank, best_i = None, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_i = rank, i
        if best_rank is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return [ranks[p] for p in parts]


def _fix_surrogates(text: str) -> str:
    """Lone surrogates cannot be UTF-8 encoded: replace them with U+FFFD, as tiktoken does."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class BPETokenizer:
    """A byte-level BPE tokenizer: GPT-2's (see gpt2.py) or one trained here (see train.py).

    `fast=None` uses the numba fast path when numba imports, `False` forces the reference path.
    """

    kind = "bpe"

    def __init__(self, mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int] | None = None,
                 pattern: str = "gpt2", name: str | None = None, fast: bool | None = None):
        special_tokens = dict(special_tokens or {})
        pattern_string(pattern)  # unknown names fail here, with the list of known ones
        ranks = dict(mergeable_ranks)
        missing = [b for b in range(256) if bytes([b]) not in ranks]
        if missing:
            raise ValueError(f"BPE ranks: not byte-level, {len(missing)} of the 256 single bytes are not tokens "
                             f"(first missing: {missing[0]:#04x}); every byte must be a token so any text encodes")
        ids = sorted(ranks.values())
        if ids[0] < 0 or len(set(ids)) != len(ids):
            raise ValueError("BPE ranks: ranks must be distinct non-negative integers")
        decoder = {rank: token for token, rank in ranks.items()}
        for text, sid in special_tokens.items():
            if not isinstance(text, str) or not text:
                raise ValueError(f"special token {text!r}: must be a non-empty string")
            if not isinstance(sid, int) or sid < 0:
                raise ValueError(f"special token {text!r}: id {sid!r} must be a non-negative integer")
            if sid in decoder:
                raise ValueError(f"special token {text!r}: id {sid} collides with the mergeable token "
                                 f"{decoder[sid]!r} of the same rank")
            if text.encode("utf-8") in ranks:
                raise ValueError(f"special token {text!r}: its bytes are also a mergeable token "
                                 f"(rank {ranks[text.encode('utf-8')]}), so text containing it would be ambiguous")
        if len(set(special_tokens.values())) != len(special_tokens):
            raise ValueError(f"special tokens: two share an id ({special_tokens})")
        self.mergeable_ranks = ranks
        self.special_tokens = special_tokens
        self.pattern = pattern
        self.name = name
        self._decoder = decoder
        self._special_decoder = {sid: text.encode("utf-8") for text, sid in special_tokens.items()}
        self._regex = compiled(pattern)
        self._cache: dict[bytes, list[int]] = {}
        self._fast_requested = fast
        self._fast = None  # built lazily: the numba tables cost a moment, and not every use needs them
        self.n_vocab = max([ids[-1], *special_tokens.values()]) + 1
        self.eot_token = special_tokens.get(ENDOFTEXT)

    def __getstate__(self):
        # sent to worker processes without the caches; the receiver rebuilds them lazily
        state = dict(self.__dict__)
        state.update(_fast=None, _cache={}, _regex=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._regex = compiled(self.pattern)

    def __repr__(self):
        return (f"BPETokenizer(name={self.name!r}, n_vocab={self.n_vocab}, mergeable={len(self.mergeable_ranks)}, "
                f"specials={self.special_tokens}, pattern={self.pattern!r})")

    # ---- encoding -------------------------------------------------------------------------------

    def _fast_path(self):
        """The numba encoder for these ranks, or None (numba missing, or fast=False)."""
        if self._fast_requested is False:
            return None
        if self._fast is None:
            try:
                from .fast import FastBPE
            except ImportError:
                if self._fast_requested:
                    raise
                self._fast_requested = False
                return None
            self._fast = FastBPE(self.mergeable_ranks, self.pattern)
        return self._fast

    def encode_ordinary_reference(self, text: str) -> list[int]:
        """Encode ignoring special tokens, with the readable algorithm (pre-split pattern, then per-piece BPE)."""
        out: list[int] = []
        cache, ranks = self._cache, self.mergeable_ranks
        try:
            pieces = self._regex.findall(text)
            encoded = [p.encode("utf-8") for p in pieces]
        except UnicodeEncodeError:
            return self.encode_ordinary_reference(_fix_surrogates(text))
        for piece in encoded:
            ids = cache.get(piece)
            if ids is None:
                ids = bpe_merge(piece, ranks)
                if len(cache) < 200_000:
                    cache[piece] = ids
            out.extend(ids)
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode `text` as plain text: special-token strings in it are encoded like any text."""
        fast = self._fast_path()
        if fast is None:
            return self.encode_ordinary_reference(text)
        return fast.encode(text).tolist()

    def encode_ordinary_numpy(self, text: str):
        """`encode_ordinary` as a NumPy int64 array (what data preparation wants; no list built)."""
        import numpy as np

        fast = self._fast_path()
        if fast is None:
            return np.asarray(self.encode_ordinary_reference(text), dtype=np.int64)
        return fast.encode(text)

    def encode_bytes(self, data: bytes) -> list[int]:
        """Encode arbitrary bytes, valid UTF-8 or not (`decode_bytes` inverts it exactly).

        Bytes that are not valid UTF-8 take part in the pre-split as punctuation (they are read as
        the lone surrogates of Python's 'surrogateescape' scheme), so valid text in between splits
        as usual. Reference path; special tokens are not recognised.
        """
        text = bytes(data).decode("utf-8", errors="surrogateescape")
        out: list[int] = []
        for piece in self._regex.findall(text):
            out.extend(bpe_merge(piece.encode("utf-8", errors="surrogateescape"), self.mergeable_ranks))
        return out

    def _special_regex(self, specials):
        # longest first, so that a special token that is a prefix of another does not win by order
        alternatives = sorted(specials, key=lambda s: (-len(s), s))
        return re.compile("|".join(re.escape(s) for s in alternatives))

    def _check_special_args(self, text, allowed_special, disallowed_special):
        if allowed_special == "all":
            allowed = set(self.special_tokens)
        else:
            allowed = set(allowed_special)
            unknown = allowed - set(self.special_tokens)
            if unknown:
                raise ValueError(f"allowed_special names tokens this tokenizer does not have: {sorted(unknown)} "
                                 f"(it has {sorted(self.special_tokens)})")
        if disallowed_special == "all":
            disallowed = set(self.special_tokens) - allowed
        else:
            disallowed = set(disallowed_special)
        if disallowed:
            match = self._special_regex(disallowed).search(text)
            if match:
                raise ValueError(
                    f"encountered text corresponding to disallowed special token {match.group()!r}.\n"
                    f"To encode it as a special token, pass allowed_special={{{match.group()!r}, ...}} "
                    f"(or allowed_special='all'); to encode it as ordinary text, pass disallowed_special=().")
        return allowed

    def encode(self, text: str, *, allowed_special="none", disallowed_special="all", _ordinary=None) -> list[int]:
        """Encode `text`, with tiktoken's rules for special tokens.

        allowed_special: "all", or a set of special-token strings that become their special id where
            they occur (default: none).
        disallowed_special: "all" (default: every special not allowed), or a collection; finding one of
            these in the text raises ValueError. Pass () to encode special-token text as plain text.
        """
        if allowed_special == "none":
            allowed_special = set()
        allowed = self._check_special_args(text, allowed_special, disallowed_special)
        ordinary = _ordinary or self.encode_ordinary
        if not allowed:
            return ordinary(text)
        out: list[int] = []
        start = 0
        # Each stretch between allowed specials is pre-split on its own, as tiktoken does: the
        # special token ends the stretch like the end of the text (this matters for `\s++$`).
        for match in self._special_regex(allowed).finditer(text):
            out.extend(ordinary(text[start:match.start()]))
            out.append(self.special_tokens[match.group()])
            start = match.end()
        out.extend(ordinary(text[start:]))
        return out

    def encode_reference(self, text: str, **kwargs) -> list[int]:
        """`encode` through the readable path only (tests compare it with the fast one)."""
        return self.encode(text, _ordinary=self.encode_ordinary_reference, **kwargs)

    # ---- decoding -------------------------------------------------------------------------------

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token (special tokens give their UTF-8 text)."""
        token = int(token)
        b = self._decoder.get(token)
        if b is None:
            b = self._special_decoder.get(token)
            if b is None:
                raise ValueError(f"token id {token} is not in this tokenizer (vocabulary {self.n_vocab})")
        return b

    def decode_bytes(self, ids) -> bytes:
        """The exact bytes the tokens stand for (the inverse of encoding any bytes)."""
        decoder, special = self._decoder, self._special_decoder
        try:
            return b"".join([decoder[i] if i in decoder else special[i] for i in map(int, ids)])
        except KeyError as e:
            raise ValueError(f"token id {e.args[0]} is not in this tokenizer (vocabulary {self.n_vocab})") from None

    def decode(self, ids, errors: str = "replace") -> str:
        """Decode to text; bytes that are not valid UTF-8 become U+FFFD (errors='replace')."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # ---- files ----------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> Path:
        """Write the ranks as `.tiktoken` at `path`, and the specials and pattern to `path`.json."""
        path = Path(path)
        save_tiktoken_ranks(path, self.mergeable_ranks)
        meta = {"format": "nanoeuler-bpe", "version": 1, "pattern": self.pattern,
                "special_tokens": self.special_tokens, "name": self.name}
        _atomic_write(sidecar_path(path), (json.dumps(meta, indent=1) + "\n").encode())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, special_tokens: dict[str, int] | None = None,
             pattern: str | None = None, name: str | None = None, fast: bool | None = None) -> "BPETokenizer":
        """Load a `.tiktoken` file, with its sidecar JSON when there is one (see the module doc)."""
        path = Path(path)
        ranks = load_tiktoken_ranks(path)
        meta = {}
        side = sidecar_path(path)
        if side.is_file():
            from ..files import parse_json

            meta = parse_json(side.read_bytes(), f"tokenizer metadata {side}", TokenizerFileError)
            if not isinstance(meta, dict):
                raise TokenizerFileError(f"tokenizer metadata {side}: not valid (not a JSON object)")
        if special_tokens is None:
            special_tokens = meta.get("special_tokens")
            if special_tokens is None:
                special_tokens = {ENDOFTEXT: max(ranks.values()) + 1}
        pattern = pattern or meta.get("pattern", "gpt2")
        return cls(ranks, special_tokens, pattern=pattern, name=name or meta.get("name") or path.stem, fast=fast)

    def to_checkpoint(self, directory: str | os.PathLike) -> dict:
        """Write `tokenizer.tiktoken` into a checkpoint directory; return the JSON metadata."""
        directory = Path(directory)
        save_tiktoken_ranks(directory / "tokenizer.tiktoken", self.mergeable_ranks)
        return {"kind": self.kind, "file": "tokenizer.tiktoken", "pattern": self.pattern,
                "special_tokens": self.special_tokens, "name": self.name}

    @classmethod
    def from_checkpoint(cls, directory: str | os.PathLike, meta: dict) -> "BPETokenizer":
        name = meta.get("file", "tokenizer.tiktoken")
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise TokenizerFileError(f"checkpoint {directory}: tokenizer file {name!r} is not a file name "
                                     "inside the checkpoint")
        path = Path(directory) / name
        return cls(load_tiktoken_ranks(path), meta.get("special_tokens") or {}, pattern=meta.get("pattern", "gpt2"),
                   name=meta.get("name"))


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _atomic_write(path: Path, data: bytes) -> None:
    from ..files import write_bytes_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)


def save_tiktoken_ranks(path: str | os.PathLike, ranks: dict[bytes, int]) -> Path:
    """Write ranks in tiktoken's format: `base64(token) rank` per line, in rank order."""
    path = Path(path)
    lines = [base64.b64encode(token) + b" " + str(rank).encode() + b"\n"
             for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])]
    _atomic_write(path, b"".join(lines))
    return path


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Read a `.tiktoken` ranks file, with an error naming the file and line when it is malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"BPE ranks file {path}: no such file")
    data = path.read_bytes()
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError(f"expected 'base64-token rank', got {len(fields)} fields")
            token = base64.b64decode(fields[0], validate=True)
            rank = int(fields[1])
            if rank < 0:
                raise ValueError(f"negative rank {rank}")
        except (ValueError, binascii.Error) as e:
            shown = line[:60].decode("utf-8", "replace")
            raise TokenizerFileError(f"BPE ranks file {path}, line {lineno}: malformed ({e}): {shown!r}") from None
        if token in ranks:
            raise TokenizerFileError(f"BPE ranks file {path}, line {lineno}: token {token!r} appears twice")
        ranks[token] = rank
    if not ranks:
        raise TokenizerFileError(f"BPE ranks file {path}: empty (no 'base64-token rank' lines)")
    return ranks
