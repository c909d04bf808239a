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

The check before timing (ops.py) compares each variant with the float64 naive backend, computed on
the host. At GPT-2's training shapes that reference would not fit a host's memory or time (the
float64 logits alone of B=32 are 13 GB, and the naive attention keeps B*NH*T*T probabilities), so
`check_dims` gives the shape a variant is checked at: the timed shape itself up to CHECK_ROWS rows
(every shape of `small` and `mid`), else the same op with the same widths (C, K, M, V, NH, HS) and
dtype on fewer rows: B (then T) or N cut down to CHECK_ROWS rows, and adamw cut to CHECK_PARAMS
elements. Rows are independent in every one of these ops, so the code path checked is the one timed;
what a smaller check cannot see is a fault that needs many rows (an index overflow past 2^31
elements: none of these shapes reaches it).

Attention is checked at T = ATTENTION_CHECK_T = 256 (B = 4), not at 1024: the suite's tolerance
allows an error of 1% of the output's rms, and a causal output's rms falls with T (row t averages t
values), while the first rows' errors keep their own scale. Any FlashAttention kernel in bf16 (P
rounded to bf16 for the tensor-core P@V) then fails at T=1024: a NumPy emulation of exactly that
rounding misses at 3 of 786,432 elements, the same 3 as the triton kernel on the H200, and passes at
T=256 and 257 (the suite's longest case). The kernel's path at T=1024 differs from T=256 only in the
number of key blocks each query block visits. At B=4, T=256 the gradient is still 2.4 million
elements, 300x the suite's largest attention case, and there the same emulation (P and dS rounded
to bf16 before their products, everything else exact: bench/tune/attention_bf16_tail.py, on these
very inputs) misses the bound at 16 elements, the worst by 1.74x; on the H200 the triton kernel
missed at 3 (by at most 1.2x), PyTorch's SDPA backends at 37 to 42. So the benchmark's check lets up
to ten elements in a million exceed the bound by at most 2x (ops.OUTLIERS_PER_MILLION; the record's
message names them): the rounding tail of a correct bf16 kernel, where a wrong kernel is off at many
elements or by far more. (It was one in a million until an H200 run found the triton kernel at 3
outliers, 1.3 per million: the ideal kernel's 6.8 per million showed that bound was too tight.)
"""

from __future__ import annotations

GPT2_PARAMS = 124_475_904  # GPT-2 124M with the vocabulary padded to 50304, as llm.c counts it


CHECK_ROWS = 1024          # rows (B*T or N) of the float64 check at most
CHECK_PARAMS = 1 << 23     # adamw elements of the float64 check at most
ATTENTION_CHECK_T = 256    # the sequence length attention is checked at when its rows are cut


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


def check_dims(op: str, dims: dict) -> dict:
    """The dims `op` is checked at before it is timed at `dims` (see the module docstring)."""
    d = dict(dims)
    if op == "adamw":
        d["N"] = min(d["N"], CHECK_PARAMS)
    elif "N" in d:
        d["N"] = min(d["N"], CHECK_ROWS)
    elif "B" in d and d["B"] * d["T"] > CHECK_ROWS:
        if op == "attention":
            d["T"] = min(d["T"], ATTENTION_CHECK_T)
        d["B"] = max(1, CHECK_ROWS // d["T"])
        if op == "crossentropy":  # T is only more rows here; embedding keeps its positions
            d["T"] = min(d["T"], CHECK_ROWS)
    return d


def dims_text(dims: dict) -> str:
    """'N=1024,K=768,M=2304' (the dims in the order given)."""
    return ",".join(f"{k}={v}" for k, v in dims.items())
