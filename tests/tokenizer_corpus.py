"""Shared helpers for the tokenizer and data tests: GPT-2's ranks (or a skip), and real corpora.

Nothing here downloads: GPT-2's ranks come from ../shared/data/gpt2.tiktoken (beside the repository)
or $EULER_GPT2_RANKS, and tests that need them skip with the reason where they are absent. The
real corpus is the Python standard library's own source, which every machine running the tests has.
"""

from __future__ import annotations

import os
import sysconfig
from functools import lru_cache
from pathlib import Path

import pytest

from euler_core.corpus import read_texts

REPO = Path(__file__).resolve().parents[1]
SHARED_RANKS = REPO.parent / "shared" / "data" / "gpt2.tiktoken"


def gpt2_ranks_path() -> Path | None:
    env = os.environ.get("EULER_GPT2_RANKS")
    if env and Path(env).is_file():
        return Path(env)
    return SHARED_RANKS if SHARED_RANKS.is_file() else None


def require_gpt2_ranks() -> Path:
    path = gpt2_ranks_path()
    if path is None:
        pytest.skip(f"GPT-2's ranks are absent ({SHARED_RANKS} missing and EULER_GPT2_RANKS unset)")
    return path


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
