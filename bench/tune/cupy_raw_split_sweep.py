"""How many k slices gemm_wgmma's weight gradients should take: dW += dy^T x (and db += sum dy) of the
four GPT-2 linears at B*T rows, for every slice count the dW configuration can reach, beside cuBLASLt.

    python3 bench/tune/cupy_raw_split_sweep.py --out $OUT/split.json              # the H200/H100, ~1 min
    python3 bench/tune/cupy_raw_split_sweep.py --dry                              # the CPU: the plan only

Why: dW's output is small (18 to 72 tiles of 128 x 256) and its depth is the batch (65536 at B=64),
so split-K cuts the depth into S slices to give the SMs work. Items (tile, slice) run in waves of one
per SM; matmul._split takes the fewest slices whose waves are at least `busy` (0.9) full. At 72 tiles
on 132 SMs that is S = 5: 360 items in 3 waves (0.909 full), 615 k-steps an SM where the even share
is 559; S = 11 fills 6 waves exactly but adds six float32 slices to splitk_finish's reads. Which wins
is the GPU's to say: each S is timed as the step runs it (the GEMM, then splitk_finish and the bias's
colsum_finish), back to back between CUDA events (euler_core.measure.timing), after its result is
checked against a float64 reference on fresh random inputs (dW and db from zeros poisoned by a first
garbage-free accumulation: dW starts at a random value, and the check is against start + product).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.cupy_raw import _common  # noqa: E402
from backends.cupy_raw import _runtime as rt  # noqa: E402
from backends.cupy_raw import matmul as mm  # noqa: E402

#: linear -> (in features K, out features M): dW is (M, K)
LINEARS = {"qkv": (768, 2304), "attn_proj": (768, 768), "fc": (768, 3072), "fc_proj": (3072, 768)}
SMS_DEFAULT = 132


def slice_plan(M: int, K: int, depth: int, sms: int) -> list[tuple[int, int, int]]:
    """(S, k_split, waves) for every distinct slice count reachable by the dW configuration's split_k
    (the fullest waves up to each split_k), the current choice included."""
    base = mm.CONFIGS[("wgmma", "dW")]
    tiles = rt.cdiv(M, 128) * rt.cdiv(K, base["bn"])
    seen, plan = set(), []
    for most in range(1, base["split_k"] + 1):
        k_split = mm._split(dict(base, split_k=most, busy=1.01), tiles, depth, sms)
        S = rt.cdiv(depth, k_split)
        if S not in seen:
            seen.add(S)
            plan.append((S, k_split, rt.cdiv(tiles * S, sms * base["ctas"])))
    return plan


def current_slices(M: int, K: int, depth: int, sms: int) -> int:
    base = mm.CONFIGS[("wgmma", "dW")]
    tiles = rt.cdiv(M, 128) * rt.cdiv(K, base["bn"])
    return rt.cdiv(depth, mm._split(base, tiles, depth, sms))


def run(rows: int, out: str) -> int:
    import cupy as cp

    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    timer, tcfg = CudaTimer(), TimingConfig(min_time_s=0.2, max_time_s=1.5, max_samples=25)
    sms = _common.num_sms(cp)
    bf16 = _common.np_dtype("bfloat16")
    cp.random.seed(7)
    records, failures = [], 0
    for name, (K, M) in LINEARS.items():
        sets = [((cp.random.standard_normal((rows, M), dtype=cp.float32)).astype(bf16),
                 (cp.random.standard_normal((rows, K), dtype=cp.float32)).astype(bf16)) for _ in range(2)]
        dy64, x64 = sets[0][0].astype(cp.float64), sets[0][1].astype(cp.float64)
        ref_dw, ref_db = dy64.T @ x64, dy64.sum(0)
        del dy64, x64
        flops = 2.0 * rows * K * M
        choices = [(S, k_split, waves, False) for S, k_split, waves in slice_plan(M, K, rows, sms)]
        for S, k_split, waves, _ in choices:
            cfg = dict(mm.CONFIGS[("wgmma", "dW")], split_k=S, busy=1.01)
            dw, db = cp.empty((M, K), cp.float32), cp.empty(M, cp.float32)

            def call(i, cfg=cfg, dw=dw, db=db, engine="wgmma"):
                dy, x = sets[i]
                mm.gemm(engine, mm.Operand(dy, M, False), mm.Operand(x, K, False), dw, M, K, rows, accumulate=True,
                        rowsum=db, product="dW", weight_shape=(M, K), config=cfg if engine == "wgmma" else None)

            start_w = cp.random.standard_normal((M, K), dtype=cp.float32)
            start_b = cp.random.standard_normal(M, dtype=cp.float32)
            dw[...], db[...] = start_w, start_b
            call(0)
            err_w = float(cp.abs(dw - (start_w + ref_dw)).max() / cp.sqrt(cp.mean(ref_dw ** 2)))
            err_b = float(cp.abs(db - (start_b + ref_db)).max() / cp.sqrt(cp.mean(ref_db ** 2)))
            good = err_w < 1e-4 and err_b < 1e-4 and bool(cp.all(cp.isfinite(dw)))
            failures += not good
            t = measure(call, 2, timer, tcfg).p50 if good else None
            rec = dict(linear=name, rows=rows, M=M, K=K, slices=S, k_split=k_split, waves=waves,
                       current=S == current_slices(M, K, rows, sms), ok=good, err_dw=err_w, err_db=err_b,
                       us=None if t is None else t * 1e6, tflops=None if t is None else flops / t / 1e12)
            records.append(rec)
            print(f"{name:9s} S={S:2d} k_split={k_split:6d} waves={waves:2d} {'(now)' if rec['current'] else '     '} "
                  + (f"{rec['us']:8.1f} us {rec['tflops']:5.0f} TFLOP/s" if good else f"FAIL err {err_w:.1e} {err_b:.1e}"),
                  flush=True)
        dw, db = cp.zeros((M, K), cp.float32), cp.zeros(M, cp.float32)
        t = measure(lambda i: mm.gemm("cublaslt", mm.Operand(sets[i][0], M, False), mm.Operand(sets[i][1], K, False),
                                      dw, M, K, rows, accumulate=True, rowsum=db, product="dW", weight_shape=(M, K)),
                    2, timer, tcfg).p50
        records.append(dict(linear=name, rows=rows, M=M, K=K, variant="cublaslt", us=t * 1e6, tflops=flops / t / 1e12))
        print(f"{name:9s} cuBLASLt (+ colsum)          {t * 1e6:8.1f} us {flops / t / 1e12:5.0f} TFLOP/s", flush=True)
    Path(out).write_text(json.dumps({"records": records, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                     "sms": sms}, indent=1))
    print(f"split sweep: {len(records)} records, {failures} FAIL", flush=True)
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65536, help="B*T, the depth of dW (default 65536: B=64)")
    parser.add_argument("--out", default="split-sweep.json")
    parser.add_argument("--dry", action="store_true", help="print the plan (slice counts, waves) for 132 SMs")
    args = parser.parse_args(argv)
    if args.dry:
        for name, (K, M) in LINEARS.items():
            now = current_slices(M, K, args.rows, SMS_DEFAULT)
            print(name, [(S, waves, "now" if S == now else "") for S, _, waves in slice_plan(M, K, args.rows, SMS_DEFAULT)])
        return 0
    return run(args.rows, args.out)


if __name__ == "__main__":
    sys.exit(main())
