"""embedding, triton: a gather forward and a deterministic scatter-add backward.

Forward, one program per position: out[n] = wte[tokens[n]] + wpe[n % T].

Backward. dwpe[t] += sum_b dout[b, t]: one program per position t, summing over b in order.
dwte[tokens[n]] += dout[n] for every n: several positions may hold one token, so this is a
scatter-add. Atomic adds would make the float sums depend on the order threads arrive in (not
bitwise repeatable). Instead the host sorts the positions by (token, position) (one argsort of N
int64 keys), and the first position of each run of equal tokens sums the whole run's rows in order
and adds the sum to its row of dwte: one writer per row, a fixed order, no atomics.
"""

from dataclasses import dataclass

from . import _common
from ._runtime import kernel, launch, next_pow2, tl, xp_of


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
def _emb_dwte(sorted_tokens_ptr, order_ptr, dout_ptr, dwte_ptr, N, C, BLOCK_C: tl.constexpr):
    i = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    tok = tl.load(sorted_tokens_ptr + i)
    prev = tl.load(sorted_tokens_ptr + i - 1, mask=i > 0, other=-1)
    if prev != tok:  # the first of its run: sum the run in order, then add to dwte[tok]
        acc = tl.zeros((BLOCK_C,), dtype=tl.float32)
        j = i
        more = True
        while more:
            src = tl.load(order_ptr + j).to(tl.int64)
            acc += tl.load(dout_ptr + src * C + c, mask=mask, other=0.0).to(tl.float32)
            j += 1
            nxt = tl.load(sorted_tokens_ptr + j, mask=j < N, other=-1)
            more = nxt == tok
        row = dwte_ptr + tok.to(tl.int64) * C + c
        acc += tl.load(row, mask=mask, other=0.0).to(tl.float32)
        tl.store(row, acc.to(dwte_ptr.dtype.element_ty), mask=mask)


@dataclass
class Saved:
    tokens: object  # (B,T) the ids each position read


def _block(C: int) -> int:
    return min(1024, max(16, next_pow2(C)))


def forward(inputs, attrs, out=None):
    tokens, wte, wpe = inputs["tokens"], inputs["wte"], inputs["wpe"]
    _common.check_float("embedding", "wte", wte)
    _common.check_contiguous("embedding", wte=wte, wpe=wpe)
    B, T = tokens.shape
    C = wte.shape[1]
    xp = xp_of(wte)
    tokens = xp.ascontiguousarray(tokens)  # ids are often a view of a token window: copy (B*T ints)
    y = _common.output("embedding", xp, out, (B, T, C), wte.dtype)
    launch(_emb_forward, (B * T,), tokens, wte, wpe, y, T, C, BLOCK_C=_block(C))
    return y, Saved(tokens)


def backward(saved, dout, grads):
    dwte, dwpe = grads["wte"], grads["wpe"]
    _common.check_contiguous("embedding", dout=dout, wte=dwte, wpe=dwpe)
    B, T, C = dout.shape
    N = B * T
    xp = xp_of(dout)
    block = _block(C)
    launch(_emb_dwpe, (T, -(-C // block)), dout, dwpe, B, T, C, BLOCK_C=block)
    flat = saved.tokens.reshape(-1).astype("int64")
    keys = flat * N + xp.arange(N, dtype="int64")        # unique: sorts by token, then position
    order = xp.argsort(keys).astype("int32")              # (N,) positions, grouped by token
    sorted_tokens = xp.ascontiguousarray(flat[order]).astype("int32")
    launch(_emb_dwte, (N, -(-C // block)), sorted_tokens, order, dout, dwte, N, C, BLOCK_C=block)
    return {"wte": dwte, "wpe": dwpe}
