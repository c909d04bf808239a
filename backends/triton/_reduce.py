"""Column sums that accumulate into a parameter gradient, deterministically: dbias += sum_n dout[n, :].

Two launches. `_colsum_partial`: program (j, g) sums rows g*ROWS .. (g+1)*ROWS of a BLOCK_C-wide
column strip into partial[g, strip] (float32); `_colsum_finish`: program j adds the G partials of its
strip, in order, to the gradient buffer. No atomics, so results are bitwise repeatable; the partial
buffer is G x M float32 (G <= 256), small next to the input. Layernorm's backward writes its own
partials (of dweight and dbias) and finishes with `_colsum_finish` too.
"""

from ._runtime import cdiv, kernel, launch, tl

GROUPS = 256     # at most this many row groups: enough programs to fill an H200 (132 SMs)
BLOCK_C = 128    # columns per program


@kernel
def _colsum_partial(x_ptr, partial_ptr, N, M, ROWS, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    j = tl.program_id(0)
    g = tl.program_id(1)
    cols = j * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < M
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    start = g * ROWS
    for r0 in range(start, start + ROWS, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        rmask = (rows < N) & (rows < start + ROWS)
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * M + cols[None, :],
                    mask=rmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x, axis=0)
    tl.store(partial_ptr + g * M + cols, acc, mask=cmask)


@kernel
def _colsum_finish(partial_ptr, out_ptr, G, M, BLOCK_C: tl.constexpr):
    j = tl.program_id(0)
    cols = j * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < M
    acc = tl.load(out_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for g in range(0, G):
        acc += tl.load(partial_ptr + g * M + cols, mask=cmask, other=0.0)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


def groups_for(N: int) -> tuple[int, int]:
    """(G, ROWS): N rows cut into G groups of ROWS rows."""
    G = max(1, min(GROUPS, N))
    rows = cdiv(N, G)
    return cdiv(N, rows), rows


def colsum_into(x, out, xp):
    """out (M,) += x (N,M).sum(axis=0), accumulated in float32 in a fixed order."""
    N, M = x.shape
    G, rows = groups_for(N)
    partial = xp.empty((G, M), dtype="float32")
    block_r = 32
    launch(_colsum_partial, (cdiv(M, BLOCK_C), G), x, partial, N, M, rows, BLOCK_R=block_r, BLOCK_C=BLOCK_C)
    finish_into(partial, out)
    return out


def finish_into(partial, out):
    G, M = partial.shape
    launch(_colsum_finish, (cdiv(M, BLOCK_C),), partial, out, G, M, BLOCK_C=BLOCK_C)
