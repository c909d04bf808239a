"""Pre-split patterns: the regular expressions that cut text into pieces before BPE runs.

BPE never merges across a piece boundary, so the pattern decides what a token can be. GPT-2's
pattern (the one tiktoken calls r50k) keeps contractions apart, groups a letter run, a digit run or
a punctuation run with at most one leading space, and leaves whitespace runs as their own pieces,
the last space of a run going with the word that follows:

    "Hello  world's 42!\\n" -> ["Hello", " ", " world", "'s", " 42", "!", "\\n"]

Patterns are referred to by name in saved tokenizers and checkpoints, so a file never carries a
regular expression that gets compiled blindly.
"""

from __future__ import annotations

from functools import lru_cache

# GPT-2's pattern, written as tiktoken writes it (possessive quantifiers; `\s++$` then `\s+(?!\S)`
# then `\s`), which splits exactly as the original `\s+(?!\S)|\s+` form does.
GPT2_PATTERN = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""")

PATTERNS = {"gpt2": GPT2_PATTERN}


def pattern_string(name: str) -> str:
    """The regular expression registered under `name` (ValueError naming the known ones)."""
    try:
        return PATTERNS[name]
    except KeyError:
        raise ValueError(f"unknown pre-split pattern {name!r} (known: {', '.join(sorted(PATTERNS))})") from None


@lru_cache(maxsize=None)
def compiled(name: str):
    """The compiled pattern (the third-party `regex` module: `re` has no \\p{L} or possessives)."""
    import regex

    return regex.compile(pattern_string(name))


def split(text: str, name: str = "gpt2") -> list[str]:
    """Cut `text` into pre-split pieces with the named pattern (the readable path)."""
    return compiled(name).findall(text)
