"""Named sets of benchmark shapes: per op, one or more labelled dims dicts for `OpSpec.example`.

    small   tiny dims, so CI times every variant of every op in seconds
    mid     GPT-2 124M's widths (C=768, NH=12, V=50304) on N = B*T = 1024 rows: a CPU-sized report
    gpt2    GPT-2 124M at its training shape: B=16, T=1024 (N = 16384 rows), C=768, NH=12,
            V=50304 (50257 real tokens), adamw over all 124,475,904 parameters

The dims names are the ones each op spec's `example()` takes (euler_core/ops/*.py): B T C NH V
maxT n_valid for the sequence ops, N C for the row ops, N K M (and bias) for matmul, N for adamw.
Matmul appears once per distinct GPT-2 linear layer (qkv, attention projection, MLP up and down,
the tied lm_head, which has no bias).
"""

from __future__ import annotations

GPT2_PARAMS = 124_475_904  # GPT-2 124M with the vocabulary padded to 50304, as llm.c counts it


def _gpt_shapes(B: int, T: int, C: int, NH: int, V: int, n_valid: int, adamw_n: int,
                linear=("qkv", "attn_proj", "fc", "fc_proj", "lm_head")) -> dict[str, list[tuple[str, dict]]]:
    N = B * T
    linears = {"qkv": {"N": N, "K": C, "M": 3 * C}, "attn_proj": {"N": N, "K": C, "M": C},
               "fc": {"N": N, "K": C, "M": 4 * C}, "fc_proj": {"N": N, "K": 4 * C, "M": C},
               "lm_head": {"N": N, "K": C, "M": V, "bias": False}}
    ce = {"B": B, "T": T, "V": V}
    if n_valid != V:
        ce["n_valid"] = n_valid
    return {
        "embedding": [("wte+wpe", {"B": B, "T": T, "C": C, "V": V, "maxT": T})],
        "layernorm": [("ln", {"N": N, "C": C})],
        "matmul": [(name, linears[name]) for name in linear],
        "attention": [("causal", {"B": B, "T": T, "C": C, "NH": NH})],
        "gelu": [("mlp", {"N": N, "C": 4 * C})],
        "residual": [("stream", {"N": N, "C": C})],
        "crossentropy": [("lm_loss", ce)],
        "adamw": [("params", {"N": adamw_n})],
    }


SHAPE_SETS: dict[str, dict[str, list[tuple[str, dict]]]] = {
    "small": _gpt_shapes(B=2, T=16, C=32, NH=4, V=67, n_valid=61, adamw_n=4096, linear=("qkv", "fc_proj")),
    "mid": _gpt_shapes(B=4, T=256, C=768, NH=12, V=50304, n_valid=50257, adamw_n=7_087_872,
                       linear=("qkv", "fc", "fc_proj")),
    "gpt2": _gpt_shapes(B=16, T=1024, C=768, NH=12, V=50304, n_valid=50257, adamw_n=GPT2_PARAMS),
}


def shapes_for(set_names, op: str) -> list[tuple[str, str, dict]]:
    """[(set name, label, dims)] of `op` in each named set, in order."""
    result = []
    for name in set_names:
        if name not in SHAPE_SETS:
            raise ValueError(f"unknown shape set {name!r}; sets: {', '.join(SHAPE_SETS)}")
        result += [(name, label, dict(dims)) for label, dims in SHAPE_SETS[name].get(op, [])]
    return result


def dims_text(dims: dict) -> str:
    """'N=1024,K=768,M=2304' (the dims in the order given)."""
    return ",".join(f"{k}={v}" for k, v in dims.items())
