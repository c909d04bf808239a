"""gemm_wgmma's launch choices at the training step's own shapes (B*T rows, 65536 at B=64), where the
op bench's 16384 rows decide differently, beside cuBLASLt:

  split    how many k slices the weight gradients take: dW += dy^T x (and db += sum dy) of the four
           GPT-2 linears, for every slice count the dW configuration can reach
  lm_head  the classifier's forward, logits (rows, 50304) = x W^T, the step's largest GEMM, at a few
           tile-row groupings (group_m) and TMA-store passes, and in clusters of two blocks that share
           W's tile by TMA multicast (last: a launch that hangs ends the sweep there)

    python3 bench/tune/cupy_raw_step_gemm_sweep.py --out $OUT/step-gemm.json      # the GPU, ~1.5 min
    python3 bench/tune/cupy_raw_step_gemm_sweep.py --dry                          # the CPU: the plan only

Why split: dW's output is small (18 to 72 tiles of 128 x 256) and its depth is the batch (65536 at B=64),
so split-K cuts the depth into S slices to give the SMs work. Items (tile, slice) run in waves of one
per SM; matmul._split takes the fewest slices whose waves are at least `busy` full. At 72 tiles on
132 SMs, busy 0.9 took S = 5: 360 items in 3 waves (0.909 full), 615 k-steps an SM where the even
share is 559; S = 11 fills 6 waves exactly but adds six float32 slices to splitk_finish's reads (this
sweep moved busy to 0.95, S = 7: reports/cupy_raw-h200/step-gemm-585a744). Which wins
is the GPU's to say: each S is timed as the step runs it (the GEMM, then splitk_finish and the bias's
colsum_finish), back to back between CUDA events (euler_core.measure.timing), after its result is
checked against a float64 reference on fresh random inputs (dW and db start at random values: the
check is against start + product, held to the conformance bound for bf16 gradients).
Why lm_head: in the B=64 step its forward takes 7.7-7.8 ms against 6.3-6.7 for each of its backward
GEMMs (reports/train-h100/6973c19/trace), at the configuration chosen at 16384 rows. Each candidate's
logits are poisoned with NaN first and 512 sampled rows checked against float64.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "device"))

from backends.cupy_raw import _common  # noqa: E402
from backends.cupy_raw import _runtime as rt  # noqa: E402
from backends.cupy_raw import matmul as mm  # noqa: E402
from conformance.tolerances import tolerance  # noqa: E402
from cupy_raw_matmul import _err  # noqa: E402  (bench/device/: the conformance bound, as its check holds it)

#: linear -> (in features K, out features M): dW is (M, K)
LINEARS = {"qkv": (768, 2304), "attn_proj": (768, 768), "fc": (768, 3072), "fc_proj": (3072, 768)}
SMS_DEFAULT = 132
VOCAB = 50304
#: lm_head forward candidates: name -> changes to its configuration (matmul.SHAPE_CONFIGS)
LM_HEAD = {"now": {}, "group_m8": {"group_m": 8}, "group_m16": {"group_m": 16}, "group_m64": {"group_m": 64},
           "store256_s3": {"store_cols": 256, "stages": 3}, "cluster2": {"cluster": 2},
           "cluster2_group_m16": {"cluster": 2, "group_m": 16}}


def slice_plan(M: int, K: int, depth: int, sms: int) -> list[tuple[int, int, int]]:
    """(S, k_split, waves) for every distinct slice count reachable by the dW configuration's split_k
    (the fullest waves up to each split_k), the current choice included."""
    base = mm.CONFIGS[("wgmma", "dW")]
    tiles = _dw_tiles(M, K)
    seen, plan = set(), []
    for most in range(1, base["split_k"] + 1):
        k_split = mm._split(dict(base, split_k=most, busy=1.01), tiles, depth, sms)
        S = rt.cdiv(depth, k_split)
        if S not in seen:
            seen.add(S)
            plan.append((S, k_split, rt.cdiv(tiles * S, sms * base["ctas"])))
    return plan


def _dw_tiles(M: int, K: int) -> int:
    """dW's (M, K) output in the dW configuration's 128 x bn tiles"""
    return rt.cdiv(M, 128) * rt.cdiv(K, mm.CONFIGS[("wgmma", "dW")]["bn"])


def current_slices(M: int, K: int, depth: int, sms: int) -> int:
    return rt.cdiv(depth, mm._split(mm.CONFIGS[("wgmma", "dW")], _dw_tiles(M, K), depth, sms))


def sweep_split(cp, rows: int, sms: int, timer, tcfg) -> tuple[list, int]:
    bf16 = _common.np_dtype("bfloat16")
    tol = tolerance("bfloat16", "gradient")
    records, failures = [], 0
    for name, (K, M) in LINEARS.items():
        sets = [((cp.random.standard_normal((rows, M), dtype=cp.float32)).astype(bf16),
                 (cp.random.standard_normal((rows, K), dtype=cp.float32)).astype(bf16)) for _ in range(2)]
        dy64, x64 = sets[0][0].astype(cp.float64), sets[0][1].astype(cp.float64)
        ref_dw, ref_db = dy64.T @ x64, dy64.sum(0)
        del dy64, x64
        flops = 2.0 * rows * K * M
        for S, k_split, waves in slice_plan(M, K, rows, sms):
            cfg = dict(mm.CONFIGS[("wgmma", "dW")], split_k=S, busy=1.01)
            dw, db = cp.empty((M, K), cp.float32), cp.empty(M, cp.float32)

            def call(i, cfg=cfg, dw=dw, db=db):
                dy, x = sets[i]
                mm.gemm("wgmma", mm.Operand(dy, M, False), mm.Operand(x, K, False), dw, M, K, rows, accumulate=True,
                        rowsum=db, product="dW", weight_shape=(M, K), config=cfg)

            start_w = cp.random.standard_normal((M, K), dtype=cp.float32)
            start_b = cp.random.standard_normal(M, dtype=cp.float32)
            dw[...], db[...] = start_w, start_b
            call(0)
            err_w, ok_w = _err(cp, dw - start_w, ref_dw, tol.rtol, tol.atol)
            err_b, ok_b = _err(cp, db - start_b, ref_db, tol.rtol, tol.atol)
            good = ok_w and ok_b
            failures += not good
            t = measure_p50(call, timer, tcfg) if good else None
            rec = dict(sweep="split", linear=name, rows=rows, M=M, K=K, slices=S, k_split=k_split, waves=waves,
                       current=S == current_slices(M, K, rows, sms), ok=good, err_dw=err_w, err_db=err_b,
                       us=None if t is None else t * 1e6, tflops=None if t is None else flops / t / 1e12)
            records.append(rec)
            print(f"{name:9s} S={S:2d} k_split={k_split:6d} waves={waves:2d} {'(now)' if rec['current'] else '     '} "
                  + (f"{rec['us']:8.1f} us {rec['tflops']:5.0f} TFLOP/s" if good else f"FAIL err {err_w:.1e} {err_b:.1e}"),
                  flush=True)
        dw, db = cp.zeros((M, K), cp.float32), cp.zeros(M, cp.float32)
        t = measure_p50(lambda i: mm.gemm("cublaslt", mm.Operand(sets[i][0], M, False), mm.Operand(sets[i][1], K, False),
                                          dw, M, K, rows, accumulate=True, rowsum=db, product="dW", weight_shape=(M, K)),
                        timer, tcfg)
        records.append(dict(sweep="split", linear=name, rows=rows, M=M, K=K, variant="cublaslt", us=t * 1e6, tflops=flops / t / 1e12))
        print(f"{name:9s} cuBLASLt (+ colsum)          {t * 1e6:8.1f} us {flops / t / 1e12:5.0f} TFLOP/s", flush=True)
    return records, failures


def sweep_lm_head(cp, rows: int, timer, tcfg) -> tuple[list, int]:
    bf16 = _common.np_dtype("bfloat16")
    K, M = 768, VOCAB
    tol = tolerance("bfloat16", "forward")
    sets = [((cp.random.standard_normal((rows, K), dtype=cp.float32)).astype(bf16),
             (cp.random.standard_normal((M, K), dtype=cp.float32) * K ** -0.5).astype(bf16)) for _ in range(2)]
    sample = cp.asarray(sorted(set(int(r) for r in cp.random.randint(0, rows, 512).get())))
    ref = sets[0][0][sample].astype(cp.float64) @ sets[0][1].astype(cp.float64).T
    flops = 2.0 * rows * K * M
    y = cp.empty((rows, M), dtype=bf16)
    records, failures = [], 0
    base = mm.SHAPE_CONFIGS[("wgmma", "forward", M, K)]
    for name, change in LM_HEAD.items():
        cfg = dict(base, **change)

        def call(i, cfg=cfg):
            x, w = sets[i]
            mm.gemm("wgmma", mm.Operand(x, K, True), mm.Operand(w, K, True), y, rows, M, K, product="forward",
                    weight_shape=(M, K), config=cfg)

        y.fill(float("nan"))
        try:
            call(0)
            err, good = _err(cp, y[sample], ref, tol.rtol, tol.atol)
            t = measure_p50(call, timer, tcfg) if good else None
        except Exception as e:  # a configuration the kernel refuses: say so, go on
            err, good, t = float("nan"), False, None
            print(f"lm_head   {name:12s} {type(e).__name__}: {str(e)[:200]}", flush=True)
        failures += not good
        rec = dict(sweep="lm_head", rows=rows, variant=name, config={k: cfg[k] for k in sorted(cfg)}, ok=good, err=err,
                   us=None if t is None else t * 1e6, tflops=None if t is None else flops / t / 1e12)
        records.append(rec)
        print(f"lm_head   {name:12s} " + (f"{rec['us']:8.1f} us {rec['tflops']:5.0f} TFLOP/s" if good else
                                           f"FAIL err {err:.1e}"), flush=True)
    t = measure_p50(lambda i: mm.gemm("cublaslt", mm.Operand(sets[i][0], K, True), mm.Operand(sets[i][1], K, True), y,
                                      rows, M, K), timer, tcfg)
    records.append(dict(sweep="lm_head", rows=rows, variant="cublaslt", us=t * 1e6, tflops=flops / t / 1e12))
    print(f"lm_head   cuBLASLt     {t * 1e6:8.1f} us {flops / t / 1e12:5.0f} TFLOP/s", flush=True)
    return records, failures


def measure_p50(call, timer, tcfg) -> float:
    from euler_core.measure.timing import measure
    return measure(call, 2, timer, tcfg).p50


def run(rows: int, out: str, sweeps: list[str]) -> int:
    import cupy as cp

    from euler_core.measure.timing import CudaTimer, TimingConfig
    timer, tcfg = CudaTimer(), TimingConfig(min_time_s=0.2, max_time_s=1.5, max_samples=25)
    sms = _common.num_sms(cp)
    cp.random.seed(7)
    records, failures = [], 0
    for name in sweeps:
        got, bad = (sweep_split(cp, rows, sms, timer, tcfg) if name == "split" else sweep_lm_head(cp, rows, timer, tcfg))
        records += got
        failures += bad
    Path(out).write_text(json.dumps({"records": records, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                     "sms": sms}, indent=1))
    print(f"step gemm sweep: {len(records)} records, {failures} FAIL", flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65536, help="B*T, the depth of dW (default 65536: B=64)")
    parser.add_argument("--out", default="step-gemm-sweep.json")
    parser.add_argument("--sweeps", default="split,lm_head", help="comma-separated, from: split, lm_head")
    parser.add_argument("--dry", action="store_true", help="print the plan (slice counts, waves) for 132 SMs")
    args = parser.parse_args(argv)
    if args.dry:
        for name, (K, M) in LINEARS.items():
            now = current_slices(M, K, args.rows, SMS_DEFAULT)
            print(name, [(S, waves, "now" if S == now else "") for S, _, waves in slice_plan(M, K, args.rows, SMS_DEFAULT)])
        base = mm.SHAPE_CONFIGS[("wgmma", "forward", VOCAB, 768)]
        for name, change in LM_HEAD.items():
            print("lm_head", name, dict(base, **change))
        return 0
    sweeps = [s for s in args.sweeps.split(",") if s]
    unknown = sorted(set(sweeps) - {"split", "lm_head"})
    if unknown:
        parser.error(f"unknown sweep(s) {unknown}: the sweeps are split, lm_head")
    return run(args.rows, args.out, sweeps)


if __name__ == "__main__":
    sys.exit(main())
