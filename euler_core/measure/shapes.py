"""Named sets of benchmark shapes: per op, one or more labelled dims dicts for `OpSpec.example`.

    small   tiny dims, so CI times every variant of every op in seconds
    mid     GPT-2 124M's widths (C=768, NH=12, V=50304) on N = B*T = 1024 rows: a CPU-sized report
    gpt2    GPT-2 124M at its training shape: B=16, T=1024 (N = 16384 rows), C=768, NH=12,
            V=50304 (50257 real tokens), adamw over all 124,475,904 parameters
    gpt2-b32  the same at B=32 (N = 32768 rows), without adamw (its size does not depend on B)

The dims names are the ones each op spec's `example()` takes (euler_core/ops/*.py): B T C NH V
maxT n_valid for the sequence ops, N C for the row ops, N K M (and bias) for matmul, N for adamw.
Matmul appears once per distinct GPT-2 linear layer (qkv, attention projection, MLP up and down,
the tied lm_head, which has no bias).

The check before timing (ops.py) compares each variant with the float64 naive reference on the very
inputs it is then timed on, so a kernel whose launch configuration depends on the shape (a split-K
count chosen from N, a tile from the row width) is checked with the configuration it is timed with.
For a CUDA variant the reference runs on the GPU; on the host it would not fit at GPT-2's training
shapes (the float64 logits alone of B=32 are 13 GB, and the naive attention keeps B*NH*T*T
probabilities). A CPU variant's reference runs on the host, so CPU variants are benchmarked only up
to HOST_ROWS rows (B*T or N) and adamw up to HOST_PARAMS elements: every shape of `small` and `mid`
(`host_reference_refusal` says why a larger one is skipped).

At millions of elements a correct bf16 kernel's rounding puts a few elements past the suite's
per-element bound, which is exact at the suite's sizes. Attention shows it most: the tolerance
allows an error of 1% of the output's rms, a causal output's rms falls with T (row t averages t
values), while the first rows' errors keep their own scale. A NumPy emulation of a FlashAttention
kernel in bf16 (P and dS rounded to bf16 before their tensor-core products, everything else exact:
bench/tune/attention_bf16_tail.py) misses the bound at 3 of 786,432 elements at B=1, T=1024, and at
16 elements (the worst by 1.74x) of the 2.4 million of B=4, T=256's gradient; on the H200 the triton
kernel missed at 3 (by at most 1.2x), PyTorch's SDPA backends at 37 to 42. Checked at the whole
timed shape (B=16 and 32, T=1024: 37.7 and 75.5 million elements of dqkv, reference on the GPU;
reports/triton-h200/i15-configs/log.txt), the triton kernel missed at 3.9 and 3.5 in a million (by
at most 2.4x), PyTorch's cuDNN SDPA at 14.2 and 11.4 (by up to 4.5x), its memory-efficient one at
21.4 and 18.2. So the benchmark's check lets up to 25 elements in a million exceed the bound by at
most 5x (ops.OUTLIERS_PER_MILLION, ops.OUTLIER_FACTOR; the record's message names them): the
rounding tail of a correct bf16 kernel, cuDNN's included, where a wrong kernel is off at many
elements or by far more. (It was one in a million, then ten by 2x: each widened by a measured
correct kernel, never to let a kernel of ours through that the industry's reference would fail.)
"""

from __future__ import annotations

GPT2_PARAMS = 124_475_904  # GPT-2 124M with the vocabulary padded to 50304, as llm.c counts it


HOST_ROWS = 1024           # rows (B*T or N) a CPU variant is checked, and so timed, at most
HOST_PARAMS = 1 << 23      # adamw elements likewise


def _gpt_shapes(B: int, T: int, C: int, NH: int, V: int, n_valid: int, adamw_n: int | None,
                linear=("qkv", "attn_proj", "fc", "fc_proj", "lm_head")) -> dict[str, list[tuple[str, dict]]]:
    N = B * T
    linears = {"qkv": {"N": N, "K": C, "M": 3 * C}, "attn_proj": {"N": N, "K": C, "M": C},
               "fc": {"N": N, "K": C, "M": 4 * C}, "fc_proj": {"N": N, "K": 4 * C, "M": C},
               "lm_head": {"N": N, "K": C, "M": V, "bias": False}}
    ce = {"B": B, "T": T, "V": V}
    if n_valid != V:
        ce["n_valid"] = n_valid
    shapes = {
        "embedding": [("wte+wpe", {"B": B, "T": T, "C": C, "V": V, "maxT": T})],
        "layernorm": [("ln", {"N": N, "C": C})],
        "matmul": [(name, linears[name]) for name in linear],
        "attention": [("causal", {"B": B, "T": T, "C": C, "NH": NH})],
        "gelu": [("mlp", {"N": N, "C": 4 * C})],
        "residual": [("stream", {"N": N, "C": C})],
        "crossentropy": [("lm_loss", ce)],
    }
    if adamw_n is not None:
        shapes["adamw"] = [("params", {"N": adamw_n})]
    return shapes


SHAPE_SETS: dict[str, dict[str, list[tuple[str, dict]]]] = {
    "small": _gpt_shapes(B=2, T=16, C=32, NH=4, V=67, n_valid=61, adamw_n=4096, linear=("qkv", "fc_proj")),
    "mid": _gpt_shapes(B=4, T=256, C=768, NH=12, V=50304, n_valid=50257, adamw_n=7_087_872,
                       linear=("qkv", "fc", "fc_proj")),
    "gpt2": _gpt_shapes(B=16, T=1024, C=768, NH=12, V=50304, n_valid=50257, adamw_n=GPT2_PARAMS),
    "gpt2-b32": _gpt_shapes(B=32, T=1024, C=768, NH=12, V=50304, n_valid=50257, adamw_n=None),
}


def shapes_for(set_names, op: str) -> list[tuple[str, str, dict]]:
    """[(set name, label, dims)] of `op` in each named set, in order."""
    result = []
    for name in set_names:
        if name not in SHAPE_SETS:
            raise ValueError(f"unknown shape set {name!r}; sets: {', '.join(SHAPE_SETS)}")
        result += [(name, label, dict(dims)) for label, dims in SHAPE_SETS[name].get(op, [])]
    return result


def host_reference_refusal(op: str, dims: dict) -> str | None:
    """Why a CPU variant is not benchmarked at `dims` (its float64 reference on the host would be too
    large: see the module docstring), or None when it is."""
    if op == "adamw":
        size, limit, what = dims["N"], HOST_PARAMS, "elements"
    else:
        size, limit, what = dims.get("N", dims.get("B", 1) * dims.get("T", 1)), HOST_ROWS, "rows"
    if size <= limit:
        return None
    return (f"a CPU variant is benchmarked only where its float64 reference on the host is affordable: "
            f"at most {limit} {what} (shapes small and mid), this shape has {size}")


def dims_text(dims: dict) -> str:
    """'N=1024,K=768,M=2304' (the dims in the order given)."""
    return ",".join(f"{k}={v}" for k, v in dims.items())
