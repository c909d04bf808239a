"""Where a captured training step's GPU time goes, kernel by kernel, recorded by an outside profiler.

    python3 bench/device/step_trace.py --out DIR [--batch-sizes 16,64] [--backend SEL ...] [--recompute]
        [--loops sync,pipelined]  # each step read before the next is queued, and/or as euler train queues them
        [--matmul-variant NAME]   # triton matmul launch configs replaced (bench/tune/matmul_step_variants.py)

`euler bench train`'s breakdown times each op between CUDA events in an eager step, where the
host's launch gaps inflate the small kernels; a replayed graph has no op calls to time at all. This
script asks CUPTI instead, through PyTorch's profiler (kineto), which records every kernel the
process runs, CuPy's graph replays and Triton's launches included, with its start and duration on
the GPU. torch is only the recorder here, on the device (never part of the product).

For each selection (--backend, repeatable; default triton) and batch size, GPT-2 124M (T=1024, bf16):
1. one eager step, each op call inside a profiler range and followed by a stream synchronisation:
   the kernels each op launched, in order (a kernel belongs to the range its GPU interval lies in);
2. `--steps` steps replayed from the captured graphs, timed on the host too: each kernel's time in
   the real step, matched to the eager step's kernels by position (the graph replays the same
   sequence; the names are checked), and the GPU's idle time inside a step (between kernels) and
   between steps (the host reading the loss and queueing the next step).
Writes, for the n-th selection, step-<n>-B<B>.md (the tables), step-<n>-B<B>.json (every kernel of
one replayed step, with its op) and trace-<n>-B<B>.json.gz (the chrome trace of the replayed steps);
the pipelined loop's files end in -pipelined.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_check import batch, make  # noqa: E402


def kernels_of(trace_path: Path) -> list[dict]:
    """The GPU kernels (and memsets/copies) of a chrome trace, by start time: name, ts, dur (us)."""
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    return sorted(({"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"]), "cat": e["cat"],
                    "grid": (e.get("args") or {}).get("grid")} for e in gpu), key=lambda k: k["ts"])


def ranges_of(trace_path: Path) -> list[dict]:
    events = json.loads(Path(trace_path).read_text())["traceEvents"]
    marks = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("op:")]
    return sorted(({"name": e["name"][3:], "ts": float(e["ts"]), "end": float(e["ts"]) + float(e["dur"])}
                   for e in marks), key=lambda r: r["ts"])


def eager_map(model, step, data, torch, out: Path, tag: str) -> list[dict]:
    """One eager step with each op in a range: [{"name", "op"}] per GPU kernel, in order."""
    import cupy

    from euler_core.kernels import Kernel

    def ranged(kernel, direction, call):
        cupy.cuda.Device().synchronize()
        with torch.profiler.record_function(f"op:{kernel.spec.name} {direction}"):
            result = call()
            cupy.cuda.Device().synchronize()
        return result

    Kernel.watchers.append(ranged)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            step.run(data, 3e-4).loss
            cupy.cuda.Device().synchronize()
    finally:
        Kernel.watchers.remove(ranged)
    path = out / f"eager-{tag}.json"
    prof.export_chrome_trace(str(path))
    kernels, ranges = kernels_of(path), ranges_of(path)
    path.unlink()
    j = 0
    for k in kernels:
        mid = k["ts"] + k["dur"] / 2
        while j < len(ranges) and ranges[j]["end"] < mid:
            j += 1
        inside = j < len(ranges) and ranges[j]["ts"] <= mid
        k["op"] = ranges[j]["name"] if inside else "(outside the ops)"
    return kernels


def replayed(step, data, steps: int, torch, out: Path, tag: str, pipelined: bool = False):
    """`steps` replayed steps under the profiler: (kernels, walls). Each step is read before the next
    is queued (walls: queue to read), or with `pipelined` as euler train's loop runs them, step k+1
    queued before step k is read (walls: read to read; the first step's from its queueing)."""
    import cupy
    walls, queued = [], []
    last = 0.0  # set as the profiler starts

    def read(result):
        nonlocal last
        result.loss  # waits for that step
        now = time.perf_counter()
        walls.append(now - last)
        last = now

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        last = time.perf_counter()
        for d in data[:steps]:
            queued.append(step.run(d, 3e-4))
            if len(queued) > pipelined:
                read(queued.pop(0))
        for result in queued:
            read(result)
        cupy.cuda.Device().synchronize()
    path = out / f"trace-{tag}.json"
    prof.export_chrome_trace(str(path))
    kernels = kernels_of(path)
    with open(path, "rb") as src, gzip.open(str(path) + ".gz", "wb") as dst:
        dst.write(src.read())
    path.unlink()
    return kernels, walls


def split_steps(kernels: list[dict], per_step: int, steps: int) -> list[list[dict]]:
    """The replayed kernels cut into steps of the eager step's length (checked by the caller)."""
    return [kernels[i * per_step:(i + 1) * per_step] for i in range(steps)]


def analyse(eager: list[dict], graph_steps: list[list[dict]], walls: list[float], B: int, T: int) -> dict:
    per_op: dict = {}
    mismatched = 0
    steps = []
    for kernels in graph_steps:
        busy = sum(k["dur"] for k in kernels)
        span = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
        gaps = [max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(kernels, kernels[1:])]
        steps.append({"span_us": span, "kernels_us": busy, "gaps_us": sum(gaps), "gaps": gaps})
    between = [max(0.0, b[0]["ts"] - (a[-1]["ts"] + a[-1]["dur"])) for a, b in zip(graph_steps, graph_steps[1:])]
    for i, ek in enumerate(eager):
        durs = [s[i]["dur"] for s in graph_steps]
        if any(s[i]["name"] != ek["name"] for s in graph_steps):
            mismatched += 1
        row = per_op.setdefault(ek["op"], {"calls": 0, "us": 0.0, "kernels": {}})
        row["calls"] += 1
        row["us"] += statistics.median(durs)
        short = ek["name"][:60]
        kr = row["kernels"].setdefault(short, {"calls": 0, "us": 0.0})
        kr["calls"] += 1
        kr["us"] += statistics.median(durs)
    median_gaps = [statistics.median(s["gaps"][i] for s in steps) for i in range(len(steps[0]["gaps"]))]
    top_gaps = sorted(range(len(median_gaps)), key=lambda i: -median_gaps[i])[:12]
    return {
        "B": B, "T": T, "kernels_per_step": len(eager), "name_mismatches": mismatched,
        "wall_ms": [w * 1e3 for w in walls], "median_wall_ms": statistics.median(walls) * 1e3,
        "median_span_ms": statistics.median(s["span_us"] for s in steps) / 1e3,
        "median_kernels_ms": statistics.median(s["kernels_us"] for s in steps) / 1e3,
        "median_gaps_ms": statistics.median(s["gaps_us"] for s in steps) / 1e3,
        "between_steps_ms": [g / 1e3 for g in between],
        "tokens_per_s_wall": B * T / statistics.median(walls),
        "per_op": per_op,
        "top_gaps": [{"after": eager[i]["name"][:50], "after_op": eager[i]["op"], "before": eager[i + 1]["name"][:50],
                      "before_op": eager[i + 1]["op"], "us": median_gaps[i]} for i in top_gaps],
        "kernels": [{"op": ek["op"], "name": ek["name"], "grid": graph_steps[0][i]["grid"],
                     "us": statistics.median(s[i]["dur"] for s in graph_steps)} for i, ek in enumerate(eager)],
    }


def markdown(r: dict, selection: str, recompute: bool) -> str:
    span = r["median_span_ms"]
    lines = [f"# One replayed training step, kernel by kernel: {selection}{' (recompute)' if recompute else ''}, "
             f"B={r['B']}, T={r['T']}", "",
             f"Host wall time per step (median of {len(r['wall_ms'])}, "
             f"{'read to read, each step queued before the last is read' if r.get('pipelined') else 'ending with the loss read'}): "
             f"{r['median_wall_ms']:.2f} ms = {r['tokens_per_s_wall']:,.0f} tokens/s. On the GPU: first kernel to "
             f"last {span:.2f} ms, of which kernels {r['median_kernels_ms']:.2f} ms and idle between kernels "
             f"{r['median_gaps_ms']:.2f} ms; idle between steps {', '.join(f'{g:.3f}' for g in r['between_steps_ms'])} ms. "
             f"{r['kernels_per_step']} kernels a step ({r['name_mismatches']} positions whose name differs from the eager step's).",
             "", "| op | kernels/step | ms/step | % of the GPU span |", "|---|---:|---:|---:|"]
    for op, row in sorted(r["per_op"].items(), key=lambda kv: -kv[1]["us"]):
        lines.append(f"| {op} | {row['calls']} | {row['us'] / 1e3:.3f} | {100 * row['us'] / 1e3 / span:.1f}% |")
    lines.append(f"| (idle between kernels) | | {r['median_gaps_ms']:.3f} | {100 * r['median_gaps_ms'] / span:.1f}% |")
    lines += ["", "## Kernels within each op", "", "| op | kernel | calls | ms/step |", "|---|---|---:|---:|"]
    for op, row in sorted(r["per_op"].items(), key=lambda kv: -kv[1]["us"]):
        for name, kr in sorted(row["kernels"].items(), key=lambda kv: -kv[1]["us"]):
            lines.append(f"| {op} | `{name}` | {kr['calls']} | {kr['us'] / 1e3:.3f} |")
    lines += ["", "## The longest idle times inside a step", "", "| after (op) | before (op) | us |", "|---|---|---:|"]
    for g in r["top_gaps"]:
        lines.append(f"| `{g['after']}` ({g['after_op']}) | `{g['before']}` ({g['before_op']}) | {g['us']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--batch-sizes", default="16,64")
    p.add_argument("--backend", action="append", default=None, help="a selection (repeatable; default triton)")
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--loops", default="sync",
                   help="comma-separated: sync (each step read before the next is queued), pipelined (step "
                        "k+1 queued before step k is read, as euler train's loop runs them)")
    p.add_argument("--matmul-variant", default=None,
                   help="a name of bench/tune/matmul_step_variants.py: its triton matmul configs replace the table's")
    args = p.parse_args(argv)
    import cupy
    import torch  # before backends.triton (below): Triton's runtime blocks a later torch import

    if args.matmul_variant:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tune"))
        from matmul_step_variants import apply
        apply(args.matmul_variant)
    from euler_core.graph import work_stream
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    T = 1024
    for n, selection in enumerate(args.backend or ["triton"]):
        for B in [int(b) for b in args.batch_sizes.split(",")]:
            base_tag = f"{n}-B{B}" + (f"-{args.matmul_variant}" if args.matmul_variant else "")
            rng = np.random.default_rng(0)
            data = [batch(rng, B, T, 50257) for _ in range(args.steps + 4)]
            model, eager_step = make("gpt2", B, T, selection, "bfloat16", graph=False, recompute=args.recompute)
            for d in data[:2]:
                eager_step.run(d, 3e-4).loss  # compiles every kernel
            with work_stream():
                eager = eager_map(model, eager_step, data[2], torch, out, base_tag)
            step = TrainStep(model, AdamW(model), B, T, accum=1, grad_clip=1.0, graph=True)
            for d in data[:3]:
                step.run(d, 3e-4).loss  # eager, capture, first replay
            for loop in args.loops.split(","):
                if loop not in ("sync", "pipelined"):
                    raise SystemExit(f"--loops: unknown loop {loop!r}, expected sync or pipelined")
                tag = base_tag + ("-pipelined" if loop == "pipelined" else "")
                kernels, walls = replayed(step, data[3:], args.steps, torch, out, tag, pipelined=loop == "pipelined")
                per_step = len(eager)
                if len(kernels) != per_step * args.steps:
                    print(f"{selection} B={B}: {len(kernels)} kernels in {args.steps} replayed steps, the eager step "
                          f"has {per_step}: matching by position is off (the tables below may misattribute)", flush=True)
                result = analyse(eager, split_steps(kernels, per_step, args.steps), walls, B, T)
                result.update(selection=selection, recompute=args.recompute, matmul_variant=args.matmul_variant,
                              pipelined=loop == "pipelined")
                (out / f"step-{tag}.json").write_text(json.dumps(result, indent=1))
                text = markdown(result, selection + (f" [matmul {args.matmul_variant}]" if args.matmul_variant else ""),
                                args.recompute)
                (out / f"step-{tag}.md").write_text(text)
                print(text.split("## Kernels")[0], flush=True)
            del model, eager_step, step
            cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
