"""Every kernel of the triton backend, at every launch configuration the backend uses, compiled for
sm_90 (Hopper, the H200) with Triton's real compiler and no GPU.

The launch configurations are not listed by hand: each op's forward and backward run in record mode
(backends.triton._runtime.recording) at GPT-2 124M's training shapes (C=768, heads of 32, 64 and
128, V=50304) and at short, ragged ones (T=17, tiles shrunk to the problem), in float32, float16 and
bfloat16 (with float32 parameter gradients, as mixed-precision training has them), and every launch
they would make is compiled with the argument types, specialisations (16-byte alignment, ints
divisible by 16) and constexprs Triton's JIT would use. A dtype mismatch
in a tl.dot, a bad constexpr combination, or a tile needing more shared memory than an SM has
fails here, where the interpreter (which checks neither) would pass.
"""

import numpy as np
import pytest

pytest.importorskip("triton", reason="triton not installed (pip install -e '.[gpu]' or triton==3.6.0)")

from backends.triton import _runtime  # noqa: E402
from backends.triton._testing import _np_dtype, recorded_launches  # noqa: E402

#: shared memory one block may use on sm_90 (227 KB)
SM90_MAX_SHARED = 227 * 1024

#: (op, dims): GPT-2 124M training shapes (rows cut down: tiles do not depend on them) and short ones
SHAPES = [
    ("embedding", {"B": 2, "T": 64, "C": 768, "V": 50304}),
    ("layernorm", {"N": 256, "C": 768}),
    ("layernorm", {"N": 17, "C": 36}),
    ("matmul", {"N": 256, "K": 768, "M": 2304}),
    ("matmul", {"N": 256, "K": 768, "M": 50304, "bias": False}),
    ("matmul", {"N": 17, "K": 36, "M": 20}),
    ("matmul", {"N": 1, "K": 768, "M": 2304}),                 # a decoding step: the few-rows tiles
    ("matmul", {"N": 64, "K": 3072, "M": 768}),                # ... split-K over fc_proj's depth
    ("attention", {"B": 1, "T": 1024, "C": 768, "NH": 12}),   # HS 64
    ("attention", {"B": 1, "T": 1024, "C": 768, "NH": 24}),   # HS 32
    ("attention", {"B": 1, "T": 1024, "C": 768, "NH": 6}),    # HS 128
    ("attention", {"B": 1, "T": 17, "C": 36, "NH": 3}),       # ragged T, HS 12
    ("attention", {"B": 1, "T": 1024, "C": 768, "NH": 12}, "ordered"),   # dQ in key-block order: its PTX
    ("attention", {"B": 1, "T": 1024, "C": 768, "NH": 6}, "ordered"),    # waits and publishes (HS 64, 128)
    ("attention", {"B": 1, "T": 17, "C": 36, "NH": 3}, "ordered"),
    ("attention_cached", {"B": 1, "Tn": 1, "Tk": 1024, "C": 768, "NH": 12}),   # decoding, split keys, merged
    ("attention_cached", {"B": 64, "Tn": 1, "Tk": 512, "C": 768, "NH": 12,     # large batch: one split,
                          "lengths": [512] * 63 + [1]}),                         # ragged rows
    ("attention_cached", {"B": 1, "Tn": 1, "Tk": 1024, "C": 768, "NH": 24}),   # HS 32
    ("attention_cached", {"B": 1, "Tn": 1, "Tk": 1024, "C": 768, "NH": 6}),    # HS 128
    ("attention_cached", {"B": 2, "Tn": 5, "Tk": 17, "C": 36, "NH": 3}),       # a chunk of queries, HS 12
    ("gelu", {"N": 256, "C": 3072}),
    ("residual", {"N": 256, "C": 768}),
    ("crossentropy", {"B": 2, "T": 2, "V": 50304, "n_valid": 50257}),
    ("crossentropy", {"B": 2, "T": 3, "V": 37}),
    ("adamw", {"N": 4099}),
    ("sumsq", {"N": 70001}),
    # the fused ops at GPT-2 124M's shapes (their ragged shapes run under the interpreter)
    ("layernorm_residual", {"N": 256, "C": 768}),
    ("matmul_gelu", {"N": 256, "K": 768, "M": 3072}),
    ("matmul_gelu", {"N": 256, "K": 768, "M": 3072}, "epilogue"),    # the GELU and pre from the epilogue
    ("matmul_gelu", {"N": 256, "K": 768, "M": 3072}, "passes"),      # db summed by the GELU backward's pass
    ("gelu_matmul", {"N": 256, "K": 3072, "M": 768}),                 # dx times gelu' in the epilogue (TMA)
    ("classifier_crossentropy", {"N": 256, "C": 768, "V": 50304, "n_valid": 50257}),
    ("crossentropy_onepass", {"B": 2, "T": 2, "V": 50304, "n_valid": 50257}),
    ("crossentropy_onepass", {"B": 2, "T": 3, "V": 37}),
]
DTYPES = ("float32", "float16", "bfloat16")


def _key(e):
    return (e["kernel"].__name__, tuple(e["signature"].items()), tuple(sorted(e["constexprs"].items())),
            str(sorted(e["attrs"].items())), e["num_warps"], e["num_stages"])


def _mixed_adamw_launches(dtype: str) -> list[dict]:
    """adamw as the GPU training step calls it: float32 state, a 16-bit param_copy, the gradient's
    sum of squares for clipping, lr and step as device scalars."""
    from backends.triton import adamw
    from euler_core.ops import OPS
    n = 4099
    state = {k: np.ones(n, np.float32) for k in ("param", "grad", "m", "v")}
    inputs = {**state, "param_copy": np.ones(n, _np_dtype(dtype)), "grad_sumsq": np.ones(1, np.float32)}
    attrs = OPS["adamw"].fill_attrs({"lr": np.ones(1, np.float32), "step": np.ones(1, np.float32), "max_norm": 1.0})
    with _runtime.recording() as rec:
        adamw.forward(inputs, attrs)
    return list(rec)


def _launches():
    seen = {}
    for op, dims, *variant in SHAPES:
        for dtype in DTYPES:
            for e in recorded_launches(op, dims, dtype, variant=variant[0] if variant else None):
                seen.setdefault(_key(e), (op, dtype, e))
    for dtype in ("float16", "bfloat16"):
        for e in _mixed_adamw_launches(dtype):
            seen.setdefault(_key(e), ("adamw", dtype, e))
    return list(seen.values())


LAUNCHES = _launches()


def _id(item):
    op, dtype, e = item
    c = e["constexprs"]
    tiles = "x".join(str(c[k]) for k in sorted(c) if k.startswith("BLOCK"))
    flags = "".join(k[0] for k in ("HAS_BIAS", "ACCUMULATE") if c.get(k))
    return f"{e['kernel'].__name__}-{dtype}-{tiles}{'-' + flags if flags else ''}-w{e['num_warps']}s{e['num_stages']}"


def test_every_kernel_is_recorded():
    names = {e["kernel"].__name__ for _, _, e in LAUNCHES}
    assert {"_attn_forward", "_attn_backward", "_gemm", "_colsum_partial",
            "_colsum_finish", "_ln_forward", "_ln_backward", "_gelu_forward", "_gelu_backward", "_add",
            "_ce_forward", "_ce_backward", "_losses", "_emb_forward", "_emb_dwpe", "_emb_dwte", "_emb_dwte_pieces",
            "_radix_count", "_radix_scatter", "_adamw", "_sumsq_partial", "_sumsq_finish", "_decode_partial",
            "_decode_merge"} <= names


@pytest.mark.parametrize("item", LAUNCHES, ids=[_id(i) for i in LAUNCHES])
def test_compiles_for_sm90(item):
    op, dtype, entry = item
    compiled = _runtime.compile_recorded(entry, arch=90)
    shared = compiled.metadata.shared
    assert shared <= SM90_MAX_SHARED, f"{_id(item)} needs {shared} bytes of shared memory (sm_90 max {SM90_MAX_SHARED})"
    ptx = compiled.asm["ptx"]
    tiles = [entry["constexprs"][k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK") if k in entry["constexprs"]]
    if "dot" in compiled.asm["ttir"] and dtype in ("float16", "bfloat16") and min(tiles) >= 64:
        # GPT-2-sized tiles must reach Hopper's tensor-core instruction (tiny tiles need not)
        assert "wgmma" in ptx, f"{_id(item)}: a {dtype} tl.dot that does not use wgmma on sm_90"
