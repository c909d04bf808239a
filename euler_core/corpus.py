"""The embedded default corpus: the Python standard library's own source, which every machine with
Python has, so `euler train` needs no download.

The files are taken in sorted order from the standard library's top level and its packages (tests,
site-packages and generated files left out) until `max_bytes` is reached, so the same Python
version always yields the same text.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3",
             "ensurepip", "pydoc_data", "turtledemo"}


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py")
             if not SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
             and not p.relative_to(root).parts[0].startswith("config-") and "test" not in p.name]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def read_texts(paths, max_bytes: int) -> list[str]:
    """The UTF-8 texts of `paths` in order (unreadable files skipped) until about `max_bytes`."""
    parts, size = [], 0
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        size += len(text.encode("utf-8"))
        if size >= max_bytes:
            break
    return parts


def default_corpus(max_bytes: int = 3_000_000) -> str:
    """About `max_bytes` of Python source from the standard library, files separated by a blank line."""
    parts = read_texts(stdlib_files(), max_bytes)
    if not parts:
        raise RuntimeError(f"no Python source found under {sysconfig.get_paths()['stdlib']} for the default corpus")
    return "\n\n".join(parts)
