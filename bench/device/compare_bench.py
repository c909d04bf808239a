"""Compare a fresh `euler bench ops` run with committed records, op by op: did anything get slower?

    python3 bench/device/compare_bench.py NOW_DIR --committed DIR [DIR ...] [--variants triton]

For every record of a variant whose name starts with --variants (status ok) in NOW_DIR/records.jsonl
that a committed records.jsonl also holds (same op, variant, shape set, shape, direction, dtype; the
newest committed one where several are), one line per (op, shape) with the forward's and the
backward's median (p50) now and then and their ratio now / committed (> 1: slower now). Beside it,
the same ratio for that record's baseline variant (e.g. torch:cublas), timed in both runs: how much
the card, its clocks and the libraries moved between the two sessions. A measurement is flagged
`slower` when its ratio is above 1 + TOLERANCE (3%, about the session-to-session spread of these
medians; the p20-p80 spread within a run is well under 1%) and more than TOLERANCE above its
baseline's ratio, so that a card running slower across the board is not read as a kernel that got
slower. The last line is the summary: rows compared, geometric means of the two ratios, the flags.
Standard library only (it runs wherever the records are).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

TOLERANCE = 0.03
SHORT = {"forward": "fwd", "backward": "bwd"}


def load(folder: str) -> dict:
    """(op, variant, shape set, shape, direction, dtype) -> the newest ok op record in folder/records.jsonl."""
    path = Path(folder) / "records.jsonl"
    if not path.is_file():
        raise SystemExit(f"compare_bench: no records at {path}")
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") != "op" or r.get("status") != "ok" or not r.get("p50_s"):
            continue
        key = (r["op"], r["variant"], r["shape_set"], r["shape"], r["direction"], r["dtype"])
        if key not in out or r.get("time", "") > out[key].get("time", ""):
            out[key] = r
    return out


def compare(now: dict, committed: dict, prefix: str) -> tuple[list[str], list[tuple]]:
    """(table lines, [(op, shape, set, variant, direction, ratio, baseline ratio, flagged)])."""
    rows, results = {}, []
    for key, r in sorted(now.items()):
        op, variant, shape_set, shape, direction, dtype = key
        if not variant.startswith(prefix) or key not in committed:
            continue
        ratio = r["p50_s"] / committed[key]["p50_s"]
        base = r.get("baseline")
        bkey = (op, base, shape_set, shape, direction, dtype)
        bratio = now[bkey]["p50_s"] / committed[bkey]["p50_s"] if base and bkey in now and bkey in committed \
            else None
        flagged = ratio > 1 + TOLERANCE and (bratio is None or ratio > bratio * (1 + TOLERANCE))
        results.append((op, shape, shape_set, variant, direction, ratio, bratio, flagged))
        cell = (f"{r['p50_s'] * 1e6:9.1f} {committed[key]['p50_s'] * 1e6:9.1f} {ratio:6.3f}"
                + (f" ({base.split(':')[-1]} {bratio:5.3f})" if bratio else "") + (" SLOWER" if flagged else ""))
        rows.setdefault((op, shape, shape_set, variant, dtype), {})[direction] = cell
    lines = [f"{'op/shape (set) variant':44s} direction: now us, committed us, now/committed "
             "(baseline now/committed)"]
    for (op, shape, shape_set, variant, dtype), cells in rows.items():
        ordered = sorted(cells.items(), key=lambda kv: kv[0] != "forward")  # forward first
        lines.append(f"{op + '/' + shape + ' (' + shape_set + ') ' + variant:44s} "
                     + " | ".join(f"{SHORT.get(d, d)} {c}" for d, c in ordered))
    return lines, results


def geomean(xs) -> float:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("now", help="the fresh run's folder (holding records.jsonl)")
    ap.add_argument("--committed", nargs="+", required=True, help="folders of committed records")
    ap.add_argument("--variants", default="triton", help="compare the variants whose name starts with this")
    args = ap.parse_args(argv)
    committed = {}
    for folder in args.committed:
        for key, r in load(folder).items():
            if key not in committed or r.get("time", "") > committed[key].get("time", ""):
                committed[key] = r
    lines, results = compare(load(args.now), committed, args.variants)
    print("\n".join(lines))
    flagged = [f"{op}/{shape} ({s}) {v} {SHORT.get(d, d)}" for op, shape, s, v, d, _, _, f in results if f]
    print(f"compared {len(results)} {args.variants} measurements: now/committed geomean "
          f"{geomean(r[5] for r in results):.3f}, baselines' {geomean(r[6] for r in results):.3f}; "
          f"slower beyond {TOLERANCE:.0%} and the baseline's drift: {', '.join(flagged) or 'none'}")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
