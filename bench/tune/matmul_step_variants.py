"""Triton matmul launch configurations to try inside the whole training step, not alone.

    python3 bench/device/step_trace.py --out DIR --batch-sizes 64 --matmul-variant NAME

A GEMM timed alone (matmul_sweep.py) and the same GEMM in the captured step differ: in the step at
B=64 (reports/train-h200/da47edb/) our dW products ran 0.66-0.77x cuBLAS's in the PyTorch reference's
step on the same card, where alone they measured 0.92-0.96x. So candidates are judged where they
run: each name below replaces entries of backends.triton.matmul.CONFIGS for one step_trace run
(`apply`), which then times every kernel of the replayed step.
"""

from dataclasses import replace

from backends.triton import matmul

_DW_C2 = matmul._tile16(128, 128, 3, num_warps=4, ctas_per_sm=2, split_k=16, flatten=False, tma_store=False,
                        separate_db=True)

#: name -> {CONFIGS key: GemmConfig}
VARIANTS = {
    # round 1 (eeba6cc): c_fc's dW without the fused row sum (db by the separate column sum over dy):
    # 583 -> 440 us + 116 us of column sum, taken into CONFIGS; the rest lost or were noise
    "fc_fused_db": {("16", "dW_deep", (3072, 768)): replace(matmul.CONFIGS[("16", "dW_deep", (3072, 768))],
                                                           separate_db=False)},
    # every 128 x 256 dW entry as two 128 x 128 programs of one warpgroup per SM (one's stores
    # overlap the other's main loop), db by the column sum (the fused row sum on one warpgroup
    # measured 0.60x: the dW entries' comment in matmul.py): 2.3 ms a step slower
    "dw128c2": {("16", "dW", None): _DW_C2,
                ("16", "dW_deep", (3072, 768)): _DW_C2,
                ("16", "dW", (768, 3072)): _DW_C2,
                ("16", "dW", (768, 768)): _DW_C2},
    # the classifier's forward, every dx, with a fourth pipeline stage: within the noise
    "lm_s4": {("16", "forward", (50304, 768)): matmul._tile16(128, 256, 4, group_m=32)},
    "dx_s4": {("16", "dx", None): matmul._tile16(128, 256, 4)},
    # round 2 (61e6ab8; none taken): the MLP projection's dW in 7 slices as c_fc's (busy 0.95; its db
    # is separate already): noise-level; the attention projection's without the fused row sum: its dW
    # 148 -> 114 us, + 39 us of column sum
    "fcp_b95": {("16", "dW_deep", (768, 3072)): replace(matmul.CONFIGS[("16", "dW", (768, 3072))], busy=0.95)},
    "attn_sep": {("16", "dW", (768, 768)): replace(matmul.CONFIGS[("16", "dW", (768, 768))], separate_db=True)},
    # qkv's dW as 128 x 256 tiles in 7 slices (54 tiles: 378 items, 95% of three waves), db separate
    # (its fused row sum was what lost in the step at edb9c07): 1.3 ms a step slower
    "qkv256_sep": {("16", "dW_deep", (2304, 768)): replace(matmul._DW, busy=0.95, separate_db=True)},
    # the classifier's forward (K = 768: twelve K steps a tile, so the epilogue weighs) as two 128 x
    # 128 programs of one warpgroup an SM, as the other K = 768 forwards (alone at 16384 / 32768 rows:
    # 1.00x / 0.94x cuBLAS against 1.04x / 0.99x for the 128 x 256 entry): slower in the step
    "lm_c2": {("16", "forward", (50304, 768)): matmul._tile16(128, 128, 3, num_warps=4, ctas_per_sm=2, group_m=32)},
}


def apply(name: str) -> None:
    """Replace the CONFIGS entries of VARIANTS[name] (KeyError names the known variants)."""
    if name not in VARIANTS:
        raise KeyError(f"matmul step variant {name!r}: known are {', '.join(VARIANTS)}")
    matmul.CONFIGS.update(VARIANTS[name])
    print(f"matmul step variant {name}: {VARIANTS[name]}", flush=True)
