"""Summarise an Nsight Compute source page (SASS as CSV: `ncu -i rep --page source --print-source sass
--csv`, as ncu_attention.sh writes it): instructions executed and stall samples by opcode, the
instructions with the most stall samples, and the stall reasons over the whole kernel.

    python3 bench/device/ncu_sass_summary.py reports/cupy_raw-h200/ncu-attention-499346b/cupy_raw_forward-sass.csv.gz
"""

from __future__ import annotations

import collections
import csv
import gzip
import sys


def summary(path: str, top: int = 25) -> str:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header, data = rows[1], rows[2:]  # row 0 names the kernel
    col = {name: i for i, name in enumerate(header)}

    def value(row, name):
        try:
            return int(row[col[name]])
        except ValueError:  # "-" where a metric does not apply
            return 0

    executed = [value(r, "Instructions Executed") for r in data]
    samples = [value(r, "Warp Stall Sampling (All Samples)") for r in data]
    total_i, total_s = sum(executed), sum(samples)
    by_op, by_op_s = collections.Counter(), collections.Counter()
    for r, n, s in zip(data, executed, samples):
        words = [w for w in r[col["Source"]].split() if not w.startswith("@")]
        if words:
            by_op[words[0].split(".")[0]] += n
            by_op_s[words[0].split(".")[0]] += s
    lines = [f"{rows[0][1]}: {total_i:,} warp instructions executed, {total_s:,} stall samples",
             "opcode: % of instructions executed, % of stall samples"]
    lines += [f"  {op:10s} {100 * n / total_i:5.1f}% {100 * by_op_s[op] / total_s:5.1f}%" for op, n in by_op.most_common(22)]
    lines.append("the instructions with the most stall samples")
    for s, r in sorted(zip(samples, data), key=lambda t: -t[0])[:top]:
        lines.append(f"  {100 * s / total_s:5.1f}%  {r[col['Address']][-5:]}  {r[col['Source']].strip()[:70]}")
    reasons = collections.Counter()
    for name in header:
        if name.startswith("stall_") and "Not Issued" not in name:
            reasons[name[6:]] = sum(value(r, name) for r in data)
    total_r = sum(reasons.values())
    lines.append("stall reasons: " + ", ".join(f"{k} {100 * v / total_r:.1f}%" for k, v in reasons.most_common(10)))
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(summary(p) for p in sys.argv[1:]))
