"""The fast path of byte-level BPE encoding: GPT-2's pre-split and the merges, compiled with numba.

Same algorithm as bpe.py (the reference), step for step; what differs is only how it runs:

* The pre-split is a hand-written scanner over the UTF-8 bytes instead of a regular expression.
  It implements exactly GPT-2's pattern (see `_piece_end`), with the character classes \\p{L},
  \\p{N} and \\s read from a table of all 1,114,112 code points filled from the ranges of
  unicode_classes.py, the ones the reference path's pattern is built from (so the two paths
  cannot disagree about what a letter is).
* Pieces longer than LONG_PIECE bytes (minified code, base64, long runs of one character) are
  merged with a heap and a linked list, O(m log m), instead of rescanning all pairs at every merge
  (O(m^2)); the order of merges, hence the result, is the same.
* Tokens are looked up in open-addressing hash tables held in NumPy arrays: one from a byte string
  to its id (the "whole piece is a token" shortcut) and one from a pair of ids to the id of their
  concatenation (the merge step), instead of dicts keyed by bytes.

Only the "gpt2" pattern has a scanner; `FastBPE` raises ValueError for any other, and the caller
(`BPETokenizer`) falls back to the reference path. numba is imported here, so this module is
imported only when a BPE tokenizer first encodes.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

# character classes in the table
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


@lru_cache(maxsize=None)
def char_classes() -> np.ndarray:
    """uint8[0x110000]: the class of every code point, from the ranges of unicode_classes.py (the
    same table pattern.py compiles into the reference path's pattern, so the two paths agree)."""
    from . import unicode_classes

    table = np.zeros(0x110000, dtype=np.uint8)
    for cls, ranges in ((LETTER, unicode_classes.LETTER), (NUMBER, unicode_classes.NUMBER),
                        (SPACE, unicode_classes.WHITESPACE)):
        for first, last in ranges:
            table[first:last + 1] = cls
    return table


# ---- the pre-split scanner ------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _decode(buf, i):
    """(code point, its length in bytes) at byte offset i of valid UTF-8."""
    b0 = np.int64(buf[i])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xE0:
        return ((b0 & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F), 2
    if b0 < 0xF0:
        return ((b0 & 0x0F) << 12) | ((np.int64(buf[i + 1]) & 0x3F) << 6) | (np.int64(buf[i + 2]) & 0x3F), 3
    return (((b0 & 0x07) << 18) | ((np.int64(buf[i + 1]) & 0x3F) << 12) | ((np.int64(buf[i + 2]) & 0x3F) << 6)
            | (np.int64(buf[i + 3]) & 0x3F)), 4


@njit(cache=True, inline="always")
def _run_end(buf, n, i, cls, k):
    """The end of the run of class-k characters starting at byte i."""
    while i < n:
        c, l = _decode(buf, i)
        if cls[c] != k:
            break
        i += l
    return i


@njit(cache=True)
def _piece_end(buf, n, i, cls):
    """The end of the pre-split piece that starts at byte i: GPT-2's pattern, alternative by alternative.

        '(?:[sdmt]|ll|ve|re) | ?\\p{L}++ | ?\\p{N}++ | ?[^\\s\\p{L}\\p{N}]++ | \\s++$ | \\s+(?!\\S) | \\s
    """
    c, l = _decode(buf, i)
    if c == 39:  # an apostrophe: a contraction, if one follows (case-sensitive, as in GPT-2)
        if i + 1 < n:
            c1 = buf[i + 1]
            if c1 == 115 or c1 == 100 or c1 == 109 or c1 == 116:  # s d m t
                return i + 2
            if i + 2 < n:
                c2 = buf[i + 2]
                if (c1 == 108 and c2 == 108) or (c1 == 118 and c2 == 101) or (c1 == 114 and c2 == 101):  # ll ve re
                    return i + 3
    k = cls[c]
    if c == 32 and i + 1 < n:  # " ?X+": a space joins the letter, number or other run after it
        c1, l1 = _decode(buf, i + 1)
        k1 = cls[c1]
        if k1 != SPACE:
            return _run_end(buf, n, i + 1 + l1, cls, k1)
    if k != SPACE:
        return _run_end(buf, n, i + l, cls, k)
    # whitespace: the whole run if it ends the text, else all but its last character (which goes
    # with the word after it, or stands alone), else (a run of one) that one character
    last = i
    j = i
    while j < n:
        c, l = _decode(buf, j)
        if cls[c] != SPACE:
            break
        last = j
        j += l
    if j == n:
        return n
    if last > i:
        return last
    return j


@njit(cache=True)
def split_offsets(buf, cls):
    """Byte offsets of the pieces of `buf`: piece p is buf[starts[p]:starts[p + 1]]."""
    n = buf.shape[0]
    starts = np.empty(n + 1, dtype=np.int64)
    count = 0
    i = 0
    while i < n:
        starts[count] = i
        count += 1
        i = _piece_end(buf, n, i, cls)
    starts[count] = n
    return starts[:count + 1]


# ---- hash tables in arrays ------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _hash_bytes(buf, start, end):
    """FNV-1a, 64-bit."""
    h = np.uint64(14695981039346656037)
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * np.uint64(1099511628211)
    return h


@njit(cache=True, inline="always")
def _hash_int(key):
    return (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(key) >> np.uint64(29))


@njit(cache=True)
def _build_token_table(data, offsets, mask):
    """Slots (index of the token, -1 empty) for the byte strings data[offsets[t]:offsets[t+1]]."""
    slots = np.full(mask + 1, -1, dtype=np.int32)
    for t in range(offsets.shape[0] - 1):
        s = _hash_bytes(data, offsets[t], offsets[t + 1]) & np.uint64(mask)
        while slots[s] != -1:
            s = (s + np.uint64(1)) & np.uint64(mask)
        slots[s] = t
    return slots


@njit(cache=True, inline="always")
def _lookup_bytes(slots, mask, data, offsets, buf, start, end):
    """The index of the token equal to buf[start:end], or -1."""
    length = end - start
    s = _hash_bytes(buf, start, end) & np.uint64(mask)
    while True:
        t = slots[s]
        if t == -1:
            return -1
        o = offsets[t]
        if offsets[t + 1] - o == length:
            same = True
            for k in range(length):
                if data[o + k] != buf[start + k]:
                    same = False
                    break
            if same:
                return t
        s = (s + np.uint64(1)) & np.uint64(mask)


@njit(cache=True)
def _build_pair_table(keys_in, values_in, mask):
    keys = np.full(mask + 1, -1, dtype=np.int64)
    values = np.empty(mask + 1, dtype=np.int64)
    for j in range(keys_in.shape[0]):
        s = _hash_int(keys_in[j]) & np.uint64(mask)
        while keys[s] != -1 and keys[s] != keys_in[j]:
            s = (s + np.uint64(1)) & np.uint64(mask)
        keys[s] = keys_in[j]
        values[s] = values_in[j]
    return keys, values


@njit(cache=True, inline="always")
def _lookup_pair(keys, values, mask, key):
    s = _hash_int(key) & np.uint64(mask)
    while True:
        k = keys[s]
        if k == key:
            return values[s]
        if k == -1:
            return -1
        s = (s + np.uint64(1)) & np.uint64(mask)


# ---- encoding -------------------------------------------------------------------------------------

PAIR_SHIFT = 32  # pair key = (a << 32) | b


@njit(cache=True)
def _merge_piece(buf, start, end, byte_ids, pkeys, pvalues, pmask, parts, pranks, out, count):
    """BPE on buf[start:end] from single bytes: merge the lowest-rank adjacent pair, leftmost first."""
    m = end - start
    for k in range(m):
        parts[k] = byte_ids[buf[start + k]]
    for k in range(m - 1):
        pranks[k] = _lookup_pair(pkeys, pvalues, pmask, (parts[k] << PAIR_SHIFT) | parts[k + 1])
    while m > 1:
        best = -1
        bi = -1
        for k in range(m - 1):
            r = pranks[k]
            if r != -1 and (best == -1 or r < best):
                best = r
                bi = k
        if bi == -1:
            break
        parts[bi] = best
        for k in range(bi + 1, m - 1):
            parts[k] = parts[k + 1]
        for k in range(bi + 1, m - 2):
            pranks[k] = pranks[k + 1]
        m -= 1
        if bi > 0:
            pranks[bi - 1] = _lookup_pair(pkeys, pvalues, pmask, (parts[bi - 1] << PAIR_SHIFT) | parts[bi])
        if bi < m - 1:
            pranks[bi] = _lookup_pair(pkeys, pvalues, pmask, (parts[bi] << PAIR_SHIFT) | parts[bi + 1])
    for k in range(m):
        out[count + k] = parts[k]
    return count + m


LONG_PIECE = 256  # longer pieces are merged with a heap: O(m log m) instead of O(m^2)


@njit(cache=True)
def _merge_piece_heap(buf, start, end, byte_ids, pkeys, pvalues, pmask, out, count):
    """The same merges as `_merge_piece` (lowest rank first, leftmost on ties), for long pieces.

    Parts form a linked list; candidate pairs sit in a min-heap keyed by (rank, position of the
    left part), which is exactly "lowest rank, leftmost" order. An entry is stale when either part
    has changed since it was pushed (a version number per part), and is then skipped.
    """
    m = end - start
    ids = np.empty(m, dtype=np.int64)
    nxt = np.empty(m, dtype=np.int64)
    prv = np.empty(m, dtype=np.int64)
    ver = np.zeros(m, dtype=np.int64)
    for k in range(m):
        ids[k] = byte_ids[buf[start + k]]
        nxt[k] = k + 1
        prv[k] = k - 1
    cap = 3 * m + 4
    hkey = np.empty(cap, dtype=np.int64)   # rank * m + left position
    hright = np.empty(cap, dtype=np.int64)
    hv1 = np.empty(cap, dtype=np.int64)
    hv2 = np.empty(cap, dtype=np.int64)
    size = 0
    for k in range(m - 1):
        r = _lookup_pair(pkeys, pvalues, pmask, (ids[k] << PAIR_SHIFT) | ids[k + 1])
        if r != -1:
            size = _minheap_push(hkey, hright, hv1, hv2, size, r * m + k, k + 1, 0, 0)
    while size > 0:
        key, right, v1, v2 = hkey[0], hright[0], hv1[0], hv2[0]
        size = _minheap_pop(hkey, hright, hv1, hv2, size)
        left = key % m
        rank = key // m
        if ver[left] != v1 or ver[right] != v2 or nxt[left] != right or ver[left] < 0 or ver[right] < 0:
            continue
        ids[left] = rank
        ver[left] += 1
        ver[right] = -1  # dead
        nxt[left] = nxt[right]
        if nxt[left] < m:
            prv[nxt[left]] = left
        p = prv[left]
        if p >= 0:
            r = _lookup_pair(pkeys, pvalues, pmask, (ids[p] << PAIR_SHIFT) | ids[left])
            if r != -1:
                size = _minheap_push(hkey, hright, hv1, hv2, size, r * m + p, left, ver[p], ver[left])
        q = nxt[left]
        if q < m:
            r = _lookup_pair(pkeys, pvalues, pmask, (ids[left] << PAIR_SHIFT) | ids[q])
            if r != -1:
                size = _minheap_push(hkey, hright, hv1, hv2, size, r * m + left, q, ver[left], ver[q])
    k = 0
    while k < m:
        out[count] = ids[k]
        count += 1
        k = nxt[k]
    return count


@njit(cache=True)
def _minheap_push(hkey, hright, hv1, hv2, size, key, right, v1, v2):
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if hkey[parent] <= key:
            break
        hkey[i], hright[i], hv1[i], hv2[i] = hkey[parent], hright[parent], hv1[parent], hv2[parent]
        i = parent
    hkey[i], hright[i], hv1[i], hv2[i] = key, right, v1, v2
    return size + 1


@njit(cache=True)
def _minheap_pop(hkey, hright, hv1, hv2, size):
    size -= 1
    key, right, v1, v2 = hkey[size], hright[size], hv1[size], hv2[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and hkey[child + 1] < hkey[child]:
            child += 1
        if hkey[child] >= key:
            break
        hkey[i], hright[i], hv1[i], hv2[i] = hkey[child], hright[child], hv1[child], hv2[child]
        i = child
    hkey[i], hright[i], hv1[i], hv2[i] = key, right, v1, v2
    return size


@njit(cache=True)
def _encode(buf, cls, data, offsets, ids, slots, smask, byte_ids, pkeys, pvalues, pmask):
    n = buf.shape[0]
    out = np.empty(n, dtype=np.int64)
    parts = np.empty(LONG_PIECE + 1, dtype=np.int64)
    pranks = np.empty(LONG_PIECE + 1, dtype=np.int64)
    count = 0
    i = 0
    while i < n:
        j = _piece_end(buf, n, i, cls)
        t = _lookup_bytes(slots, smask, data, offsets, buf, i, j)
        if t != -1:
            out[count] = ids[t]
            count += 1
        elif j - i > LONG_PIECE:
            count = _merge_piece_heap(buf, i, j, byte_ids, pkeys, pvalues, pmask, out, count)
        else:
            count = _merge_piece(buf, i, j, byte_ids, pkeys, pvalues, pmask, parts, pranks, out, count)
        i = j
    return out[:count]


def _table_mask(n: int) -> int:
    size = 1
    while size < 2 * n + 16:
        size *= 2
    return size - 1


class FastBPE:
    """Encode with given mergeable ranks (bytes -> id) through the numba path. gpt2 pattern only."""

    def __init__(self, ranks: dict[bytes, int], pattern: str = "gpt2"):
        if pattern != "gpt2":
            raise ValueError(f"fast BPE path: no scanner for pattern {pattern!r}")
        tokens = sorted(ranks.items(), key=lambda kv: kv[1])
        self.ids = np.array([r for _, r in tokens], dtype=np.int64)
        lengths = np.array([len(t) for t, _ in tokens], dtype=np.int64)
        self.offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(t for t, _ in tokens), dtype=np.uint8)
        self.smask = _table_mask(len(tokens))
        self.slots = _build_token_table(self.data, self.offsets, self.smask)
        self.byte_ids = np.array([ranks[bytes([b])] for b in range(256)], dtype=np.int64)
        # pair (a, b) -> id of a+b, for every token that splits into two tokens (each split point):
        # the merge loop only ever joins two tokens, so this is every merge it can make
        keys, values = [], []
        for token, rank in tokens:
            for k in range(1, len(token)):
                a, b = ranks.get(token[:k]), ranks.get(token[k:])
                if a is not None and b is not None:
                    keys.append((a << PAIR_SHIFT) | b)
                    values.append(rank)
        self.pmask = _table_mask(len(keys))
        self.pkeys, self.pvalues = _build_pair_table(np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64),
                                                     self.pmask)
        self.cls = char_classes()

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64 array) of `text`, special-token strings treated as plain text."""
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:
            raw = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
        return self.encode_bytes(raw)

    def encode_bytes(self, raw: bytes) -> np.ndarray:
        """Token ids of valid UTF-8 bytes."""
        buf = np.frombuffer(raw, dtype=np.uint8)
        return _encode(buf, self.cls, self.data, self.offsets, self.ids, self.slots, self.smask, self.byte_ids,
                       self.pkeys, self.pvalues, self.pmask)


# ---- training: counting pieces --------------------------------------------------------------------

@njit(cache=True)
def split_offsets_lines(buf, cls, ends):
    """Like `split_offsets`, with each line (ending at the offsets `ends`) pre-split on its own."""
    n = buf.shape[0]
    starts = np.empty(n + 1, dtype=np.int64)
    count = 0
    i = 0
    for e in ends:
        while i < e:
            starts[count] = i
            count += 1
            i = _piece_end(buf, e, i, cls)
    starts[count] = n
    return starts[:count + 1]


@njit(cache=True)
def _count_spans(buf, offsets):
    """Distinct byte strings among the pieces buf[offsets[p]:offsets[p+1]]: ((start, end) pairs, counts)."""
    npieces = offsets.shape[0] - 1
    mask = 1
    while mask < 2 * npieces + 16:
        mask *= 2
    mask -= 1
    slots = np.full(mask + 1, -1, dtype=np.int64)
    first = np.empty(npieces, dtype=np.int64)
    counts = np.zeros(npieces, dtype=np.int64)
    ndistinct = 0
    for p in range(npieces):
        a, b = offsets[p], offsets[p + 1]
        s = _hash_bytes(buf, a, b) & np.uint64(mask)
        while True:
            d = slots[s]
            if d == -1:
                slots[s] = ndistinct
                first[ndistinct] = p
                counts[ndistinct] = 1
                ndistinct += 1
                break
            q = first[d]
            qa = offsets[q]
            if offsets[q + 1] - qa == b - a:
                same = True
                for k in range(b - a):
                    if buf[qa + k] != buf[a + k]:
                        same = False
                        break
                if same:
                    counts[d] += 1
                    break
            s = (s + np.uint64(1)) & np.uint64(mask)
    spans = np.empty(2 * ndistinct, dtype=np.int64)
    for d in range(ndistinct):
        spans[2 * d] = offsets[first[d]]
        spans[2 * d + 1] = offsets[first[d] + 1]
    return spans, counts[:ndistinct]


def _count_pieces(buf, cls):
    return _count_spans(buf, split_offsets(buf, cls))


def _count_pieces_lines(buf, cls, ends):
    return _count_spans(buf, split_offsets_lines(buf, cls, ends))


# ---- training: the merge loop ---------------------------------------------------------------------

@njit(cache=True, inline="always")
def _grow(arr, need):
    if need <= arr.shape[0]:
        return arr
    size = arr.shape[0] * 2
    while size < need:
        size *= 2
    new = np.empty(size, dtype=arr.dtype)
    new[:arr.shape[0]] = arr
    return new


@njit(cache=True, inline="always")
def _better(c1, k1, c2, k2):
    """Heap order: the higher count first; between equal counts, the smaller pair key."""
    return c1 > c2 or (c1 == c2 and k1 < k2)


@njit(cache=True)
def _heap_push(hc, hk, hp, size, c, k, p):
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if not _better(c, k, hc[parent], hk[parent]):
            break
        hc[i], hk[i], hp[i] = hc[parent], hk[parent], hp[parent]
        i = parent
    hc[i], hk[i], hp[i] = c, k, p


@njit(cache=True)
def _heap_pop(hc, hk, hp, size):
    """Remove the top (caller has read it); `size` is the size before the pop."""
    size -= 1
    c, k, p = hc[size], hk[size], hp[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _better(hc[child + 1], hk[child + 1], hc[child], hk[child]):
            child += 1
        if not _better(hc[child], hk[child], c, k):
            break
        hc[i], hk[i], hp[i] = hc[child], hk[child], hp[child]
        i = child
    hc[i], hk[i], hp[i] = c, k, p


@njit(cache=True, nogil=True)
def _train_merges(syms, wstart, wlen, wcount, tok_data, tok_off, n_tok, n_target, progress):
    """The BPE merge loop (see train.py). Mutates syms/wlen; returns (merges (m, 3): a, b, new id,
    token bytes, token offsets, number of tokens). progress[0] is kept at the number of merges."""
    nwords = wstart.shape[0]
    # token bytes -> id, for recognising a merge that yields an existing token
    tmask = 1
    while tmask < 2 * n_target + 16:
        tmask *= 2
    tmask -= 1
    tslots = np.full(tmask + 1, -1, dtype=np.int32)
    tok_off = _grow(tok_off, n_target + 1)
    for t in range(n_tok):
        s = _hash_bytes(tok_data, tok_off[t], tok_off[t + 1]) & np.uint64(tmask)
        while tslots[s] != -1:
            s = (s + np.uint64(1)) & np.uint64(tmask)
        tslots[s] = t
    # pairs: dense arrays indexed by pair number, found through an open-addressing table
    cap = 1024
    pa = np.empty(cap, dtype=np.int64)
    pb = np.empty(cap, dtype=np.int64)
    pcount = np.zeros(cap, dtype=np.int64)
    phead = np.empty(cap, dtype=np.int64)     # first node of the pair's word list
    plastw = np.empty(cap, dtype=np.int64)    # word of the last node added (skip repeats)
    ptouched = np.zeros(cap, dtype=np.int64)  # merge step that last touched it
    npairs = 0
    pmask = 2047
    pslots = np.full(pmask + 1, -1, dtype=np.int64)
    node_word = np.empty(1024, dtype=np.int64)
    node_next = np.empty(1024, dtype=np.int64)
    nnodes = 0
    wstamp = np.zeros(nwords, dtype=np.int64)
    touched = np.empty(1024, dtype=np.int64)
    merges = np.empty((max(n_target - n_tok, 1), 3), dtype=np.int64)
    nmerges = 0

    # phase 1: count every adjacent pair of every word
    for w in range(nwords):
        st = wstart[w]
        for k in range(wlen[w] - 1):
            x, y = syms[st + k], syms[st + k + 1]
            key = (x << 32) | y
            s = _hash_int(key) & np.uint64(pmask)
            while pslots[s] != -1 and not (pa[pslots[s]] == x and pb[pslots[s]] == y):
                s = (s + np.uint64(1)) & np.uint64(pmask)
            q = pslots[s]
            if q == -1:
                q = npairs
                npairs += 1
                if npairs > pa.shape[0]:
                    pa, pb, pcount = _grow(pa, npairs), _grow(pb, npairs), _grow(pcount, npairs)
                    phead, plastw, ptouched = _grow(phead, npairs), _grow(plastw, npairs), _grow(ptouched, npairs)
                pa[q], pb[q], pcount[q], phead[q], plastw[q], ptouched[q] = x, y, 0, -1, -1, 0
                pslots[s] = q
                if 2 * npairs > pmask:  # rehash at half full
                    pmask = 2 * pmask + 1
                    pslots = np.full(pmask + 1, -1, dtype=np.int64)
                    for r in range(npairs):
                        s2 = _hash_int((pa[r] << 32) | pb[r]) & np.uint64(pmask)
                        while pslots[s2] != -1:
                            s2 = (s2 + np.uint64(1)) & np.uint64(pmask)
                        pslots[s2] = r
            pcount[q] += wcount[w]
            if plastw[q] != w:
                nnodes += 1
                if nnodes > node_word.shape[0]:
                    node_word, node_next = _grow(node_word, nnodes), _grow(node_next, nnodes)
                node_word[nnodes - 1] = w
                node_next[nnodes - 1] = phead[q]
                phead[q] = nnodes - 1
                plastw[q] = w

    hcap = npairs + 1024
    hc = np.empty(hcap, dtype=np.int64)
    hk = np.empty(hcap, dtype=np.int64)
    hp = np.empty(hcap, dtype=np.int64)
    hsize = 0
    for q in range(npairs):
        if pcount[q] > 0:
            _heap_push(hc, hk, hp, hsize, pcount[q], (pa[q] << 32) | pb[q], q)
            hsize += 1

    # phase 2: merge
    it = 0
    while n_tok < n_target and hsize > 0:
        c, p = hc[0], hp[0]
        _heap_pop(hc, hk, hp, hsize)
        hsize -= 1
        if c != pcount[p]:  # stale entry: its count has fallen since it was pushed
            if pcount[p] > 0:
                _heap_push(hc, hk, hp, hsize, pcount[p], (pa[p] << 32) | pb[p], p)
                hsize += 1
            continue
        a, b = pa[p], pb[p]
        it += 1
        # the new token's bytes, and whether they are already a token
        la = tok_off[a + 1] - tok_off[a]
        lb = tok_off[b + 1] - tok_off[b]
        end = tok_off[n_tok]
        tok_data = _grow(tok_data, end + la + lb)
        tok_data[end:end + la] = tok_data[tok_off[a]:tok_off[a] + la]
        tok_data[end + la:end + la + lb] = tok_data[tok_off[b]:tok_off[b] + lb]
        s = _hash_bytes(tok_data, end, end + la + lb) & np.uint64(tmask)
        new = -1
        while tslots[s] != -1:
            t = tslots[s]
            if tok_off[t + 1] - tok_off[t] == la + lb:
                same = True
                for k in range(la + lb):
                    if tok_data[tok_off[t] + k] != tok_data[end + k]:
                        same = False
                        break
                if same:
                    new = t
                    break
            s = (s + np.uint64(1)) & np.uint64(tmask)
        if new == -1:
            new = n_tok
            tslots[s] = new
            tok_off[n_tok + 1] = end + la + lb
            n_tok += 1
        if nmerges == merges.shape[0]:
            bigger = np.empty((2 * nmerges, 3), dtype=np.int64)
            bigger[:nmerges] = merges
            merges = bigger
        merges[nmerges, 0], merges[nmerges, 1], merges[nmerges, 2] = a, b, new
        nmerges += 1

        ntouched = 0
        node = phead[p]
        while node != -1:
            w = node_word[node]
            node = node_next[node]
            if wstamp[w] == it:
                continue
            wstamp[w] = it
            st = wstart[w]
            L = wlen[w]
            found = False
            for k in range(L - 1):
                if syms[st + k] == a and syms[st + k + 1] == b:
                    found = True
                    break
            if not found:
                continue
            cnt = wcount[w]
            for k in range(L - 1):  # take the word's pairs out ...
                x, y = syms[st + k], syms[st + k + 1]
                s = _hash_int((x << 32) | y) & np.uint64(pmask)
                while not (pa[pslots[s]] == x and pb[pslots[s]] == y):
                    s = (s + np.uint64(1)) & np.uint64(pmask)
                pcount[pslots[s]] -= cnt
            out = st  # ... merge left to right, in place ...
            k = 0
            while k < L:
                if k < L - 1 and syms[st + k] == a and syms[st + k + 1] == b:
                    syms[out] = new
                    k += 2
                else:
                    syms[out] = syms[st + k]
                    k += 1
                out += 1
            L = out - st
            wlen[w] = L
            for k in range(L - 1):  # ... and put its pairs back
                x, y = syms[st + k], syms[st + k + 1]
                key = (x << 32) | y
                s = _hash_int(key) & np.uint64(pmask)
                while pslots[s] != -1 and not (pa[pslots[s]] == x and pb[pslots[s]] == y):
                    s = (s + np.uint64(1)) & np.uint64(pmask)
                q = pslots[s]
                if q == -1:
                    q = npairs
                    npairs += 1
                    if npairs > pa.shape[0]:
                        pa, pb, pcount = _grow(pa, npairs), _grow(pb, npairs), _grow(pcount, npairs)
                        phead, plastw, ptouched = _grow(phead, npairs), _grow(plastw, npairs), _grow(ptouched, npairs)
                    pa[q], pb[q], pcount[q], phead[q], plastw[q], ptouched[q] = x, y, 0, -1, -1, 0
                    pslots[s] = q
                    if 2 * npairs > pmask:
                        pmask = 2 * pmask + 1
                        pslots = np.full(pmask + 1, -1, dtype=np.int64)
                        for r in range(npairs):
                            s2 = _hash_int((pa[r] << 32) | pb[r]) & np.uint64(pmask)
                            while pslots[s2] != -1:
                                s2 = (s2 + np.uint64(1)) & np.uint64(pmask)
                            pslots[s2] = r
                pcount[q] += cnt
                if x == new or y == new:
                    if plastw[q] != w:
                        nnodes += 1
                        if nnodes > node_word.shape[0]:
                            node_word, node_next = _grow(node_word, nnodes), _grow(node_next, nnodes)
                        node_word[nnodes - 1] = w
                        node_next[nnodes - 1] = phead[q]
                        phead[q] = nnodes - 1
                        plastw[q] = w
                    if ptouched[q] != it:
                        ptouched[q] = it
                        ntouched += 1
                        touched = _grow(touched, ntouched)
                        touched[ntouched - 1] = q
        for j in range(ntouched):
            q = touched[j]
            if pcount[q] > 0:
                if hsize == hc.shape[0]:
                    hc, hk, hp = _grow(hc, hsize + 1), _grow(hk, hsize + 1), _grow(hp, hsize + 1)
                _heap_push(hc, hk, hp, hsize, pcount[q], (pa[q] << 32) | pb[q], q)
                hsize += 1
        progress[0] = nmerges
    return merges[:nmerges], tok_data[:tok_off[n_tok]], tok_off[:n_tok + 1], n_tok
