"""How the fused ops' 16-bit storage choices meet the conformance suite's tolerance, emulated in
NumPy (no GPU): the numbers behind backends/triton/matmul_gelu.py and classifier_crossentropy.py.

For every conformance case of the op, seeds 0..S-1, the inputs exactly as the suite makes them
(rounded to the dtype) and its float64 naive reference; each storage choice is emulated with
float32 GEMM accumulation (float64 products rounded to float32) and roundings to the dtype where
the kernels round. Printed: the worst |err| / allowed over the seeds per case and output (> 1 fails
the check, conformance/tolerances.py).

    matmul_gelu (what the backward multiplies dout by, the product rounded to the dtype as A):
      g_bf16    gelu'(pre) saved in bf16 (the first H200 run: 3 elements of K768-M3072's dweight failed)
      g_fp16    gelu'(pre) saved in float16 (the kernel now)
      g_fp32    gelu'(pre) in float32 (the bound: only the product is rounded)
      composed  pre rounded to the dtype, gelu' of it in float32 (the unfused matmul + gelu)
    classifier_crossentropy (what the loss and dlogits are made from):
      fp32      float32 logits (the first kernel)
      bf16      logits rounded to the dtype, the loss from float32 statistics
      shifted   logits minus their 256-column tile's row max, rounded to the dtype (the kernel now)
      composed  logits rounded to the dtype, everything from them (the unfused matmul + crossentropy)

    .venv/bin/python bench/fused_precision.py [seeds=12] [dtype=bfloat16]      (~20 s at 12 seeds)
"""

from __future__ import annotations

import sys

import numpy as np

from conformance.arrays import np_dtype
from conformance.cases import CASES
from conformance.checks import CaseContext
from conformance.tolerances import tolerance
from euler_core.registry import Variant

TILE = 256  # the classifier GEMM's BLOCK_N at GPT-2's shapes (smaller vocabularies: one tile)


def rounder(dtype):
    dt = np_dtype(dtype)
    return lambda a: np.asarray(a, np.float32).astype(dt).astype(np.float64)


r32 = rounder("float32")


def gelu_grad(z):
    u = 0.7978845608028654 * (z + 0.044715 * z ** 3)
    s = 1 / (1 + np.exp(-2 * u))
    return s + 2 * z * s * (1 - s) * 0.7978845608028654 * (1 + 3 * 0.044715 * z * z)


def worst_ratio(got, ref, tol) -> float:
    scale = max(float(np.sqrt(np.mean(ref * ref))), 1e-300)
    return float(np.max(np.abs(got - ref) / (tol.rtol * np.abs(ref) + tol.atol * scale)))


def matmul_gelu_modes(dtype):
    r16 = rounder(dtype)
    return {"g_bf16": lambda pre: rounder("bfloat16")(gelu_grad(pre)), "g_fp16": lambda pre: rounder("float16")(gelu_grad(pre)),
            "g_fp32": lambda pre: r32(gelu_grad(pre)), "composed": lambda pre: r32(gelu_grad(r16(pre)))}


def matmul_gelu_case(inputs, dout, dtype, mode):
    r16 = rounder(dtype)
    x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
    pre = r32(x @ w.T + (0 if b is None else b))
    dpre = r16(dout * matmul_gelu_modes(dtype)[mode](pre))
    grads = {"x": r16(dpre @ w), "weight": r32(dpre.T @ x)}
    if b is not None:
        grads["bias"] = r32(dpre.sum(axis=0))
    return {}, grads


def _lse(z, n_valid):
    top = z[:, :n_valid].max(axis=1, keepdims=True)
    return top + np.log(np.exp(z[:, :n_valid] - top).sum(axis=1, keepdims=True))


def classifier_case(inputs, dout, dtype, mode):
    r16 = rounder(dtype)
    x, w, t, dl, n_valid = inputs["x"], inputs["weight"], inputs["targets"], inputs["dlosses"], inputs["n_valid"]
    z = r32(x @ w.T)
    N, V = z.shape
    if mode == "fp32":
        stored = z
    elif mode in ("bf16", "composed"):
        stored = r16(z)
    else:  # shifted: z minus its tile's row max over the valid columns, rounded, the max added back
        shift = np.zeros_like(z)
        tile = min(TILE, max(16, 1 << (V - 1).bit_length()))
        for j in range(0, V, tile):
            if j < n_valid:
                shift[:, j:j + tile] = z[:, j:min(j + tile, n_valid)].max(axis=1, keepdims=True)
        stored = r16(z - shift) + shift
    source = stored if mode == "composed" else z  # where the loss comes from
    lse = _lse(source, n_valid)
    valid = t >= 0
    rows = np.arange(N)
    losses = np.where(valid, lse[:, 0] - source[rows, np.where(valid, t, 0)], 0.0)
    p = np.exp(stored - lse)
    p[:, n_valid:] = 0
    p[rows[valid], t[valid]] -= 1
    d = r16(np.where(valid, dl, 0.0)[:, None] * p)
    return {"out": r32(losses)}, {"x": r16(d @ w), "weight": r32(d.T @ x)}


OPS = {"matmul_gelu": (matmul_gelu_case, ("g_bf16", "g_fp16", "g_fp32", "composed")),
       "classifier_crossentropy": (classifier_case, ("fp32", "bf16", "shifted", "composed"))}


def table(op: str, seeds: int, dtype: str) -> None:
    emulate, modes = OPS[op]
    variant = Variant(op, "emulated", impl=f"backends.naive.{op}", device="cpu", dtypes=(dtype,))
    tols = {"out": tolerance(dtype, "forward"), "grad": tolerance(dtype, "gradient")}
    worst: dict = {m: {} for m in modes}
    for seed in range(seeds):
        for case in CASES[op]:
            ctx = CaseContext(variant, op, case, dtype, seed)
            inputs = dict(ctx.get("exact"))
            inputs["n_valid"] = ctx.get("attrs").get("n_valid") or inputs["weight"].shape[0]
            ref = ctx.reference()
            for m in modes:
                outs, grads = emulate(inputs, ctx.get("dout64"), dtype, m)
                pairs = [("out", outs[k], ref[k], tols["out"]) for k in outs]
                pairs += [("d" + k, g, ref["grads"][k], tols["grad"]) for k, g in grads.items()]
                for name, got, r, tol in pairs:
                    if np.any(r):
                        key = f"{case.name}/{name}"
                        worst[m][key] = max(worst[m].get(key, 0.0), worst_ratio(got, r, tol))
    print(f"\n{op}, {dtype}, seeds 0..{seeds - 1}: worst |err| / allowed (> 1 fails)")
    print(f"{'case/output':<28}" + "".join(f"{m:>10}" for m in modes))
    for key in worst[modes[0]]:
        print(f"{key:<28}" + "".join(f"{worst[m][key]:>10.3f}" for m in modes))


def main(argv):
    seeds = int(argv[0]) if argv else 12
    dtype = argv[1] if len(argv) > 1 else "bfloat16"
    for op in OPS:
        table(op, seeds, dtype)


if __name__ == "__main__":
    main(sys.argv[1:])
