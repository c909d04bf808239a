"""Training a byte-level BPE vocabulary on a corpus.

The algorithm (Sennrich et al. 2016, on bytes as in GPT-2):

1. Cut the corpus into pieces with the pre-split pattern and count each distinct piece once
   ("words" with counts: a 10 MB corpus has only ~10^5 distinct pieces).
2. Start from the 256 single bytes. Repeatedly take the most frequent adjacent pair of tokens,
   counted over all words weighted by their counts, make their concatenation a new token, and
   replace the pair by it in every word (left to right, without overlaps), until the vocabulary
   has the size asked for (or no pair is left).
3. Special tokens take the ids after the mergeable ones.

The counting is incremental: pair counts live in a hash table, each pair knows the words it occurs
in, and a merge touches only those words, subtracting their old pairs and adding their new ones.
The most frequent pair comes from a heap whose entries are refreshed lazily (counts only fall,
except for pairs containing the new token, which are pushed afresh). All of that runs compiled
(numba) in `_train_merges`; the test suite checks it against a plain recount-everything trainer.

Conventions, chosen so that a trained tokenizer encodes its own corpus the way it was counted:

* conventions="nanoeuler" (default): each document is pre-split as a whole (as encoding will split
  it), special-token strings in the corpus are cut out (never merged through), single bytes have
  rank = byte value, and ties between equally frequent pairs go to the pair with the smallest
  (first id, second id). Deterministic: no hash order, no threads.
* conventions="hf": what Hugging Face `tokenizers`' BpeTrainer does with a ByteLevel pre-tokenizer
  (add_prefix_space=False) fed the same files: each line (with its newline) is pre-split on its
  own, the single bytes are numbered in the order of their byte-level stand-in characters (the
  GPT-2 `bytes_to_unicode` table), and ties go to the smallest pair in that numbering. The merges
  equal Hugging Face's exactly (tested on a real corpus in the benchmark environment).

When a merge produces bytes that are already a token (rare: "a"+"bc" after "ab"+"c"), the merge is
recorded and the existing id reused, so the vocabulary does not grow by that step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .bpe import ENDOFTEXT, BPETokenizer

CONVENTIONS = ("nanoeuler", "hf")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from bytes to printable stand-in characters (used by Hugging Face's ByteLevel).

    Printable Latin-1 bytes stand for themselves; the other 68 bytes map, in order, to U+0100 up.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@dataclass
class TrainResult:
    tokenizer: BPETokenizer
    merges: list[tuple[bytes, bytes]]  # in order; len(merges) >= n_mergeable - 256 (duplicates)


def _initial_byte_ids(conventions: str) -> np.ndarray:
    """byte value -> id of its single-byte token."""
    if conventions == "nanoeuler":
        return np.arange(256, dtype=np.int64)
    order = sorted(range(256), key=lambda b: ord(bytes_to_unicode()[b]))
    ids = np.empty(256, dtype=np.int64)
    ids[order] = np.arange(256)
    return ids


def _strip_specials(text: str, specials) -> list[str]:
    if not specials:
        return [text]
    return re.split("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)), text)


def count_pieces(texts, pattern: str = "gpt2", per_line: bool = False, specials=()) -> dict[bytes, int]:
    """Distinct pre-split pieces of the corpus (as UTF-8 bytes) and how often each occurs."""
    from collections import Counter

    counts: Counter = Counter()
    fast = None
    if pattern == "gpt2":
        from . import fast as fast_mod

        fast = fast_mod
    for text in texts:
        for segment in _strip_specials(text, specials):
            segment = segment.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            if fast is None:
                from .pattern import compiled

                chunks = segment.splitlines(keepends=True) if per_line else [segment]
                for chunk in chunks:
                    counts.update(p.encode("utf-8") for p in compiled(pattern).findall(chunk))
                continue
            raw = segment.encode("utf-8")
            buf = np.frombuffer(raw, dtype=np.uint8)
            if per_line:
                ends = np.flatnonzero(buf == 10) + 1
                if len(ends) == 0 or ends[-1] != len(raw):
                    ends = np.append(ends, len(raw))
                starts, ncount = fast._count_pieces_lines(buf, fast.char_classes(), ends.astype(np.int64))
            else:
                starts, ncount = fast._count_pieces(buf, fast.char_classes())
            for (s, e), c in zip(starts.reshape(-1, 2).tolist(), ncount.tolist()):
                counts[raw[s:e]] += c
    return counts


def train_bpe(texts, vocab_size: int, special_tokens=(ENDOFTEXT,), pattern: str = "gpt2",
              conventions: str = "nanoeuler", progress: bool | None = None, name: str | None = None) -> TrainResult:
    """Train a byte-level BPE tokenizer of `vocab_size` ids in all (specials included).

    texts: a string, or an iterable of strings (documents; with conventions="nanoeuler" nothing is
    merged across two documents). progress: a tqdm bar (None: only for long runs on a terminal).
    """
    if isinstance(texts, str):
        texts = [texts]
    if conventions not in CONVENTIONS:
        raise ValueError(f"conventions must be one of {CONVENTIONS}, got {conventions!r}")
    special_tokens = list(dict.fromkeys(special_tokens or ()))
    if vocab_size < 256 + len(special_tokens):
        raise ValueError(f"vocab_size {vocab_size} is under 256 + {len(special_tokens)} special token(s): "
                         "a byte-level vocabulary needs all 256 bytes")
    counts = count_pieces(texts, pattern=pattern, per_line=(conventions == "hf"), specials=special_tokens)
    byte_ids = _initial_byte_ids(conventions)
    n_target = vocab_size - len(special_tokens)
    words = list(counts.items())
    lengths = np.fromiter((len(w) for w, _ in words), dtype=np.int64, count=len(words))
    wstart = np.zeros(len(words), dtype=np.int64)
    if len(words):
        np.cumsum(lengths[:-1], out=wstart[1:])
    syms = byte_ids[np.frombuffer(b"".join(w for w, _ in words), dtype=np.uint8)].astype(np.int64)
    wcount = np.fromiter((c for _, c in words), dtype=np.int64, count=len(words))
    tok_bytes = [b""] * 256
    for b in range(256):
        tok_bytes[byte_ids[b]] = bytes([b])
    tok_data = np.frombuffer(b"".join(tok_bytes), dtype=np.uint8).copy()
    tok_off = np.arange(257, dtype=np.int64)

    from . import fast

    n_merges_wanted = n_target - 256
    bar = None
    if progress is None:
        import sys

        progress = n_merges_wanted >= 2000 and sys.stderr.isatty()
    if progress and n_merges_wanted > 0:
        from tqdm import tqdm

        bar = tqdm(total=n_merges_wanted, desc="training BPE", unit="merge", leave=False)
    args = (syms, wstart, lengths.copy(), wcount, tok_data, tok_off, 256, n_target, np.zeros(1, dtype=np.int64))
    if bar is None:
        merges, tok_data, tok_off, n_tok = fast._train_merges(*args)
    else:
        # the compiled loop runs without the GIL in a thread; this thread moves the bar
        import threading

        result = []
        worker = threading.Thread(target=lambda: result.append(fast._train_merges(*args)), daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            bar.update(int(args[-1][0]) - bar.n)
        bar.close()
        if not result:
            raise RuntimeError("BPE training failed in its worker thread (see the traceback above)")
        merges, tok_data, tok_off, n_tok = result[0]
    data = tok_data.tobytes()
    tokens = [data[tok_off[t]:tok_off[t + 1]] for t in range(n_tok)]
    ranks = {tok: i for i, tok in enumerate(tokens)}
    specials = {s: n_tok + k for k, s in enumerate(special_tokens)}
    merge_list = [(tokens[a], tokens[b]) for a, b, _ in merges.tolist()]
    tok = BPETokenizer(ranks, specials, pattern=pattern, name=name)
    tok.merges = merge_list
    return TrainResult(tok, merge_list)
