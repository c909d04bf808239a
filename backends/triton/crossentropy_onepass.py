"""crossentropy_onepass, triton: the loss and dlogits from one program per row, in one launch.

One program per row (position), two walks over its logits:

    1. the first n_valid logits in BLOCK_V chunks, each lane keeping its running (max, sum of exp)
       (crossentropy.py's forward loop, `_online_update`): lse, and the loss = lse - z[target];
    2. the whole row again, writing dlogits = dloss * (exp(z - lse) - [v == target]) for v < n_valid,
       0 in the padded columns and on ignored rows (crossentropy.py's backward, per element).

The second walk re-reads a row the first has just read. The plan was that with few rows in flight
at once it would come from L2 (50 MB on the H200): wide programs (32 warps, 8192-wide chunks, two an
SM at most) keep about 264 rows of 100 KB (GPT-2's 50304 bf16 logits) in flight, 26 MB. Measured on
the H200 (reports/train-h200/265192d/onepass-sweep.json, bench/tune/crossentropy_onepass_sweep.py),
it did not pay: at 65536 rows the unfused forward + backward take 5.30 ms, the 32-warp programs
8.15 ms (6.64 with unpipelined loads), 16-warp ones 6.08-8.11 ms; the narrow programs of
crossentropy.py's forward (4 warps, 2048 wide, loads two deep) 4.85 ms, 1.09x the pair (1.00x at
16384 rows). That is CONFIG, and with it the whole step at B=64 ran at 563,168 tokens/s against the
unfused pair's 555,160 in the same run (reports/train-h200/7f334cf), so the op is used by default.
As in crossentropy.py, the chunks wholly below n_valid are read unmasked (16-byte loads; n_valid =
50257 is odd) and the rest masked.

Without dlosses (evaluation) only the first walk runs (crossentropy.py's forward kernel).
"""

from dataclasses import dataclass

from euler_core.ops.crossentropy_onepass import SPEC

from . import _common, crossentropy
from ._runtime import kernel, launch, next_pow2, tl, xp_of
from .residual import copy_into

OP = "crossentropy_onepass"


@dataclass(frozen=True)
class OnePassConfig:
    """The launch of `_ce_onepass`: chunk width (at most; a smaller vocabulary takes the next power
    of two above it), warps a program, the loops' load pipelining."""
    block_v: int
    num_warps: int
    stages: int


CONFIG = OnePassConfig(block_v=2048, num_warps=4, stages=2)


@kernel
def _ce_onepass(logits_ptr, targets_ptr, dlosses_ptr, losses_ptr, dlogits_ptr, V, n_valid,
                BLOCK_V: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * V
    lanes = tl.arange(0, BLOCK_V)
    n_full = n_valid - n_valid % BLOCK_V
    lse, target = crossentropy.row_loss(base, targets_ptr, losses_ptr, row, n_valid, BLOCK_V, STAGES)  # 1.
    # 2. dlogits, the row read again
    dloss = tl.where(target >= 0, tl.load(dlosses_ptr + row).to(tl.float32), 0.0)
    out = dlogits_ptr + row * V
    for v0 in tl.range(0, n_full, BLOCK_V, num_stages=STAGES):
        c = v0 + lanes
        p = tl.exp(tl.load(base + c).to(tl.float32) - lse)
        tl.store(out + c, (dloss * (p - tl.where(c == target, 1.0, 0.0))).to(dlogits_ptr.dtype.element_ty))
    for v0 in range(n_full, V, BLOCK_V):  # the valid tail and the padded columns
        c = v0 + lanes
        real = c < n_valid
        p = tl.exp(tl.load(base + c, mask=real, other=0.0).to(tl.float32) - lse)
        d = tl.where(real, dloss * (p - tl.where(c == target, 1.0, 0.0)), 0.0)
        tl.store(out + c, d.to(dlogits_ptr.dtype.element_ty), mask=c < V)


@dataclass
class Saved:
    dlosses: object  # (B,T) the gradient given ahead (None: an evaluation forward)
    dlogits: object  # (B,T,Vp)


def forward(inputs, attrs, out=None):
    return forward_with(CONFIG, inputs, attrs, out)


def forward_with(cfg: OnePassConfig, inputs, attrs, out=None):
    """The op's forward at another launch configuration (`forward` is this with CONFIG)."""
    logits, targets, dlosses = inputs["logits"], inputs["targets"], inputs.get("dlosses")
    _common.check_float(OP, "logits", logits)
    _common.check_contiguous(OP, logits=logits, dlosses=dlosses)
    if dlosses is None:
        losses, _ = crossentropy.forward({"logits": logits, "targets": targets}, attrs, out)
        return losses, Saved(None, None)
    B, T, V = logits.shape
    n_valid = attrs["n_valid"] or V
    xp = xp_of(logits)
    targets = xp.ascontiguousarray(targets)  # often a view of a token window: copy (B*T ints)
    losses = _common.output(OP, xp, out, (B, T), "float32")
    dlogits = xp.empty_like(logits)
    launch(_ce_onepass, (B * T,), logits, targets, dlosses, losses, dlogits, V, n_valid,
           BLOCK_V=min(cfg.block_v, max(16, next_pow2(V))), STAGES=cfg.stages, num_warps=cfg.num_warps)
    return losses, Saved(dlosses, dlogits)


def backward(saved, grad_output, grads):
    def into_buffer(d):  # the dlogits into grads["logits"], checked as an activation-gradient buffer
        return copy_into(d, _common.grad_buffer(OP, grads, "logits", d, xp_of(d)))
    return SPEC.handed_back(saved.dlosses, grad_output, saved.dlogits, grads, into_buffer)
