"""`euler bench report DIR... --out DIR`: markdown tables and PNG plots derived from bench records.

The report is made from the records alone (STYLE.md 8), so it can be re-made, and records from many
runs and machines can be combined:

    report.md          the runs (device, versions, git sha, load, measured peaks); per op a table of
                       every measurement (median and p20-p80, GFLOP/s or TFLOP/s, GB/s, fraction of
                       the roofline, speedup against the baseline) and the variants that failed or were
                       skipped, with the reason; with two or more runs, what changed
    roofline-*.png     one per device: achieved FLOP/s against arithmetic intensity, under the roof
                       built from that run's measured peaks
    speedup-<op>.png   per op: speedup of each variant against the baseline, per shape and direction

Comparing runs: the first run found is the base; every later run's measurements of the same (op,
variant, direction, shape, dtype, device) are classed *faster* when its p80 is below the base's p20,
*slower* when its p20 is above the base's p80, and *within spread* otherwise, so run-to-run noise is
not reported as a change.

matplotlib is needed only for the plots (`pip install 'nanoeuler[plot]'`); it is imported inside the
plotting functions, never by the core.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .records import RUN_FILE, load_records, record_files


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed: the markdown was written, the plots were not."""


# ---- formatting ------------------------------------------------------------------------------------
def _roofline_cell(fraction: float | None) -> str:
    """'43.1%', '112.0% †' above the roofline, '-' for a call with no roofline (it moves nothing)."""
    if fraction is None:
        return "-"
    return f"{100 * fraction:.1f}%" + (" †" if fraction > 1 else "")


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_rate(x: float | None, unit: str) -> str:
    if x is None or x == 0:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _slug(text: str) -> str:
    s = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in s:
        s = s.replace("--", "-")
    return s[:60]


def _key(r: dict) -> tuple:
    return (r.get("device_key"), r["op"], r["variant"], r["direction"], r["shape_set"], r["shape"], r["dtype"])


# ---- the runs ------------------------------------------------------------------------------------------
def load_runs(paths) -> tuple[list[str], dict[str, list[dict]], dict[str, dict]]:
    """(run ids in the order given, records per run, run.json metadata per run where present)."""
    order, by_run, meta = [], {}, {}
    for f in record_files(paths):
        recs = load_records([f])
        run_file = f.parent / RUN_FILE
        m = json.loads(run_file.read_text()) if run_file.exists() else {}
        for r in sorted(recs, key=lambda r: r.get("time") or ""):
            rid = r.get("run_id", str(f.parent))
            if rid not in by_run:
                order.append(rid)
                by_run[rid] = []
            by_run[rid].append(r)
            if m.get("run_id") == rid:
                meta[rid] = m
    if not order:
        raise ValueError(f"no bench records in {', '.join(map(str, paths))}")
    return order, by_run, meta


def compare_runs(base: list[dict], new: list[dict]) -> list[dict]:
    """Rows {key fields, base, new, ratio, verdict} for measurements present in both runs."""
    old = {_key(r): r for r in base if r.get("kind") == "op" and r.get("status") == "ok"}
    rows = []
    for r in new:
        if r.get("kind") != "op" or r.get("status") != "ok" or _key(r) not in old:
            continue
        b = old[_key(r)]
        if r["p80_s"] < b["p20_s"]:
            verdict = "faster"
        elif r["p20_s"] > b["p80_s"]:
            verdict = "slower"
        else:
            verdict = "within spread"
        rows.append({"op": r["op"], "variant": r["variant"], "direction": r["direction"],
                     "shape": f"{r['shape_set']}/{r['shape']}", "dtype": r["dtype"], "base": b, "new": r,
                     "ratio": r["p50_s"] / b["p50_s"], "verdict": verdict})
    return rows


# ---- markdown -------------------------------------------------------------------------------------------
def markdown(order, by_run, meta) -> str:
    lines = ["# Benchmark report", "",
             "Made by `euler bench report` from the records (`records.jsonl`, one JSON object per measurement). "
             "Times are per call: the median (p50) of samples of back-to-back calls, and the p20-p80 spread. "
             "Throughput comes from the op spec's FLOP and byte counts; *roofline* is the ideal time at this "
             "run's measured peaks (a large matmul, a large copy) over the measured time, i.e. the fraction of "
             "the card's measured peak at the op's arithmetic intensity; *speedup* is the baseline's median over "
             "the variant's (where the baseline is a backend, its fastest variant at that shape). (ref.) marks "
             "the baseline's own variants, the references.", "", "## Runs", "",
             "| run | device | git | versions | load avg (before / after) | peak matmul | peak copy |",
             "|---|---|---|---|---|---|---|"]
    for rid in order:
        recs = by_run[rid]
        m = meta.get(rid, {})
        first = next((r for r in recs if r.get("device")), recs[0])
        v = first.get("versions", {})
        vers = ", ".join(f"{k} {v[k]}" for k in ("python", "numpy", "numba", "cupy-cuda13x", "triton", "blas") if k in v)
        sha = (first.get("git_sha") or "?")[:10] + ("+dirty" if first.get("git_dirty") else "")
        peaks = [r for r in recs if r.get("kind") == "peak"]
        pm = "; ".join(f"{p['dtype']} {fmt_rate(p['peak_flops'], 'FLOP/s')} (n={p['matmul']['n']})" for p in peaks) or "-"
        pc = "; ".join(fmt_rate(p["peak_bw"], "B/s") for p in peaks[:1]) or "-"
        load = f"{m.get('loadavg_before', first.get('loadavg'))} / {m.get('loadavg_after', '?')}"
        devices = sorted({r.get("device") for r in recs if r.get("device")})
        lines.append(f"| `{rid}` | {'; '.join(devices)} | {sha} | {vers} | {load} | {pm} | {pc} |")
    lines.append("")

    all_recs = [r for rid in order for r in by_run[rid]]
    many = len(order) > 1
    ops = list(dict.fromkeys(r["op"] for r in all_recs if r.get("kind") == "op"))
    summary = _speedup_summary(all_recs)
    if summary:
        lines += ["## Speedup summary", "", "Median speedup against the baseline, per op and direction, at each "
                  "shape set (geometric mean over the shapes of the set).", ""] + summary + [""]
    for op in ops:
        recs = [r for r in all_recs if r.get("kind") == "op" and r["op"] == op]
        ok = [r for r in recs if r["status"] == "ok"]
        lines += [f"## {op}", ""]
        if ok:
            head = (["run"] if many else []) + ["variant", "direction", "shape", "dtype", "p50", "p20-p80",
                                                 "FLOP/s", "B/s", "roofline", "bound", "speedup"]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            sets = list(dict.fromkeys(r["shape_set"] for r in ok))
            row_key = lambda r: (sets.index(r["shape_set"]), r["shape"], r["dtype"], r["direction"] != "forward",
                                 r["p50_s"])
            for r in sorted(ok, key=row_key):
                sp = r.get("speedup")
                missed = r.get("reference") and (r.get("check") == "failed" or r.get("conformance") == "failed")
                cells = ([f"`{r['run_id'][:15]}`"] if many else []) + [
                    f"`{r['variant']}`" + (" (ref.)" if r.get("reference") else "") + (" ‡" if missed else ""),
                    r["direction"], f"{r['shape_set']}/{r['shape']} ({r['dims_text']})", r["dtype"],
                    fmt_time(r["p50_s"]), f"{fmt_time(r['p20_s'])} - {fmt_time(r['p80_s'])}",
                    fmt_rate(r["tflops"] * 1e12, "FLOP/s"), fmt_rate(r["gbps"] * 1e9, "B/s"),
                    _roofline_cell(r["roofline_fraction"]), r["bound"],
                    "-" if sp is None else f"{sp:.2f}x vs `{r['baseline']}`"]
                lines.append("| " + " | ".join(cells) + " |")
            missed = {}
            for r in ok:
                if r.get("reference") and r.get("message"):
                    missed.setdefault((r["variant"], r["message"].splitlines()[0]), set()).add(
                        f"{r['shape_set']}/{r['shape']} {r['dtype']}")
            if missed:
                lines += ["", "‡ a reference (a variant of the baseline), timed although it missed NanoEuler's "
                          "tolerance or another conformance check; what it missed:", ""]
                lines += [f"- `{v}` at {', '.join(sorted(w))}: {m}" for (v, m), w in missed.items()]
            if any((r["roofline_fraction"] or 0) > 1 for r in ok):
                lines += ["", "† above the measured roofline: the data stayed in a cache smaller than the peak's "
                          "copy, or the call did less work than the spec counts."]
            if any(r["roofline_fraction"] is None for r in ok):
                lines += ["", "- no roofline: the call computes and moves nothing (residual's backward hands back "
                          "its output gradient as both input gradients), so no fraction of a peak applies; its "
                          "time is the call's overhead."]
            lines.append("")
        bad = {}
        for r in recs:
            if r["status"] != "ok":
                bad.setdefault((r["variant"], r["status"], (r.get("message") or "").splitlines()[0] if r.get("message") else ""),
                               set()).add(f"{r['shape_set']}/{r['shape']} {r['dtype']}")
        if bad:
            lines += ["Not timed:", ""]
            for (variant, status, msg), where in bad.items():
                lines.append(f"- `{variant}` **{status.upper()}** at {', '.join(sorted(where))}: {msg}")
            lines.append("")
    if many:
        base = order[0]
        for rid in order[1:]:
            rows = compare_runs(by_run[base], by_run[rid])
            lines += [f"## Changes: `{rid}` against `{base}`", ""]
            if not rows:
                lines += ["No measurement in common (different devices, shapes, dtypes or variants).", ""]
                continue
            counts = {v: sum(r["verdict"] == v for r in rows) for v in ("faster", "slower", "within spread")}
            lines += [f"{counts['faster']} faster, {counts['slower']} slower, {counts['within spread']} within the "
                      "run-to-run spread (faster: the new p80 is below the old p20; slower: the new p20 is above "
                      "the old p80).", "",
                      "| op | variant | direction | shape | dtype | before p50 | after p50 | after / before | verdict |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for r in sorted(rows, key=lambda r: (r["verdict"] == "within spread", r["ratio"])):
                lines.append(f"| {r['op']} | `{r['variant']}` | {r['direction']} | {r['shape']} | {r['dtype']} | "
                             f"{fmt_time(r['base']['p50_s'])} | {fmt_time(r['new']['p50_s'])} | {r['ratio']:.2f} | "
                             f"{'**' + r['verdict'] + '**' if r['verdict'] != 'within spread' else r['verdict']} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _speedup_summary(recs: list[dict]) -> list[str]:
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in recs:
        if r.get("kind") == "op" and r.get("status") == "ok" and r.get("speedup"):
            groups.setdefault((r["op"], r["direction"], r["shape_set"], r["dtype"]), {}).setdefault(
                r["variant"], []).append(r["speedup"])
    if not groups:
        return []
    variants = list(dict.fromkeys(v for g in groups.values() for v in g))
    head = ["op", "direction", "shapes", "dtype"] + [f"`{v}`" for v in variants]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (op, direction, shape_set, dtype), g in groups.items():
        cells = [op, direction, shape_set, dtype]
        for v in variants:
            xs = g.get(v)
            cells.append(f"{math.exp(sum(map(math.log, xs)) / len(xs)):.2f}x" if xs else "")
        out.append("| " + " | ".join(cells) + " |")
    return out


# ---- plots ------------------------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable("the PNG plots need matplotlib, which is not installed: pip install 'nanoeuler[plot]' "
                               "(or pip install matplotlib), or pass --no-plots") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_roofline(recs: list[dict], path: Path, title: str) -> None:
    plt = _pyplot()
    ok = [r for r in recs if r.get("kind") == "op" and r.get("status") == "ok" and r.get("flops") and r.get("intensity")]
    peak = next((r for r in recs if r.get("kind") == "peak"), None) or (ok[0] if ok else None)
    fig, ax = plt.subplots(figsize=(9, 6))
    if peak is not None:
        pf, pb = peak["peak_flops"], peak["peak_bw"]
        xs = [10 ** (e / 10) for e in range(-30, 41)]
        ax.plot(xs, [min(pf, x * pb) for x in xs], color="black", lw=1.5, label="roofline (measured peaks)")
    backends = list(dict.fromkeys(r["backend"] for r in ok))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, b in enumerate(backends):
        for direction, marker in (("forward", "o"), ("backward", "^")):
            pts = [r for r in ok if r["backend"] == b and r["direction"] == direction]
            if pts:
                ax.scatter([r["intensity"] for r in pts], [r["tflops"] * 1e12 for r in pts], marker=marker,
                           color=colors[i % len(colors)], label=f"{b} {direction}", alpha=0.8)
    for r in ok:
        ax.annotate(f"{r['op']}/{r['shape']}", (r["intensity"], r["tflops"] * 1e12), fontsize=6, alpha=0.6,
                    xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, from the op spec)")
    ax.set_ylabel("achieved FLOP/s (median)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speedups(recs: list[dict], op: str, path: Path) -> bool:
    plt = _pyplot()
    ok = [r for r in recs if r.get("kind") == "op" and r["op"] == op and r.get("status") == "ok" and r.get("speedup")]
    if not ok:
        return False
    groups = list(dict.fromkeys(f"{r['shape_set']}/{r['shape']}\n{r['direction']} {r['dtype']}" for r in ok))
    variants = list(dict.fromkeys(r["variant"] for r in ok))
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(groups) + 2), 4.5))
    for j, v in enumerate(variants):
        xs, ys = [], []
        for i, g in enumerate(groups):
            match = [r for r in ok if r["variant"] == v and
                     f"{r['shape_set']}/{r['shape']}\n{r['direction']} {r['dtype']}" == g]
            if match:
                xs.append(i + (j - (len(variants) - 1) / 2) * width)
                ys.append(match[-1]["speedup"])
        ax.bar(xs, ys, width=width, label=v)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7)
    ax.set_ylabel(f"speedup vs {ok[0].get('baseline')} (median)")
    ax.set_title(f"{op}: speedup per variant", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def render(paths, out_dir, plots: bool = True) -> list[Path]:
    """Write report.md (and the plots) for the records under `paths` into `out_dir`; the files written.
    Raises PlotsUnavailable after writing the markdown when plots are asked for without matplotlib."""
    order, by_run, meta = load_runs(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md"]
    (out / "report.md").write_text(markdown(order, by_run, meta), encoding="utf-8")
    if not plots:
        return written
    latest = by_run[order[-1]] if len(order) > 1 else by_run[order[0]]
    # plots: each measurement from the latest run that made it
    chosen: dict[tuple, dict] = {}
    for rid in order:
        for r in by_run[rid]:
            if r.get("kind") == "op":
                chosen[_key(r)] = r
    recs = list(chosen.values())
    for key in dict.fromkeys(r.get("device_key") for r in recs if r.get("status") == "ok"):
        dev = [r for r in recs if r.get("device_key") == key]
        peaks = [r for rid in order for r in by_run[rid] if r.get("kind") == "peak" and r.get("device_key") == key]
        path = out / f"roofline-{_slug(key or 'device')}.png"
        name = next((r.get("device") for r in dev if r.get("device")), key)
        plot_roofline(peaks[-1:] + dev, path, f"{name}: roofline ({len(dev)} measurements)")
        written.append(path)
    for op in dict.fromkeys(r["op"] for r in recs):
        path = out / f"speedup-{op}.png"
        if plot_speedups(recs, op, path):
            written.append(path)
    del latest
    return written
