"""Shared helpers for the tokenizer and data tests: GPT-2's ranks, and real corpora.

Nothing here downloads: GPT-2's ranks ship with the package (euler_core/tokenizer/data/, or
$EULER_GPT2_RANKS when set), so the tests that use them run everywhere. The real corpus is the
Python standard library's own source, which every machine running the tests has.
"""

from __future__ import annotations

import sysconfig
from functools import lru_cache
from pathlib import Path

from euler_core.corpus import read_texts
from euler_core.tokenizer.gpt2 import find_gpt2_ranks

REPO = Path(__file__).resolve().parents[1]


def require_gpt2_ranks() -> Path:
    """The ranks file `--tokenizer gpt2` uses (never absent: it is package data)."""
    return find_gpt2_ranks()


@lru_cache(maxsize=None)
def stdlib_files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return tuple(sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts))


@lru_cache(maxsize=None)
def stdlib_text(min_bytes: int, skip: int = 0) -> str:
    """About `min_bytes` of the standard library's source: English docstrings and comments, code,
    and pydoc's topic help (prose). `skip` files first, for a different sample."""
    root = Path(sysconfig.get_paths()["stdlib"])
    topics = root / "pydoc_data" / "topics.py"
    files = ([topics] if topics.is_file() and skip == 0 else []) + list(stdlib_files()[skip:])
    return "".join(read_texts(files, min_bytes))
