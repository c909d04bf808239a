"""`--backend auto`: per op, the fastest variant that passed on this device, from the bench records.

    choose("attention", "float32")  ->  Choice(variant="numba:flash", reason="...", ranking=[...])

Which records: those in the bench cache (records.py: `$EULER_BENCH_DIR`, else `$EULER_CACHE_DIR/bench`,
else `~/.cache/nanoeuler/bench`), measured on *this* device (the same device key: CPU model and core
count, or GPU name), of the dtype asked for (float32 when none is). For every (variant, direction,
shape, dtype) only the latest record counts, so a re-run supersedes an old one.

Who may be chosen: a variant whose latest records all say it was timed (status ok), matched the float64
reference at the benchmarked shape, and passed the conformance suite for that op and dtype; that is
installed and can run here now; and that takes the dtype. A variant with a failure in its latest
records is never chosen: `Choice.excluded` says why.

How they are ranked: by the sum of forward and backward median times over the shapes that most
candidates were measured at (so a variant measured only at tiny shapes is not compared with one
measured only at GPT-2 shapes). Where CUDA variants were measured on this machine's GPU, only CUDA
variants compete (mixing devices copies activations every step); otherwise CPU ones.

When no record qualifies, `variant` is None and `reason` says what to run; the caller falls back to
the default backend (euler_core/kernels.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from euler_core.ops import OPS

from . import records as rec


@dataclass
class Choice:
    op: str
    variant: str | None                 # "backend:name", or None: nothing qualifies
    reason: str
    ranking: list[tuple[str, float]] = field(default_factory=list)  # (variant, seconds), fastest first
    excluded: dict[str, str] = field(default_factory=dict)           # variant -> why it may not be chosen


_CACHE: dict = {}


def cached_records(dirs=None) -> list[dict]:
    """Every record under `dirs` (default: the bench cache), re-read only when a file changed."""
    dirs = [rec.cache_dir()] if dirs is None else list(dirs)
    existing = [d for d in dirs if os.path.exists(d)]
    files = rec.record_files(existing) if existing else []
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if _CACHE.get("key") != key:
        _CACHE.update(key=key, records=rec.load_records(files) if files else [])
    return _CACHE["records"]


def _qualifies(r: dict) -> str | None:
    if r.get("status") != "ok":
        return f"{r.get('status')} at {r.get('shape_set')}/{r.get('shape')}: {(r.get('message') or '').splitlines()[0:1]}"
    if r.get("check") != "passed":
        return "not checked against the reference at the benchmarked shape"
    if r.get("conformance") != "passed":
        return f"conformance {r.get('conformance')} (run euler bench ops without --no-conformance)"
    return None


def choose(op: str, dtype: str | None = None, registry=None, dirs=None, records=None) -> Choice:
    """The fastest qualifying variant of `op` on this machine (see the module docstring)."""
    from euler_core.registry import get_registry
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; ops: {', '.join(OPS)}")
    registry = registry or get_registry()
    dtype = dtype or "float32"
    where = ", ".join(str(d) for d in (dirs or [rec.cache_dir()]))
    records = cached_records(dirs) if records is None else records
    keys = {kind: rec.current_device_key(kind) for kind in ("cpu", "cuda")}
    mine = [r for r in records if r.get("kind") == "op" and r.get("op") == op and r.get("dtype") == dtype
            and r.get("device_key") is not None and r.get("device_key") == keys.get(r.get("device_kind"))]
    if not mine:
        devices = " or ".join(k for k in keys.values() if k)
        return Choice(op, None, f"no benchmark records of {op} in {dtype} for this device ({devices}) in {where}; "
                                f"run `euler bench ops --ops {op} --dtype {dtype}` to make some")
    latest: dict[tuple, dict] = {}
    for r in sorted(mine, key=lambda r: r.get("time") or ""):
        latest[(r["variant"], r["direction"], r["shape_set"], r["shape"])] = r
    by_variant: dict[str, list[dict]] = {}
    for (variant, *_), r in latest.items():
        by_variant.setdefault(variant, []).append(r)

    excluded, times = {}, {}
    for name, rs in by_variant.items():
        bad = next((why for why in map(_qualifies, rs) if why), None)
        if bad:
            excluded[name] = bad
            continue
        try:
            variant = registry.find(name, op)
        except ValueError as e:
            excluded[name] = f"not installed now ({e})"
            continue
        reason = variant.unavailable_reason()
        if reason or dtype not in variant.dtypes:
            excluded[name] = reason or f"does not take {dtype}"
            continue
        points: dict[tuple, float] = {}
        for r in rs:
            points[(r["shape_set"], r["shape"])] = points.get((r["shape_set"], r["shape"]), 0.0) + r["p50_s"]
        times[name] = (variant.device, points)
    if not times:
        return Choice(op, None, f"no variant of {op} that passed on this device in {where} "
                                f"(excluded: {'; '.join(f'{k}: {v}' for k, v in excluded.items())})", excluded=excluded)
    if any(device == "cuda" for device, _ in times.values()):
        for name in [n for n, (d, _) in times.items() if d != "cuda"]:
            excluded[name] = "a CPU variant: CUDA variants were measured on this machine's GPU"
            del times[name]
    counts: dict[tuple, int] = {}
    for _, points in times.values():
        for p in points:
            counts[p] = counts.get(p, 0) + 1
    best = max(counts.values())
    shared = [p for p, c in counts.items() if c == best]
    ranking = sorted(((name, sum(points[p] for p in shared)) for name, (_, points) in times.items()
                      if all(p in points for p in shared)), key=lambda x: x[1])
    winner = ranking[0][0]
    shapes = ", ".join(f"{s}/{lab}" for s, lab in shared)
    return Choice(op, winner, f"fastest of {len(ranking)} at {shapes} ({dtype}, forward + backward median "
                              f"{ranking[0][1] * 1e3:.4g} ms)", ranking=ranking, excluded=excluded)
