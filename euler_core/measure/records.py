"""Tidy benchmark records: one JSON object per measurement, and where they are kept.

A run folder holds
    records.jsonl   one JSON object per line: a measurement of one (op, variant, direction, shape,
                    dtype), or a peak measurement (kind "peak"), or a variant that was not timed
                    (status "failed" or "skipped", with the reason)
    run.json        the run's metadata (the same environment every record carries, the command line,
                    the peaks, the load average before and after)

Every record is self-contained (STYLE.md 8): it carries the device, driver and library versions, the
git sha and the time, so records from many runs can be concatenated and still be read alone. Fields
of an op record:

    schema, kind="op", run_id, time, op, variant ("backend:name"), backend, direction
    ("forward"/"backward"), shape_set, shape (label), dims, dtype, status ("ok"/"failed"/"skipped"),
    message, check ("passed"/"failed": the variant against float64 naive at these very inputs),
    conformance ("passed"/"failed"/"skipped"/"not run": the suite for this op and dtype),
    p20_s, p50_s, p80_s (seconds per call), samples, calls_per_sample, input_sets, flops, bytes,
    intensity (FLOP/byte), tflops, gbps (at p50), bound ("compute"/"memory": the roofline's limit at
    this intensity; "none" for a call that computes and moves nothing), roofline_fraction (ideal time
    at the measured peaks / p50; None where there is no roofline), peak_flops, peak_bw,
    baseline, speedup (baseline's p50 / this p50, same shape, dtype and direction), and the
    environment: device, device_kind, device_key, host, os, cores, versions{...}, driver, git_sha,
    git_dirty, loadavg.

Where records go: `euler bench ops --out DIR` writes DIR; every run is also copied to the bench cache,
`$EULER_BENCH_DIR`, else `$EULER_CACHE_DIR/bench`, else `~/.cache/nanoeuler/bench`, one folder per run,
which is where `--backend auto` reads them (euler_core/measure/auto.py).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

SCHEMA = 1
RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
LIBRARIES = ("numpy", "numba", "llvmlite", "cupy-cuda13x", "cupy-cuda12x", "cupy", "triton", "ml_dtypes",
             "nanoeuler")


# ---- where -----------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """The bench cache that `--backend auto` reads (see the module docstring)."""
    env = os.environ.get("EULER_BENCH_DIR")
    if env:
        return Path(env)
    root = os.environ.get("EULER_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "nanoeuler") / "bench"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(device_key: str) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = "".join(c if c.isalnum() else "-" for c in device_key.lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return f"{stamp}-{slug[:40]}-{os.getpid()}"


# ---- the environment every record carries ----------------------------------------------------------
def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def library_versions() -> dict:
    """Installed versions, read from package metadata (nothing is imported)."""
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    try:
        import numpy as np
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        versions["blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # older numpy: no structured config
        pass
    return versions


@lru_cache(maxsize=None)
def git_state() -> tuple[str | None, bool | None]:
    """(sha, dirty) of the checkout euler_core runs from; the sha in $EULER_GIT_SHA, if set, with dirty
    unknown (a copy of the tree on a remote machine, whose .git may be absent or stale); else (None, None)
    outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if os.environ.get("EULER_GIT_SHA"):     # said by whoever copied the tree (its .git may be stale)
        return os.environ["EULER_GIT_SHA"], None
    if shutil.which("git") is None or not (root / ".git").exists():
        return None, None
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, dirty


@lru_cache(maxsize=None)
def device_info(kind: str) -> dict:
    """name, key, driver of the device of `kind` ('cpu' or 'cuda') on this machine.

    The key identifies "this device" for `--backend auto`: the CPU model and its core count, or the
    GPU's name (records from one H200 serve another)."""
    if kind == "cpu":
        name = _cpu_name()
        n = cores()
        return {"device": f"{name} ({n} cores)", "device_key": f"cpu:{name}:{n}", "driver": None}
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    drv = cupy.cuda.runtime.driverGetVersion()
    rt = cupy.cuda.runtime.runtimeGetVersion()
    return {"device": name, "device_key": f"cuda:{name}",
            "driver": f"CUDA driver API {drv // 1000}.{drv % 1000 // 10}, runtime {rt // 1000}.{rt % 1000 // 10}"}


def current_device_key(kind: str) -> str | None:
    """This machine's key for `kind`, or None when there is no such device here."""
    if kind == "cuda":
        from euler_core.device import cuda_unavailable_reason
        if cuda_unavailable_reason() is not None:
            return None
    return device_info(kind)["device_key"]


def environment(kind: str) -> dict:
    sha, dirty = git_state()
    env = dict(device_info(kind))
    env.update(device_kind=kind, host=platform.node(), os=platform.platform(), cores=cores(), versions=library_versions(),
               git_sha=sha, git_dirty=dirty)
    return env


# ---- reading and writing ---------------------------------------------------------------------------
class RecordWriter:
    """Appends records to DIR/records.jsonl as they are made (a crash keeps what was measured)."""

    def __init__(self, out_dir: str | os.PathLike):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RECORDS_FILE
        self._file = open(self.path, "a", encoding="utf-8")
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def rewrite(self, records: list[dict]) -> None:
        """Replace the file's content (used once at the end, to add the derived speedups)."""
        self._file.close()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
        tmp.replace(self.path)
        self.records = list(records)
        self._file = open(self.path, "a", encoding="utf-8")

    def write_run(self, meta: dict) -> None:
        (self.dir / RUN_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def close(self) -> None:
        self._file.close()


def record_files(paths) -> list[Path]:
    """Every records.jsonl in the given files or folders (folders searched recursively)."""
    found = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(p.rglob(RECORDS_FILE))
        else:
            raise FileNotFoundError(f"no bench records at {p}")
    return found


def load_records(paths) -> list[dict]:
    """All records in the given files or folders; a line that is not JSON is an error naming it."""
    records = []
    for f in record_files(paths):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{f}:{i}: not a JSON record ({e})") from None
    return records
