"""Deterministic reductions into parameter gradients: column sums (dbias += sum_n dout[n, :]) and
the split-K GEMM's sum of its float32 slices.

Column sums, two launches. `_colsum_partial`: program (j, g) sums rows g*ROWS .. (g+1)*ROWS of a
BLOCK_C-wide column strip into partial[g, strip] (float32), keeping a (BLOCK_R, BLOCK_C) sum in
registers so that no step waits on a cross-warp reduction; `_colsum_finish`: program j adds the G
partials of its strip, FINISH_G partial rows at a time in a fixed order, to the gradient buffer. No
atomics, so results are bitwise repeatable; the partial buffer is G x M float32 (G <= 128 here),
small next to the input. Layernorm's backward writes its own partials (of dweight and dbias side by
side) and finishes both with one `_colsum_finish`.

Split-K (matmul.py): `_splitk_finish` adds the S float32 slices of a (S, M, N) partial product in
order, then the bias and the previous C when accumulating, and rounds once to C's dtype.
"""

from dataclasses import dataclass

from ._runtime import cdiv, dependent_launch, gdc_wait, kernel, launch, tl, triton, xp_of


@dataclass(frozen=True)
class ColsumConfig:
    """The launch configuration of `_colsum_partial`."""
    groups: int      # at most this many row groups (programs down the rows)
    block_r: int     # rows a step
    block_c: int     # columns a program
    num_warps: int


#: 128 row groups of 32-row steps over 128 columns, 4 warps: on the H200 at 16384 rows (reports/
#: triton-h200/notes-matmul.md, round 2, "colsum"): fc 43.6 us (torch 43.1), qkv 34.2 us (38.9),
#: attn_proj 12.1 us (27.9); 256 groups 55.1 / 43.6 / 16.7 us, 64 groups of 64 x 256 44.8 / 40.0 / 12.7.
COLSUM = ColsumConfig(groups=128, block_r=32, block_c=128, num_warps=4)
# _colsum_finish: 16 columns a program, 256 partial rows a step, 8 warps (H200, layernorm's sweep:
# 3.5 / 4.4 / 6.1 us for 264 / 528 / 1056 partial rows, against 4.1 / 6.0 / 9.5 us at 32 x 128 x 4)
FINISH_C, FINISH_G, FINISH_WARPS = 16, 256, 8


@triton.jit
def row_group_strip(M, ROWS, BLOCK_C: tl.constexpr):
    """Program (j, g) of a column-sum grid (strips, row groups): (g, its strip's columns, their mask
    below M, the group's first row)."""
    g = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    return g, cols, cols < M, g * ROWS


@triton.jit
def strip_block(r0, start, ROWS, N, M, cols, cmask, BLOCK_R: tl.constexpr):
    """(offsets, mask) of the (BLOCK_R, strip) block at row r0 of the row group start..start+ROWS of
    a row-major (N, M) array: _colsum_partial's step, and that of kernels that sum columns the same
    way as they write them (gelu.py's backward_with_colsum)."""
    rows = r0 + tl.arange(0, BLOCK_R)
    mask = ((rows < N) & (rows < start + ROWS))[:, None] & cmask[None, :]
    return rows.to(tl.int64)[:, None] * M + cols[None, :], mask


@kernel
def _colsum_partial(x_ptr, partial_ptr, N, M, ROWS, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    g, cols, cmask, start = row_group_strip(M, ROWS, BLOCK_C)
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)  # reduced over rows once, at the end
    for r0 in range(start, start + ROWS, BLOCK_R):
        offs, mask = strip_block(r0, start, ROWS, N, M, cols, cmask, BLOCK_R)
        acc += tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(partial_ptr + g * M + cols, tl.sum(acc, axis=0), mask=cmask)


@kernel
def _colsum_finish(partial_ptr, out_ptr, out2_ptr, G, M, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr,
                   DEPENDENT: tl.constexpr):
    # program (j, part): columns j*BLOCK_C.. of partial[:, part*M:(part+1)*M] -> out (part 0) or out2
    if DEPENDENT:  # launched before the kernel that wrote the partials finished: wait for it first
        gdc_wait()
    j = tl.program_id(0)
    part = tl.program_id(1)
    cols = j * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < M
    width = M * tl.num_programs(1)
    acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for g0 in range(0, G, BLOCK_G):  # BLOCK_G partial rows at a time, a fixed reduction order
        g = g0 + tl.arange(0, BLOCK_G)
        acc += tl.sum(tl.load(partial_ptr + g[:, None] * width + part * M + cols[None, :],
                              mask=(g < G)[:, None] & cmask[None, :], other=0.0), axis=0)
    if part == 0:
        acc += tl.load(out_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)
    else:
        acc += tl.load(out2_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        tl.store(out2_ptr + cols, acc.to(out2_ptr.dtype.element_ty), mask=cmask)


def groups_for(N: int, groups: int) -> tuple[int, int]:
    """(G, ROWS): N rows cut into G <= groups groups of ROWS rows."""
    G = max(1, min(groups, N))
    rows = cdiv(N, G)
    return cdiv(N, rows), rows


def colsum_into(x, out, xp, config: ColsumConfig = COLSUM):
    """out (M,) += x (N,M).sum(axis=0), accumulated in float32 in a fixed order, with the partial
    sums launched at `config` (bench/tune/matmul_sweep.py passes its candidates)."""
    N, M = x.shape
    G, rows = groups_for(N, config.groups)
    partial = xp.empty((G, M), dtype="float32")
    launch(_colsum_partial, (cdiv(M, config.block_c), G), x, partial, N, M, rows, BLOCK_R=config.block_r,
           BLOCK_C=config.block_c, num_warps=config.num_warps)
    finish_into(partial, out)
    return out


def finish_into(partial, out, out2=None):
    """out (M,) += partial (G, M).sum(axis=0); with out2, partial is (G, 2M) and its second half
    goes to out2 (layernorm's dweight and dbias in one launch). On the GPU it is a programmatic
    dependent launch: it starts while the kernel before it (the one writing the partials) finishes,
    and waits for it on the GPU (gdc_wait) before reading; that kernel may let it start early by
    calling gdc_launch_dependents() (layernorm's backward does, at its start)."""
    parts = 1 if out2 is None else 2
    G, M = partial.shape[0], partial.shape[1] // parts
    dependent = dependent_launch(xp_of(partial))
    launch(_colsum_finish, (cdiv(M, FINISH_C), parts), partial, out, out if out2 is None else out2, G, M,
           BLOCK_G=FINISH_G, BLOCK_C=FINISH_C, DEPENDENT=dependent, num_warps=FINISH_WARPS, launch_pdl=dependent)


@kernel
def _splitk_finish(partial_ptr, c_ptr, bias_ptr, MN, N, S, HAS_BIAS: tl.constexpr, ACCUMULATE: tl.constexpr,
                   BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(partial_ptr + offs, mask=mask, other=0.0)
    for s in range(1, S):
        acc += tl.load(partial_ptr + s * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    if ACCUMULATE:
        acc += tl.load(c_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def splitk_finish_into(partial, c, bias=None, accumulate=False):
    """c (M,N) (+)= sum_s partial[s] (+ bias): the split-K GEMM's slices added in order (float32)."""
    S, M, N = partial.shape
    block = 1024
    launch(_splitk_finish, (cdiv(M * N, block),), partial, c, bias if bias is not None else c, M * N, N, S,
           HAS_BIAS=bias is not None, ACCUMULATE=accumulate, BLOCK=block, num_warps=4)
