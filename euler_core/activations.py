"""The model's map of memory: every activation of one training step at one (B, T), allocated once.

llm.c's `ActivationTensors` is the model for this: one list of named buffers with their shapes, so a
reader sees the whole step's memory in one place, and a CUDA graph, which bakes addresses in, can
replay the step over and over. Shapes use the same letters everywhere: L layers, B batch, T time,
C channels, N = B*T rows, Vp the padded vocabulary.

Kept for the backward (one slice per layer, in the activation dtype):

    ln1       (L, N, C)    ln_1's output, c_attn's input (layer 0's from the first layernorm,
                           layer l's from the end of layer l-1: add and norm are one step)
    qkv       (L, N, 3C)   c_attn's output, attention's input
    atty      (L, N, C)    attention's output, c_proj's input
    res2      (L, N, C)    the residual stream after attention (ln_2's input)
    ln2       (L, N, C)    ln_2's output, c_fc's input
    fch       (L, N, 4C)   c_fc's output, the GELU's input (not kept when matmul_gelu is fused:
                           the fused op keeps gelu'(pre) instead; nor when mlp is: it keeps pre)
    fch_gelu  (L, N, 4C)   the GELU's output, the MLP projection's input (with the plan's
                           recompute_gelu, one (N, 4C) buffer among the scratch instead; none
                           when gelu_matmul or mlp is fused: the op keeps it)
    res3      (L, N, C)    the residual stream after the MLP (layer l+1's input)
    encoded   (N, C)       the embedding's output, the stream entering layer 0
    lnf       (N, C)       ln_f's output, the classifier's input
    logits    (N, Vp)      the classifier's output (only when it is not fused with the loss)
    losses    (N,)         the loss at each position (float32; float64 for a float64 model)

Scratch, reused by every layer (the forward's projections feed the residual add at once; the
backward's activation gradients flow through one layer at a time):

    fch_gelu  (N, 4C)      only with recompute_gelu: the GELU output of the layer at hand, remade
                           from fch[l] in the backward just before the MLP projection's backward
                           reads it (llm.c's recompute): one GELU forward more a layer for 4C values
                           a row a layer less (2.2 GB of GPT-2 124M at B=32 in bf16)
    proj      (N, C)       c_proj's / the MLP projection's output (none with the plan's projections_add:
                           both projections then write the stream, res2 and res3, themselves)
    dstream   (2, N, C)    the residual stream's gradient, two buffers used in turn
    dnorm     (N, C)       the gradient of a layernorm's output
    dlnin     (N, C)       a layernorm backward's dx
    datt      (N, C)       c_proj backward's dx
    dqkv      (N, 3C)      attention backward's dqkv
    dfch_gelu (N, 4C)      the MLP projection backward's dx (none with gelu_matmul or mlp: it is never written)
    dfch      (N, 4C)      the GELU backward's dx (gelu_matmul's dx, when fused; none with mlp, whose
                           backward goes from the MLP's output gradient to its input's, into dnorm,
                           nor with matmul_gelu, whose backward forms dpre itself)
    dlogits   (N, Vp)      the loss backward's dlogits (only when neither the classifier nor the loss
                           is fused: crossentropy_onepass keeps its own)

Kernels keep small saved values of their own (a layernorm's mean and rstd, attention's logsumexp):
they allocate them from CuPy's pool, which a captured step gives a private pool (euler_core/graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import MIXED, parameter_layout
from .device import storage_dtype


@dataclass(frozen=True)
class MemoryPlan:
    """What shapes the arena besides (B, T): which fused ops the model runs (each keeps its own
    values instead of the arena's) and whether the GELU output is remade in the backward."""

    fused_classifier: bool = False  # classifier_crossentropy: no (N, Vp) logits or dlogits
    fused_gelu: bool = False        # matmul_gelu: no pre-activation fch (the op keeps pre) and no dfch
    recompute_gelu: bool = False    # one fch_gelu for all layers, remade in the backward
    fused_loss: bool = False        # crossentropy_onepass (unfused classifier): the op keeps dlogits
    gelu_in_proj: bool = False      # gelu_matmul: no fch_gelu (the op keeps it) and no dfch_gelu
    fused_mlp: bool = False         # mlp: none of fch, fch_gelu, dfch_gelu, dfch (the op keeps pre and h)
    projections_add: bool = False   # both projections add themselves to the stream (matmul_residual, and
                                    # mlp's residual or matmul_residual for the MLP's): no proj scratch

    def __post_init__(self):
        fusions = [op for fused, op in ((self.fused_mlp, "mlp"), (self.fused_gelu, "matmul_gelu"),
                                        (self.gelu_in_proj, "gelu_matmul")) if fused]
        if self.recompute_gelu and fusions:
            op = fusions[0]
            raise ValueError(f"recompute: the GELU is recomputed from the unfused c_fc output, but the selection "
                             f"fuses {op}, which keeps its own output for the backward (use one or the other: "
                             f"leave out --recompute, or select {op}=none)")
        if len(fusions) > 1:
            raise ValueError("the GELU is fused into one op at most: the whole MLP (mlp), c_fc (matmul_gelu) or "
                             f"the MLP projection (gelu_matmul); this plan fuses {' and '.join(fusions)}")


def layout(L: int, N: int, C: int, Vp: int, plan: MemoryPlan) -> list[tuple[str, tuple]]:
    """(name, shape) of every buffer in the activation dtype, in arena order."""
    fch = [] if plan.fused_gelu or plan.fused_mlp else [("fch", (L, N, 4 * C))]
    kept_gelu = [] if plan.recompute_gelu or plan.gelu_in_proj or plan.fused_mlp else [("fch_gelu", (L, N, 4 * C))]
    per_layer = [("ln1", (L, N, C)), ("qkv", (L, N, 3 * C)), ("atty", (L, N, C)), ("res2", (L, N, C)),
                 ("ln2", (L, N, C))] + fch + kept_gelu + [("res3", (L, N, C))]
    once = [("encoded", (N, C)), ("lnf", (N, C))] + ([] if plan.fused_classifier else [("logits", (N, Vp))])
    scratch = ([("fch_gelu", (N, 4 * C))] if plan.recompute_gelu else []) + \
              ([] if plan.projections_add else [("proj", (N, C))]) + \
              [("dstream", (2, N, C)), ("dnorm", (N, C)), ("dlnin", (N, C)), ("datt", (N, C)),
               ("dqkv", (N, 3 * C))] + ([] if plan.gelu_in_proj or plan.fused_mlp else [("dfch_gelu", (N, 4 * C))]) + \
              ([] if plan.fused_mlp or plan.fused_gelu else [("dfch", (N, 4 * C))]) + \
              ([] if plan.fused_classifier or plan.fused_loss else [("dlogits", (N, Vp))])
    return per_layer + once + scratch


def arena_bytes(L: int, N: int, C: int, Vp: int, dtype: str, plan: MemoryPlan) -> int:
    """Bytes of the arena (activations and scratch, not the kernels' own saved values)."""
    item = np.dtype(storage_dtype(dtype)).itemsize
    elems = sum(int(np.prod(s)) for _, s in layout(L, N, C, Vp, plan))
    loss_item = 8 if dtype == "float64" else 4
    return elems * item + N * loss_item


def step_bytes(config, B: int, T: int, dtype: str, plan: MemoryPlan) -> dict:
    """About how many bytes a training step of `config` at (B, T) needs on the device: the weights'
    state (master, working copy, gradients, AdamW's m and v), the arena, and the kernels' own saved
    values (attention keeps a (N,C) rounding residual and a logsumexp per head in 16-bit dtypes, a
    layernorm its mean and rstd; matmul_gelu gelu'(pre), gelu_matmul the GELU output, mlp pre and
    the GELU output, the fused classifier its chunk buffer), with 10% for the kernels' scratch. Used
    to say which batch fits."""
    n = sum(int(np.prod(s)) for _, s in parameter_layout(config))
    master = 8 if dtype == "float64" else 4
    weights = n * (master * 4 + (np.dtype(storage_dtype(dtype)).itemsize if dtype in MIXED else 0))
    N, C, L = B * T, config.n_embd, config.n_layer
    arena = arena_bytes(L, N, C, config.padded_vocab_size, dtype, plan)
    item = np.dtype(storage_dtype(dtype)).itemsize
    saved = L * N * (C * item + config.n_head * 4) + (2 * L + 1) * N * 8
    if plan.fused_gelu or plan.gelu_in_proj:  # matmul_gelu keeps gelu'(pre) (N,4C) a layer where the arena
        saved += L * N * 4 * C * item          # would keep pre; gelu_matmul the GELU output, where it would
    if plan.fused_mlp:  # mlp keeps pre and the GELU output, two (N,4C) a layer, where the arena would
        saved += 2 * L * N * 4 * C * item
    if plan.fused_loss:  # crossentropy_onepass keeps dlogits (N, Vp) where the arena would
        saved += N * config.padded_vocab_size * item
    if plan.fused_classifier:  # its chunk of logits in x's dtype (<= 1 GiB), float32 dW and its dx (N,C)
        saved += min(2**30, N * config.padded_vocab_size * item) + config.padded_vocab_size * C * 4 + N * C * item
    return {"weights": weights, "arena": arena, "saved": saved, "total": int(1.1 * (weights + arena + saved))}


def largest_batch(config, T: int, dtype: str, plan: MemoryPlan, device_bytes: int) -> int:
    """The largest batch size whose step_bytes fit in `device_bytes` (0 if not even B=1)."""
    def fits(B):
        return step_bytes(config, B, T, dtype, plan)["total"] <= device_bytes
    lo, hi = 0, 1
    while fits(hi):  # step_bytes grows with B: double, then bisect
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@dataclass
class Activations:
    """The buffers of `layout`, as views of one flat array (see the module docstring)."""

    B: int
    T: int
    views: dict
    flat: object
    losses: object

    @classmethod
    def allocate(cls, xp, config, B: int, T: int, dtype: str, plan: MemoryPlan):
        N, C = B * T, config.n_embd
        shapes = layout(config.n_layer, N, C, config.padded_vocab_size, plan)
        flat = xp.empty(sum(int(np.prod(s)) for _, s in shapes), dtype=storage_dtype(dtype))
        views, offset = {}, 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            views[name] = flat[offset:offset + size].reshape(shape)
            offset += size
        losses = xp.empty(N, dtype="float64" if dtype == "float64" else "float32")
        return cls(B, T, views, flat, losses)

    def __getattr__(self, name):
        views = self.__dict__.get("views", {})
        if name in views:
            return views[name]
        raise AttributeError(name)

    def has(self, name: str) -> bool:
        return name in self.views

    def describe(self) -> str:
        """The map as a table: name, shape, MiB."""
        item = self.flat.dtype.itemsize
        rows = [f"{name:<10} {str(tuple(v.shape)):<22} {v.size * item / 2**20:9.1f} MiB" for name, v in self.views.items()]
        rows.append(f"{'losses':<10} {str(tuple(self.losses.shape)):<22} {self.losses.nbytes / 2**20:9.1f} MiB")
        total = self.flat.nbytes + self.losses.nbytes
        return "\n".join(rows + [f"{'total':<10} {'':<22} {total / 2**20:9.1f} MiB"])
