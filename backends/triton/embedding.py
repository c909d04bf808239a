"""embedding, triton: a gather forward and a deterministic scatter-add backward, all on the device.

Forward, one program per position: out[n] = wte[tokens[n]] + wpe[n % T].

Backward. dwpe[t] += sum_b dout[b, t]: one program per position t, summing over b in order.
dwte[tokens[n]] += dout[n] for every n: several positions may hold one token, so this is a
scatter-add. Atomic float adds would make the sums depend on the order threads arrive in (not
bitwise repeatable). Instead the positions are sorted by (token, position) on the device, and the
first position of each run of equal tokens sums the whole run's rows in a fixed order and adds the
sum to its row of dwte: one writer per row, a fixed order, no float atomics.

The sort (`sort_by_token`) is a stable LSD radix sort of the N token ids, RADIX_BITS = 8 bits a pass
(2 passes for GPT-2's V = 50304, at most 4 for any V < 2^31), integer work only, no atomics at all, so
nothing in it depends on timing and it can be captured in a CUDA graph (CuPy's argsort, used before,
goes through thrust, which synchronises the stream and allocates). Each pass is two launches over
the N ids cut into at most MAX_BLOCKS blocks of BLOCK ids:

    _radix_count    program b: the histogram of this pass's digit over block b -> counts[b, :]
    _radix_scatter  program b: every id of block b goes to
                        (ids of a smaller digit, all blocks) + (ids of its digit in blocks < b)
                      + (ids of its digit earlier in block b)
                    the first two from `counts` (each program sums the whole small table itself:
                    no scan launch), the last from a running count per digit and a prefix sum over
                    SUB ids at a time (a (SUB, 256) one-hot tile), so equal digits keep their order

The first pass reads the caller's ids (any integer dtype) and takes the positions 0..N-1 as the
values it carries; the last pass leaves the ids sorted (int32) and the positions in that order.
Cost at N = 65536 (B=64, T=1024): 4 launches of 128 programs moving 0.5 MB each; scratch 16 N bytes
plus 128 KB of counts. Expected tens of microseconds on an H200 (bench/device/mixed.sh times it).

The run walk reads RUN_ROWS rows of a run at a time, and a run is cut at every multiple of
RUN_PIECE sorted positions: `_emb_dwte_pieces` sums the pieces that continue a run (one program
each, all in parallel, into a float32 partial per piece), then `_emb_dwte`, for each run, sums its
rows up to the first piece boundary and adds its pieces' partials in order. A frequent token (a few
percent of real text: 12,000 of the 65,536 positions of a B=64 batch of Zipf-like ids) then costs
RUN_PIECE / RUN_ROWS + 12,000 / RUN_PIECE dependent steps instead of 12,000 / RUN_ROWS (on the H200,
whole backward on such ids: 2.6 ms before the pieces, reports/train-h200/first-run/mixed/sort.txt).
The order of the additions is fixed (pieces in order, rows in order within each): bitwise repeatable.
"""

from dataclasses import dataclass

from . import _common
from ._runtime import cdiv, kernel, launch, next_pow2, tl, triton, xp_of

RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
MAX_BLOCKS = 128   # programs per radix pass (one wave on an H200); each then sums <= 128 x 256 counts
SUB = 32           # ids ranked at a time in _radix_scatter: a (SUB, RADIX) int32 one-hot tile
COUNT_ROWS = 16    # rows of the counts table _radix_scatter sums at a time
RUN_ROWS = 8       # rows of a run _emb_dwte adds per step
RUN_PIECE = 256    # a run longer than this is summed in pieces of this many sorted positions, in parallel


@kernel
def _emb_forward(tokens_ptr, wte_ptr, wpe_ptr, out_ptr, T, C, BLOCK_C: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    t = n % T
    cols = tl.arange(0, BLOCK_C)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + cols
        mask = c < C
        tok = tl.load(tokens_ptr + n).to(tl.int64)
        x = tl.load(wte_ptr + tok * C + c, mask=mask, other=0.0).to(tl.float32)
        x += tl.load(wpe_ptr + t * C + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + n * C + c, x.to(out_ptr.dtype.element_ty), mask=mask)


@kernel
def _emb_dwpe(dout_ptr, dwpe_ptr, B, T, C, BLOCK_C: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    acc = tl.load(dwpe_ptr + t * C + c, mask=mask, other=0.0).to(tl.float32)
    for b in range(0, B):
        acc += tl.load(dout_ptr + (b * T + t) * C + c, mask=mask, other=0.0).to(tl.float32)
    tl.store(dwpe_ptr + t * C + c, acc.to(dwpe_ptr.dtype.element_ty), mask=mask)


@kernel
def _radix_count(keys_ptr, counts_ptr, N, shift, BLOCK: tl.constexpr, CHUNK: tl.constexpr,
                 RADIX: tl.constexpr):
    # counts[b, d] = how many ids of block b have digit d ((id >> shift) % RADIX)
    b = tl.program_id(0)
    hist = tl.zeros((RADIX,), dtype=tl.int32)
    for s0 in range(0, BLOCK, CHUNK):
        idx = b * BLOCK + s0 + tl.arange(0, CHUNK)
        m = idx < N
        key = tl.load(keys_ptr + idx, mask=m, other=0).to(tl.int32)
        hist += tl.histogram((key >> shift) & (RADIX - 1), RADIX, mask=m)
    tl.store(counts_ptr + b * RADIX + tl.arange(0, RADIX), hist)


@kernel
def _radix_scatter(keys_ptr, vals_ptr, counts_ptr, keys_out_ptr, vals_out_ptr, N, shift, NBLOCKS,
                   BLOCK: tl.constexpr, SUB: tl.constexpr, RADIX: tl.constexpr, COUNT_ROWS: tl.constexpr,
                   FIRST: tl.constexpr):
    # moves the ids of block b (and the values they carry; FIRST: the values are the positions) to
    # their places in the output of this pass, stably (see the module docstring)
    b = tl.program_id(0)
    bins = tl.arange(0, RADIX)
    total = tl.zeros((RADIX,), dtype=tl.int32)    # ids of each digit, all blocks
    before = tl.zeros((RADIX,), dtype=tl.int32)   # ids of each digit in blocks before b
    for r0 in range(0, NBLOCKS, COUNT_ROWS):
        rows = r0 + tl.arange(0, COUNT_ROWS)
        cnt = tl.load(counts_ptr + rows[:, None] * RADIX + bins[None, :], mask=(rows < NBLOCKS)[:, None], other=0)
        total += tl.sum(cnt, axis=0)
        before += tl.sum(tl.where((rows < b)[:, None], cnt, 0), axis=0)
    place = tl.cumsum(total, axis=0) - total + before  # (RADIX,) where block b's next id of each digit goes
    for s0 in range(0, BLOCK, SUB):
        idx = b * BLOCK + s0 + tl.arange(0, SUB)
        m = idx < N
        key = tl.load(keys_ptr + idx, mask=m, other=0).to(tl.int32)
        digit = tl.where(m, (key >> shift) & (RADIX - 1), RADIX)  # RADIX: no bin (past N)
        onehot = (digit[:, None] == bins[None, :]).to(tl.int32)   # (SUB, RADIX)
        # an id's place: its digit's next place plus the ids of its digit before it in these SUB
        dest = tl.sum(onehot * (place[None, :] + tl.cumsum(onehot, axis=0) - 1), axis=1)
        if FIRST:
            val = idx
        else:
            val = tl.load(vals_ptr + idx, mask=m, other=0)
        tl.store(keys_out_ptr + dest, key, mask=m)
        tl.store(vals_out_ptr + dest, val, mask=m)
        place += tl.sum(onehot, axis=0)


def sort_by_token(tokens, V: int):
    """(sorted ids, positions) of the flat ids `tokens` (N,) in [0, V), both (N,) int32: positions
    in order of (id, position), as a stable sort gives them. Device-side, no host sync."""
    xp = xp_of(tokens)
    N = tokens.size
    block = max(SUB, next_pow2(cdiv(N, MAX_BLOCKS)))
    nblocks = cdiv(N, block)
    passes = max(1, cdiv((V - 1).bit_length(), RADIX_BITS))
    counts = xp.empty((nblocks, RADIX), dtype="int32")
    keys = [xp.empty((N,), dtype="int32") for _ in range(2)]
    vals = [xp.empty((N,), dtype="int32") for _ in range(2)]
    src_keys, src_vals = tokens, keys[1]  # the first pass reads no values (FIRST): any int32 array
    for p in range(passes):
        shift = p * RADIX_BITS
        launch(_radix_count, (nblocks,), src_keys, counts, N, shift, BLOCK=block, CHUNK=min(block, 1024),
               RADIX=RADIX)
        launch(_radix_scatter, (nblocks,), src_keys, src_vals, counts, keys[p % 2], vals[p % 2], N, shift, nblocks,
               BLOCK=block, SUB=SUB, RADIX=RADIX, COUNT_ROWS=COUNT_ROWS, FIRST=p == 0)
        src_keys, src_vals = keys[p % 2], vals[p % 2]
    return src_keys, src_vals


@triton.jit
def _run_rows_sum(sorted_tokens_ptr, order_ptr, dout_ptr, tok, start, stop, N, C, c, mask,
                  BLOCK_C: tl.constexpr, ROWS: tl.constexpr):
    """(BLOCK_C,) float32: the sum over sorted positions start, start+1, ... < stop that still hold
    `tok` (a prefix of the range: runs are contiguous) of their dout rows, ROWS rows a step, in order."""
    acc = tl.zeros((ROWS, BLOCK_C), dtype=tl.float32)
    j = start
    more = True
    while more:
        k = j + tl.arange(0, ROWS)
        in_run = tl.load(sorted_tokens_ptr + k, mask=(k < N) & (k < stop), other=-1) == tok
        src = tl.load(order_ptr + k, mask=in_run, other=0).to(tl.int64)
        acc += tl.load(dout_ptr + src[:, None] * C + c[None, :], mask=in_run[:, None] & mask[None, :],
                       other=0.0).to(tl.float32)
        j += ROWS
        more = tl.sum(in_run.to(tl.int32), axis=0) == ROWS
    return tl.sum(acc, axis=0)


@kernel
def _emb_dwte_pieces(sorted_tokens_ptr, order_ptr, dout_ptr, partial_ptr, N, C, BLOCK_C: tl.constexpr,
                     ROWS: tl.constexpr, PIECE: tl.constexpr):
    # program p: the piece of sorted positions [p*PIECE, (p+1)*PIECE) when a run that began before it
    # goes on through its start: its run's rows in it, summed into partial[p]
    p = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    start = p * PIECE
    tok = tl.load(sorted_tokens_ptr + start)
    prev = tl.load(sorted_tokens_ptr + start - 1, mask=start > 0, other=-1)
    if prev == tok:
        part = _run_rows_sum(sorted_tokens_ptr, order_ptr, dout_ptr, tok, start, start + PIECE, N, C, c, mask,
                             BLOCK_C, ROWS)
        tl.store(partial_ptr + p.to(tl.int64) * C + c, part, mask=mask)


@kernel
def _emb_dwte(sorted_tokens_ptr, order_ptr, dout_ptr, partial_ptr, dwte_ptr, N, C, BLOCK_C: tl.constexpr,
              ROWS: tl.constexpr, PIECE: tl.constexpr):
    # program i, the first sorted position of a run: its rows up to the next piece boundary, then the
    # partial sums of the pieces the run goes on through, in order; added to dwte[tok]
    i = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    tok = tl.load(sorted_tokens_ptr + i)
    prev = tl.load(sorted_tokens_ptr + i - 1, mask=i > 0, other=-1)
    if prev != tok:
        boundary = (i // PIECE + 1) * PIECE
        total = _run_rows_sum(sorted_tokens_ptr, order_ptr, dout_ptr, tok, i, boundary, N, C, c, mask, BLOCK_C, ROWS)
        p = boundary // PIECE
        more = boundary < N
        while more:  # the run goes on past the boundary: take the next piece's partial sum
            more = tl.load(sorted_tokens_ptr + p * PIECE, mask=p * PIECE < N, other=-1) == tok
            total += tl.load(partial_ptr + p.to(tl.int64) * C + c, mask=mask & more, other=0.0)
            p += 1
        row = dwte_ptr + tok.to(tl.int64) * C + c
        total += tl.load(row, mask=mask, other=0.0).to(tl.float32)
        tl.store(row, total.to(dwte_ptr.dtype.element_ty), mask=mask)


@dataclass
class Saved:
    tokens: object  # (B,T) the ids each position read
    n_vocab: int    # V: the ids lie in [0, V)
    n_pos: int      # maxT: the rows of wpe


def _block(C: int) -> int:
    return min(1024, max(16, next_pow2(C)))


def forward(inputs, attrs, out=None):
    tokens, wte, wpe = inputs["tokens"], inputs["wte"], inputs["wpe"]
    _common.check_float("embedding", "wte", wte)
    _common.check_contiguous("embedding", wte=wte, wpe=wpe)
    B, T = tokens.shape
    V, C = wte.shape
    xp = xp_of(wte)
    tokens = xp.ascontiguousarray(tokens)  # ids are often a view of a token window: copy (B*T ints)
    y = _common.output("embedding", xp, out, (B, T, C), wte.dtype)
    launch(_emb_forward, (B * T,), tokens, wte, wpe, y, T, C, BLOCK_C=_block(C))
    return y, Saved(tokens, V, wpe.shape[0])


def backward(saved, dout, grads):
    _common.check_contiguous("embedding", dout=dout)
    B, T, C = dout.shape
    dwte = _common.param_grad("embedding", grads, "wte", (saved.n_vocab, C), dout.dtype)
    dwpe = _common.param_grad("embedding", grads, "wpe", (saved.n_pos, C), dout.dtype)
    N = B * T
    block = _block(C)
    launch(_emb_dwpe, (T, cdiv(C, block)), dout, dwpe, B, T, C, BLOCK_C=block)
    sorted_tokens, order = sort_by_token(saved.tokens.reshape(-1), saved.n_vocab)
    pieces = cdiv(N, RUN_PIECE)
    partial = xp_of(dout).empty((pieces, C), dtype="float32")  # written only where a run crosses a piece's start
    launch(_emb_dwte_pieces, (pieces, cdiv(C, block)), sorted_tokens, order, dout, partial, N, C, BLOCK_C=block,
           ROWS=RUN_ROWS, PIECE=RUN_PIECE)
    launch(_emb_dwte, (N, cdiv(C, block)), sorted_tokens, order, dout, partial, dwte, N, C, BLOCK_C=block,
           ROWS=RUN_ROWS, PIECE=RUN_PIECE)
    return {"wte": dwte, "wpe": dwpe}
