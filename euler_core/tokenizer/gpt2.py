"""GPT-2's own tokenizer: its merge ranks, found on this machine (never downloaded here).

Where the ranks come from, first found wins:

1. `EULER_GPT2_RANKS=PATH`, a `.tiktoken` file (tiktoken's `r50k_base.tiktoken`, which is GPT-2's
   vocabulary in tiktoken's format);
2. tiktoken's download cache (`$TIKTOKEN_CACHE_DIR`, `$DATA_GYM_CACHE_DIR`, or
   `<tmp>/data-gym-cache`), where tiktoken keeps the file under the SHA-1 of its URL once
   `tiktoken.get_encoding("r50k_base")` (or "gpt2" via r50k) has run with a network.

The file's SHA-256 is checked: "gpt2" means exactly GPT-2's ranks. The tokenizer is 50,256
mergeable tokens, `<|endoftext|>` = 50256 and GPT-2's pre-split pattern.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .bpe import ENDOFTEXT, BPETokenizer, load_tiktoken_ranks

R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_N_MERGEABLE = 50256
GPT2_EOT = 50256


def tiktoken_cache_dir() -> Path:
    """Where tiktoken caches downloaded files (the same rule tiktoken follows)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def find_gpt2_ranks() -> Path:
    """The path of GPT-2's ranks on this machine, or FileNotFoundError saying how to provide them."""
    env = os.environ.get("EULER_GPT2_RANKS")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"EULER_GPT2_RANKS={env}: no such file")
        return path
    cached = tiktoken_cache_dir() / hashlib.sha1(R50K_URL.encode()).hexdigest()
    if cached.is_file():
        return cached
    raise FileNotFoundError(
        "GPT-2's BPE ranks were not found: set EULER_GPT2_RANKS to a copy of r50k_base.tiktoken "
        f"(sha256 {R50K_SHA256[:12]}...), or run tiktoken.get_encoding('r50k_base') once with a "
        f"network so that tiktoken caches it (looked in {cached})")


def gpt2_tokenizer(path: str | os.PathLike | None = None, fast: bool | None = None) -> BPETokenizer:
    """GPT-2's tokenizer from `path` or from where `find_gpt2_ranks` finds it, checksum verified."""
    path = Path(path) if path is not None else find_gpt2_ranks()
    if not path.is_file():
        raise FileNotFoundError(f"GPT-2 ranks file {path}: no such file")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != R50K_SHA256:
        raise ValueError(f"GPT-2 ranks file {path}: sha256 {digest[:12]}... is not GPT-2's ({R50K_SHA256[:12]}...); "
                         "for another vocabulary pass the file itself as the tokenizer, not 'gpt2'")
    ranks = load_tiktoken_ranks(path)
    return BPETokenizer(ranks, {ENDOFTEXT: GPT2_EOT}, pattern="gpt2", name="gpt2", fast=fast)
