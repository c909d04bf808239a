"""The named shapes every variant is run at, the bad inputs it must reject, and the small shapes of
the finite-difference check.

Each case has a short name that is its test id and its `--case` value. The shapes are awkward on
purpose: T=1, T not a multiple of any block size (17), C not a multiple of 32 (20, 36), B=1, primes,
a longer T where it is cheap (128, 257), a padded vocabulary (n_valid < V), matmul without bias,
|x| up to 10 for GELU, logits of a hundred for cross-entropy. They are small enough that the whole
suite for the naive backend runs in well under a minute on two cores.

A case may `transform` the float64 example inputs (before they are rounded to the tested dtype) to
reach values `OpSpec.example` does not make, and may override attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    dims: dict
    attrs: dict = field(default_factory=dict)
    transform: Callable | None = None  # (inputs, rng) -> inputs, on the float64 example
    note: str = ""
    #: inputs kept in float32 when the tested dtype is 16-bit (mixed precision: adamw's float32 master
    #: state beside its 16-bit param_copy)
    keep_float32: tuple = ()
    zero_grads: tuple = ()  # a multi-output op's outputs whose gradient backward gets as None (zero)
    #: 16-bit dtypes: the stored 16-bit roundings a result passes through at most. The table's rows
    #: (euler_core/numerics.py) are set for one, plus a tensor-core intermediate; each more adds the row
    #: once (worst case: their errors add), so the tolerance is the row times this
    stored_roundings: int = 1


@dataclass(frozen=True)
class DeviceScalar:
    """An attribute passed as a (1,) float32 array on the variant's device (adamw's lr and step in
    a captured step), not as a number."""

    value: float


def _gelu_extreme(inputs, rng):
    x = inputs["x"]
    x = rng.uniform(-10.0, 10.0, size=x.shape)     # tails where tanh saturates
    x.flat[:4] = (-10.0, 10.0, -1e-3, 1e-3)[: x.size]  # both saturated ends and near zero
    x[x == 0] = 0.25
    return {**inputs, "x": x}


def _large_logits(inputs, rng):
    logits = inputs["logits"] * (100.0 / 3.0)      # |logits| ~ 100: exp() overflows unless shifted
    return {**inputs, "logits": logits}


def _all_ignored(inputs, rng):
    return {**inputs, "targets": np.full_like(inputs["targets"], -1)}


def _with_copy(inputs, rng):
    """adamw with a working copy to refresh (filled with other values: it must be overwritten)."""
    return {**inputs, "param_copy": rng.standard_normal(inputs["param"].shape)}


def _with_sumsq(factor):
    """adamw given the gradient's sum of squares: its own (factor 1), or a bad step (inf, nan)."""
    def transform(inputs, rng):
        return {**inputs, "grad_sumsq": np.array([float(np.sum(inputs["grad"] ** 2)) * factor])}
    return transform


def _gelu_tails(inputs, rng):
    return {**inputs, "x": inputs["x"] * 4.0}       # pre = x @ W.T + b reaches |pre| ~ 10: GELU's flat ends
                                                    # (matmul_gelu's weight, mlp's fc_weight)


def _gelu_input_tails(inputs, rng):
    return {**inputs, "x": inputs["x"] * 3.0}       # gelu_matmul's x is the pre-activation: |x| ~ 10


def _large_classifier_logits(inputs, rng):
    # logits = x @ W.T of about 50, the largest past 88 where an unshifted exp() overflows float32;
    # not 100 as crossentropy's case: here the logits come out of a GEMM, whose float32 rounding of
    # |logits| ~ 100 (~1e-5) is already as large as the float32 gradient tolerance
    return {**inputs, "x": inputs["x"] * 15.0}


def _classifier_all_ignored(inputs, rng):
    return {**inputs, "targets": np.full_like(inputs["targets"], -1)}


def _repeated_tokens(inputs, rng):
    tokens = inputs["tokens"].copy()
    tokens[...] = rng.integers(0, 2, size=tokens.shape)  # only tokens 0 and 1: heavy scatter-add collisions
    return {**inputs, "tokens": tokens}


C = Case
#: a linear layer's awkward shapes (matmul's and matmul_residual's; each adds a GPT-2 shape of its own)
_LINEAR = [
    C("small", {"N": 4, "K": 8, "M": 6}),
    C("T1", {"N": 1, "K": 20, "M": 36}),
    C("T17-K36-M20", {"N": 17, "K": 36, "M": 20}),
    C("prime-nobias", {"N": 13, "K": 37, "M": 11, "bias": False}),
    C("T1-nobias", {"N": 1, "K": 5, "M": 3, "bias": False}),
    C("N128-K65-M96", {"N": 128, "K": 65, "M": 96}),
]
CASES: dict[str, list[Case]] = {
    "embedding": [
        C("small", {"B": 2, "T": 5, "C": 8, "V": 11}),
        C("T1", {"B": 1, "T": 1, "C": 20, "V": 7}),
        C("T17-C36", {"B": 2, "T": 17, "C": 36, "V": 50, "maxT": 24}),
        C("prime", {"B": 3, "T": 13, "C": 37, "V": 31}),
        C("repeated-tokens", {"B": 4, "T": 9, "C": 20, "V": 5}, transform=_repeated_tokens),
        C("T128", {"B": 1, "T": 128, "C": 48, "V": 97}),
    ],
    "layernorm": [
        C("small", {"N": 4, "C": 8}),
        C("T1", {"N": 1, "C": 20}),
        C("T17-C36", {"N": 17, "C": 36}),
        C("prime", {"N": 13, "C": 37}),
        C("C768", {"N": 8, "C": 768}),
        C("T257", {"N": 257, "C": 20}),
    ],
    "matmul": _LINEAR + [C("K768-M2304", {"N": 16, "K": 768, "M": 2304}, note="GPT-2 124M's qkv projection")],
    "attention": [
        C("small", {"B": 2, "T": 4, "C": 8, "NH": 2}),
        C("T1", {"B": 1, "T": 1, "C": 8, "NH": 2}),
        C("T17-C36-NH3", {"B": 2, "T": 17, "C": 36, "NH": 3}),
        C("prime-HS5", {"B": 1, "T": 13, "C": 20, "NH": 4}),
        C("NH1", {"B": 2, "T": 5, "C": 24, "NH": 1}),
        C("T128", {"B": 1, "T": 128, "C": 32, "NH": 2}),
        C("T257", {"B": 1, "T": 257, "C": 16, "NH": 2}),
        C("HS64", {"B": 1, "T": 64, "C": 768, "NH": 12}, note="GPT-2 124M's heads"),
    ],
    "gelu": [
        C("small", {"N": 4, "C": 8}),
        C("T1", {"N": 1, "C": 20}),
        C("prime", {"N": 17, "C": 37}),
        C("T257-C65", {"N": 257, "C": 65}),
        C("extreme", {"N": 16, "C": 36}, transform=_gelu_extreme, note="|x| up to 10"),
    ],
    "residual": [
        C("small", {"N": 4, "C": 8}),
        C("T1", {"N": 1, "C": 20}),
        C("prime", {"N": 17, "C": 37}),
        C("T128-C65", {"N": 128, "C": 65}),
    ],
    "crossentropy": [
        C("small", {"B": 2, "T": 4, "V": 10}),
        C("T1", {"B": 1, "T": 1, "V": 7}),
        C("T17-V36", {"B": 2, "T": 17, "V": 36}),
        C("padded-vocab", {"B": 2, "T": 5, "V": 64, "n_valid": 50}, note="n_valid < V"),
        C("large-logits", {"B": 2, "T": 9, "V": 37}, transform=_large_logits, note="|logits| ~ 100"),
        C("all-ignored", {"B": 1, "T": 3, "V": 5}, transform=_all_ignored, note="every target -1"),
        C("V257", {"B": 1, "T": 33, "V": 257, "n_valid": 251}),
    ],
    "adamw": [
        C("small", {"N": 8}),
        C("N1", {"N": 1}),
        C("prime", {"N": 1009}),
        C("N4099", {"N": 4099}),
        C("step1-nodecay", {"N": 37}, attrs={"step": 1, "weight_decay": 0.0}),
        C("clipped", {"N": 64}, attrs={"grad_scale": 0.25, "lr": 3e-2, "step": 100}),
        C("param-copy", {"N": 300}, transform=_with_copy, note="the working copy refreshed in the same pass"),
        C("mixed", {"N": 1031}, transform=_with_copy, keep_float32=("param", "grad", "m", "v"),
          note="float32 state, a 16-bit param_copy (mixed precision)"),
        C("clip-by-norm", {"N": 513}, attrs={"max_norm": 1.0}, transform=_with_sumsq(1.0),
          keep_float32=("grad_sumsq",), note="norm sqrt(grad_sumsq) ~ 23 > max_norm: scaled by 1/23"),
        C("no-clip-below-max", {"N": 65}, attrs={"max_norm": 1e3}, transform=_with_sumsq(1.0),
          keep_float32=("grad_sumsq",)),
        C("bad-step-inf", {"N": 129}, attrs={"max_norm": 1.0}, transform=_with_sumsq(np.inf),
          keep_float32=("grad_sumsq",), note="a non-finite norm: nothing may change"),
        C("bad-step-nan", {"N": 33}, transform=lambda i, r: _with_copy(_with_sumsq(np.nan)(i, r), r),
          keep_float32=("grad_sumsq",), note="NaN norm, no clipping asked: still nothing may change"),
        C("device-scalars", {"N": 257}, attrs={"lr": DeviceScalar(2e-2), "step": DeviceScalar(7)},
          transform=lambda i, r: _with_copy(_with_sumsq(1.0)(i, r), r), keep_float32=("grad_sumsq",),
          note="lr and step as (1,) float32 device arrays, as a captured step passes them"),
    ],
    "sumsq": [
        C("small", {"N": 8}),
        C("N1", {"N": 1}),
        C("prime", {"N": 4099}),
        C("two-slices", {"N": 70001}, note="more than one program's slice in the GPU variants"),
    ],
    # fused ops: the primitives' awkward shapes, plus what only the fusion has
    "layernorm_residual": [
        C("small", {"N": 4, "C": 8}),
        C("T1", {"N": 1, "C": 20}),
        C("T17-C36", {"N": 17, "C": 36}),
        C("prime", {"N": 13, "C": 37}),
        C("C768", {"N": 8, "C": 768}),
        C("T257", {"N": 257, "C": 20}),
        C("no-stream-grad", {"N": 17, "C": 36}, zero_grads=("x",),
          note="dx None: after the last block the stream feeds only ln_f"),
        C("no-b", {"N": 17, "C": 36, "b": False}, note="the stream already holds the sum: x is a itself"),
        C("no-b-no-stream-grad", {"N": 13, "C": 37, "b": False}, zero_grads=("x",),
          note="without b after the last block, whose projection wrote the stream"),
    ],
    "matmul_residual": _LINEAR + [C("K768-M768", {"N": 16, "K": 768, "M": 768},
                                    note="GPT-2 124M's attention projection")],
    "matmul_gelu": [
        C("small", {"N": 4, "K": 8, "M": 6}),
        C("T1", {"N": 1, "K": 20, "M": 36}),
        C("T17-K36-M20", {"N": 17, "K": 36, "M": 20}),
        C("prime-nobias", {"N": 13, "K": 37, "M": 11, "bias": False}),
        C("N128-K65-M96", {"N": 128, "K": 65, "M": 96}),
        C("gelu-tails", {"N": 16, "K": 36, "M": 40}, transform=_gelu_tails, note="|pre| up to ~10"),
        C("K768-M3072", {"N": 16, "K": 768, "M": 3072}, note="GPT-2 124M's c_fc"),
    ],
    "gelu_matmul": [
        C("small", {"N": 4, "K": 8, "M": 6}),
        C("T1", {"N": 1, "K": 36, "M": 20}),
        C("T17-K36-M20", {"N": 17, "K": 36, "M": 20}),
        C("prime-nobias", {"N": 13, "K": 37, "M": 11, "bias": False}),
        C("N128-K96-M65", {"N": 128, "K": 96, "M": 65}),
        C("gelu-tails", {"N": 16, "K": 40, "M": 36}, transform=_gelu_input_tails, note="|x| up to ~10"),
        C("K3072-M768", {"N": 16, "K": 3072, "M": 768}, note="GPT-2 124M's MLP projection"),
    ],
    # M != C in most cases, so that a kernel confusing the two widths is caught
    "mlp": [
        C("small", {"N": 4, "C": 8, "H": 12, "M": 6}),
        C("T1", {"N": 1, "C": 20, "H": 36, "M": 20}),
        C("T17-C36-H40-M20", {"N": 17, "C": 36, "H": 40, "M": 20}),
        C("prime-nobias", {"N": 13, "C": 37, "H": 41, "M": 11, "bias": False}),
        C("N128-C65-H96-M33", {"N": 128, "C": 65, "H": 96, "M": 33}),
        C("gelu-tails", {"N": 16, "C": 36, "H": 40, "M": 36}, transform=_gelu_tails, note="|pre| up to ~10"),
        C("C768-H3072-M768", {"N": 16, "C": 768, "H": 3072, "M": 768}, note="GPT-2 124M's MLP"),
        C("T17-C36-H40-M20-residual", {"N": 17, "C": 36, "H": 40, "M": 20, "residual": True},
          note="out = residual + the MLP"),
        C("prime-nobias-residual", {"N": 13, "C": 37, "H": 41, "M": 11, "bias": False, "residual": True}),
        C("C768-H3072-M768-residual", {"N": 16, "C": 768, "H": 3072, "M": 768, "residual": True},
          note="GPT-2 124M's MLP and the residual add after it"),
    ],
    "classifier_crossentropy": [
        C("small", {"N": 8, "C": 8, "V": 10}),
        C("T1", {"N": 1, "C": 20, "V": 7}),
        C("T17-C36-V37", {"N": 17, "C": 36, "V": 37}),
        C("padded-vocab", {"N": 10, "C": 16, "V": 64, "n_valid": 50}, note="n_valid < V"),
        C("large-logits", {"N": 18, "C": 20, "V": 37}, transform=_large_classifier_logits, note="|logits| ~ 50"),
        C("all-ignored", {"N": 3, "C": 8, "V": 5}, transform=_classifier_all_ignored, note="every target -1"),
        C("V257", {"N": 33, "C": 20, "V": 257, "n_valid": 251}),
        C("C768-V2048", {"N": 16, "C": 768, "V": 2048, "n_valid": 2000}, note="GPT-2's channels"),
    ],
    # forward only (generation with a KV cache): Tn new queries over Tk >= Tn cached keys
    "attention_cached": [
        C("prefill", {"B": 2, "Tn": 5, "Tk": 5, "C": 8, "NH": 2}, note="Tn == Tk: the attention op"),
        C("decode-T1", {"B": 1, "Tn": 1, "Tk": 1, "C": 8, "NH": 2}),
        C("decode", {"B": 2, "Tn": 1, "Tk": 17, "C": 36, "NH": 3}, note="one new token over a cache"),
        C("chunk", {"B": 1, "Tn": 7, "Tk": 20, "C": 20, "NH": 4}, note="several new tokens over a cache"),
        C("T257", {"B": 1, "Tn": 3, "Tk": 257, "C": 16, "NH": 2}),
        C("ragged-decode", {"B": 3, "Tn": 1, "Tk": 70, "C": 24, "NH": 2, "lengths": [70, 9, 1]},
          note="rows of different lengths; NaN keys past each"),
        C("ragged-chunk", {"B": 2, "Tn": 4, "Tk": 100, "C": 20, "NH": 4, "lengths": [4, 90]},
          note="4 new tokens a row over caches of different lengths"),
    ],
}
CASES["crossentropy_onepass"] = CASES["crossentropy"]  # the same math, the gradient given ahead
# mlp in 16 bits stores pre, then h = gelu(pre) of pre as stored (the projection's tensor-core input),
# as the composition (and PyTorch's autocast) does: dproj_weight = dout.T @ h passes through both
# roundings. At GPT-2's case a simulation of exactly that (float32 arithmetic, bf16 storage) leaves 1-2
# of its 2.4M elements at 1.02-1.14x the bf16 row on every seed tried, and at 0.7-0.9x with h made
# from the unrounded pre
CASES["mlp"] = [replace(c, stored_roundings=2) for c in CASES["mlp"]]  # (its residual cases too: below)
# matmul_residual in 16 bits stores the product, then the sum of the stream and the product as stored
# (the composition's arithmetic, euler_core/ops/matmul_residual.py): one rounding more than matmul, and
# mlp with a residual one more than mlp, on the output only. Neither widens the tolerance for it: the
# product's rounding is small beside the sum's own scale (the stream is as large as the product, and
# atol is relative to the output's rms). A simulation of exactly that arithmetic (float32 sums, bf16
# storage) leaves matmul_residual's output at most at 0.50x the bf16 row over 20 seeds of its cases
# (0.16x rounded once), mlp's residual outputs at most at 0.59x over 6 seeds; their gradients are
# mlp's own (dresidual is dout itself)

#: small shapes for the finite-difference check of each op (every input element is perturbed)
GRADCHECK_DIMS: dict[str, dict] = {
    "embedding": {"B": 2, "T": 3, "C": 4, "V": 3},
    "layernorm": {"N": 3, "C": 5},
    "matmul": {"N": 3, "K": 4, "M": 5},
    "attention": {"B": 2, "T": 3, "C": 4, "NH": 2},
    "gelu": {"N": 3, "C": 7},
    "residual": {"N": 2, "C": 3},
    "crossentropy": {"B": 2, "T": 3, "V": 6, "n_valid": 5},
    "layernorm_residual": {"N": 3, "C": 5},
    "matmul_residual": {"N": 3, "K": 4, "M": 5},
    "matmul_gelu": {"N": 3, "K": 4, "M": 5},
    "gelu_matmul": {"N": 3, "K": 4, "M": 5},
    "mlp": {"N": 3, "C": 4, "H": 5, "M": 3, "residual": True},
    "classifier_crossentropy": {"N": 4, "C": 3, "V": 6, "n_valid": 5},
}
GRADCHECK_DIMS["crossentropy_onepass"] = GRADCHECK_DIMS["crossentropy"]


def case_names(op: str) -> list[str]:
    return [c.name for c in CASES[op]]


def get_case(op: str, name: str) -> Case:
    for c in CASES[op]:
        if c.name == name:
            return c
    raise ValueError(f"op {op} has no conformance case {name!r}; its cases: {', '.join(case_names(op))}")


# ---- bad inputs --------------------------------------------------------------------------------
# Each entry: (name, make) where make(inputs, attrs) -> (inputs, attrs) breaks one thing of a valid
# float32 example. The dispatcher (euler_core.kernels.Kernel) must raise ValueError or TypeError
# whose message names the op, before the variant sees the arrays.
def _set(name, value_fn):
    def make(inputs, attrs):
        return {**inputs, name: value_fn(inputs)}, attrs
    return make


def _attr(**changes):
    def make(inputs, attrs):
        return inputs, {**attrs, **changes}
    return make


def _drop(name):
    def make(inputs, attrs):
        return {k: v for k, v in inputs.items() if k != name}, attrs
    return make


def _float64(name):
    return _set(name, lambda i: i[name].astype(np.float64))


BAD_INPUTS: dict[str, list[tuple[str, Callable]]] = {
    "embedding": [
        ("tokens-rank-1", _set("tokens", lambda i: i["tokens"].reshape(-1))),
        ("tokens-float", _set("tokens", lambda i: i["tokens"].astype(np.float32))),
        ("wte-int", _set("wte", lambda i: i["wte"].astype(np.int32))),
        ("wte-rank-3", _set("wte", lambda i: i["wte"][None])),
        ("token-too-large", _set("tokens", lambda i: np.full_like(i["tokens"], i["wte"].shape[0]))),
        ("token-negative", _set("tokens", lambda i: np.full_like(i["tokens"], -1))),
        ("wpe-channels", _set("wpe", lambda i: i["wpe"][:, :-1].copy())),
        ("T-beyond-wpe", _set("wpe", lambda i: i["wpe"][:1].copy())),
        ("dtype-mismatch", _float64("wpe")),
        ("missing-input", _drop("wpe")),
    ],
    "layernorm": [
        ("x-rank-3", _set("x", lambda i: i["x"][None])),
        ("weight-shape", _set("weight", lambda i: i["weight"][:-1].copy())),
        ("bias-rank-2", _set("bias", lambda i: i["bias"][None])),
        ("x-int", _set("x", lambda i: i["x"].astype(np.int64))),
        ("dtype-mismatch", _float64("weight")),
        ("not-an-array", _set("x", lambda i: i["x"].tolist())),
        ("eps-zero", _attr(eps=0.0)),
        ("unknown-attr", _attr(epsilon=1e-5)),
    ],
    "matmul": [
        ("K-mismatch", _set("weight", lambda i: i["weight"][:, :-1].copy())),
        ("bias-shape", _set("bias", lambda i: i["bias"][:-1].copy())),
        ("x-rank-3", _set("x", lambda i: i["x"][None])),
        ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
        ("dtype-mismatch", _float64("weight")),
    ],
    "attention": [
        ("qkv-rank-2", _set("qkv", lambda i: i["qkv"][0])),
        ("n_head-not-dividing-C", _attr(n_head=5)),
        ("n_head-zero", _attr(n_head=0)),
        ("qkv-not-3C", _set("qkv", lambda i: i["qkv"][..., :-1].copy())),
        ("qkv-int", _set("qkv", lambda i: i["qkv"].astype(np.int32))),
        ("n_head-missing", lambda inputs, attrs: (inputs, {k: v for k, v in attrs.items() if k != "n_head"})),
    ],
    "gelu": [
        ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
        ("not-an-array", _set("x", lambda i: i["x"].tolist())),
        ("unknown-input", lambda inputs, attrs: ({**inputs, "y": inputs["x"]}, attrs)),
    ],
    "residual": [
        ("shape-mismatch", _set("b", lambda i: i["b"][:, :-1].copy())),
        ("dtype-mismatch", _float64("b")),
        ("a-int", _set("a", lambda i: i["a"].astype(np.int32))),
    ],
    "crossentropy": [
        ("targets-shape", _set("targets", lambda i: i["targets"][:, :-1].copy())),
        ("targets-float", _set("targets", lambda i: i["targets"].astype(np.float32))),
        ("target-too-large", _set("targets", lambda i: np.full_like(i["targets"], i["logits"].shape[-1]))),
        ("target-below-minus-1", _set("targets", lambda i: np.full_like(i["targets"], -2))),
        ("target-in-padding", lambda inputs, attrs: (
            {**inputs, "targets": np.full_like(inputs["targets"], inputs["logits"].shape[-1] - 1)},
            {**attrs, "n_valid": inputs["logits"].shape[-1] - 1})),
        ("n_valid-too-large", _attr(n_valid=10 ** 6)),
        ("logits-rank-2", _set("logits", lambda i: i["logits"][0])),
        ("logits-int", _set("logits", lambda i: i["logits"].astype(np.int32))),
    ],
    "adamw": [
        ("grad-shape", _set("grad", lambda i: i["grad"][:-1].copy())),
        ("m-dtype", _float64("m")),
        ("v-int", _set("v", lambda i: i["v"].astype(np.int32))),
        ("step-zero", _attr(step=0)),
        ("beta1-one", _attr(beta1=1.0)),
        ("lr-missing", lambda inputs, attrs: (inputs, {k: v for k, v in attrs.items() if k != "lr"})),
        ("param_copy-shape", _set("param_copy", lambda i: i["param"][:-1].copy())),
        ("grad_sumsq-shape", _set("grad_sumsq", lambda i: np.ones(2, np.float32))),
        ("max_norm-without-grad_sumsq", _attr(max_norm=1.0)),
        ("lr-device-scalar-shape", _attr(lr=np.ones(2, np.float32))),
        ("step-fraction", _attr(step=2.5)),
    ],
    "sumsq": [
        ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
    ],
    "layernorm_residual": [
        ("a-rank-3", _set("a", lambda i: i["a"][None])),
        ("b-shape", _set("b", lambda i: i["b"][:, :-1].copy())),
        ("weight-shape", _set("weight", lambda i: i["weight"][:-1].copy())),
        ("bias-rank-2", _set("bias", lambda i: i["bias"][None])),
        ("a-int", _set("a", lambda i: i["a"].astype(np.int64))),
        ("dtype-mismatch", _float64("b")),
        ("missing-input", _drop("a")),  # (b may be left out: the stream then already holds the sum)
        ("eps-zero", _attr(eps=0.0)),
    ],
    "matmul_residual": [
        ("K-mismatch", _set("weight", lambda i: i["weight"][:, :-1].copy())),
        ("bias-shape", _set("bias", lambda i: i["bias"][:-1].copy())),
        ("residual-columns", _set("residual", lambda i: i["residual"][:, :-1].copy())),
        ("residual-rows", _set("residual", lambda i: i["residual"][:-1].copy())),
        ("residual-rank-3", _set("residual", lambda i: i["residual"][None])),
        ("residual-int", _set("residual", lambda i: i["residual"].astype(np.int32))),
        ("residual-dtype", _float64("residual")),
        ("x-rank-3", _set("x", lambda i: i["x"][None])),
        ("dtype-mismatch", _float64("weight")),
        ("missing-input", _drop("residual")),
    ],
    "matmul_gelu": [
        ("K-mismatch", _set("weight", lambda i: i["weight"][:, :-1].copy())),
        ("bias-shape", _set("bias", lambda i: i["bias"][:-1].copy())),
        ("x-rank-3", _set("x", lambda i: i["x"][None])),
        ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
        ("dtype-mismatch", _float64("weight")),
    ],
    "classifier_crossentropy": [
        ("C-mismatch", _set("weight", lambda i: i["weight"][:, :-1].copy())),
        ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
        ("dtype-mismatch", _float64("weight")),
        ("targets-shape", _set("targets", lambda i: i["targets"][:-1].copy())),
        ("targets-rank-2", _set("targets", lambda i: i["targets"][None])),
        ("targets-float", _set("targets", lambda i: i["targets"].astype(np.float32))),
        ("target-too-large", _set("targets", lambda i: np.full_like(i["targets"], i["weight"].shape[0]))),
        ("target-below-minus-1", _set("targets", lambda i: np.full_like(i["targets"], -2))),
        ("target-in-padding", lambda inputs, attrs: (
            {**inputs, "targets": np.full_like(inputs["targets"], inputs["weight"].shape[0] - 1)},
            {**attrs, "n_valid": inputs["weight"].shape[0] - 1})),
        ("n_valid-too-large", _attr(n_valid=10 ** 6)),
        ("dlosses-shape", _set("dlosses", lambda i: i["dlosses"][:-1].copy())),
        ("dlosses-dtype", _float64("dlosses")),
    ],
    "attention_cached": [
        ("q-rank-2", _set("q", lambda i: i["q"][0])),
        ("k-fewer-than-q", _set("k", lambda i: i["k"][:, :1].copy())),
        ("v-shape", _set("v", lambda i: i["v"][:, :-1].copy())),
        ("k-channels", _set("k", lambda i: i["k"][..., :-1].copy())),
        ("n_head-not-dividing-C", _attr(n_head=5)),
        ("dtype-mismatch", _float64("v")),
        ("q-int", _set("q", lambda i: i["q"].astype(np.int32))),
        ("lengths-float", _set("lengths", lambda i: np.full(i["q"].shape[0], 4.0))),
        ("lengths-shape", _set("lengths", lambda i: np.full(i["q"].shape[0] + 1, 4, np.int32))),
        ("lengths-past-cache", _set("lengths", lambda i: np.full(i["q"].shape[0], i["k"].shape[1] + 1, np.int32))),
        ("lengths-under-queries", _set("lengths", lambda i: np.full(i["q"].shape[0], 1, np.int32))),
    ],
}
BAD_INPUTS["gelu_matmul"] = BAD_INPUTS["matmul_gelu"]  # matmul's inputs and checks, as matmul_gelu
BAD_INPUTS["mlp"] = [
    ("C-mismatch", _set("fc_weight", lambda i: i["fc_weight"][:, :-1].copy())),
    ("H-mismatch", _set("proj_weight", lambda i: i["proj_weight"][:, :-1].copy())),
    ("fc_bias-shape", _set("fc_bias", lambda i: i["fc_bias"][:-1].copy())),
    ("proj_bias-shape", _set("proj_bias", lambda i: i["proj_bias"][:-1].copy())),
    ("fc_weight-rank-3", _set("fc_weight", lambda i: i["fc_weight"][None])),
    ("proj_weight-rank-1", _set("proj_weight", lambda i: i["proj_weight"][0].copy())),
    ("fc_bias-rank-2", _set("fc_bias", lambda i: i["fc_bias"][None])),
    ("x-rank-3", _set("x", lambda i: i["x"][None])),
    ("x-int", _set("x", lambda i: i["x"].astype(np.int32))),
    ("fc_weight-dtype", _float64("fc_weight")),
    ("proj_bias-dtype", _float64("proj_bias")),
    ("missing-input", _drop("proj_weight")),
    ("residual-shape", _set("residual", lambda i: i["residual"][:, :-1].copy())),
    ("residual-is-x", _set("residual", lambda i: i["x"].copy())),  # (N,C), not the output's (N,M)
    ("residual-dtype", _float64("residual")),
]
BAD_INPUTS["crossentropy_onepass"] = BAD_INPUTS["crossentropy"] + [
    ("dlosses-shape", _set("dlosses", lambda i: i["dlosses"][:, :-1].copy())),
    ("dlosses-dtype", _float64("dlosses")),
]

#: the valid example that BAD_INPUTS break (float32, or the variant's first dtype)
BAD_INPUT_DIMS: dict[str, dict] = {
    "embedding": {"B": 2, "T": 3, "C": 4, "V": 5},
    "layernorm": {"N": 3, "C": 4},
    "matmul": {"N": 3, "K": 4, "M": 5},
    "attention": {"B": 1, "T": 3, "C": 6, "NH": 2},
    "gelu": {"N": 2, "C": 3},
    "residual": {"N": 2, "C": 3},
    "crossentropy": {"B": 2, "T": 3, "V": 6},
    "adamw": {"N": 5},
    "sumsq": {"N": 5},
    "attention_cached": {"B": 1, "Tn": 2, "Tk": 4, "C": 6, "NH": 2},
    "layernorm_residual": {"N": 3, "C": 4},
    "matmul_residual": {"N": 3, "K": 4, "M": 5},
    "matmul_gelu": {"N": 3, "K": 4, "M": 5},
    "gelu_matmul": {"N": 3, "K": 4, "M": 5},
    "mlp": {"N": 3, "C": 4, "H": 5, "M": 6, "residual": True},
    "classifier_crossentropy": {"N": 4, "C": 3, "V": 6},
}

# crossentropy_onepass is crossentropy with the losses' gradient given ahead: its cases, its checks
BAD_INPUT_DIMS["crossentropy_onepass"] = BAD_INPUT_DIMS["crossentropy"]
