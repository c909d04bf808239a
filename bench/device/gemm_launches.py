"""gemm_wgmma launched for a profiler: one probe variant at one product (bench/tune/cupy_raw_wgmma_probe.py's
names, its inputs at its 16384 rows), checked against float64 once, then run three times.

    python3 bench/device/gemm_launches.py VARIANT PRODUCT     # e.g. tree fc_fwd_pre

bench/device/ncu_gemm.sh profiles the third launch (ncu --launch-skip 2: the first is the check's,
whose output is poisoned, the second warms the caches)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tune"))
import cupy as cp  # noqa: E402

import cupy_raw_wgmma_probe as probe  # noqa: E402


def main(variant: str, pname: str) -> int:
    data = probe._Product(cp, pname)
    change, edit, bias_override = probe.VARIANTS[variant]
    bias = data.with_bias if bias_override is None else bias_override
    cfg = probe._config(data.product, data.M, data.K, change)
    with probe.source_edit(edit):
        run = data.call("wgmma", cfg, bias)
        ok, why = data.check(cp, variant, run, bias)
        print(f"{variant} {pname} {cfg}: {'ok' if ok else 'FAIL'} ({why})")
        for i in range(2):
            run(i % 2)
        cp.cuda.Device().synchronize()
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in probe.VARIANTS or sys.argv[2] not in probe.PRODUCTS:
        sys.exit(f"usage: gemm_launches.py VARIANT PRODUCT (variants: {', '.join(probe.VARIANTS)}; "
                 f"products: {', '.join(probe.PRODUCTS)})")
    sys.exit(main(sys.argv[1], sys.argv[2]))
