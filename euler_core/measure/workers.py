"""Training-step measurements run in worker processes, one at a time: ours, and the PyTorch reference.

Why processes: every measurement starts from nothing, as a user's run does. Its time to the first
step counts the interpreter, the imports, building the model and compiling the kernels (with the
kernel caches cold or warm: the driver points them at a folder of its own); its peak memory is its
own (CuPy's and PyTorch's pools never give memory back within a process, and nvidia-smi sees the
whole card); and an out-of-memory error ends only that measurement. The driver (train.py,
quality.py) never touches the GPU itself, so nvidia-smi sees only the worker.

    python -m euler_core.measure.worker '{"role": "peaks", ...}'      our worker: one JSON line last
    python -m euler_torch_reference.gpt2 --config ... --B ... --T   the reference's (a torch environment)

The reference runs from bench/euler-torch-reference with no install: its folder is put on PYTHONPATH.

Roles of our worker (worker.py dispatches them; the functions live with the command that needs them):
    peaks     the device and variants of each selection, the environment of each device, and (unless
              "measure" is false) the devices' ceilings (peaks.py)
    step      training steps of one selection at one batch size (train.worker_step)
    profile   one eager step timed op by op (train.worker_profile)
    quality   a whole planned training run (quality.worker_quality)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
REFERENCE_DIR = REPO / "bench" / "euler-torch-reference"
KERNEL_CACHES = {"TRITON_CACHE_DIR": "triton", "NUMBA_CACHE_DIR": "numba", "CUPY_CACHE_DIR": "cupy",
                 "TORCHINDUCTOR_CACHE_DIR": "inductor"}


@dataclass
class Outcome:
    """What a worker process gave back: its JSON result, or why there is none."""

    result: dict | None
    error: str | None
    t_launch: float          # time.time() just before the process was started
    wall_s: float
    nvidia_smi_mib: float | None  # the card's used memory, the most seen while it ran (None: no nvidia-smi)


def kernel_cache_env(folder: Path) -> dict:
    """Environment that points every kernel cache (Triton, Numba, CuPy, TorchInductor) into `folder`:
    a new folder is a cold cache, a reused one a warm cache."""
    return {var: str(folder / sub) for var, sub in KERNEL_CACHES.items()}


class NvidiaSmiPeak:
    """Polls nvidia-smi's used memory of the worker's GPU every `interval` seconds while in a `with`."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.peak: float | None = None
        self._stop = threading.Event()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        self.index = visible if visible.isdigit() else "0"
        self.available = shutil.which("nvidia-smi") is not None

    def _poll(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "-i", self.index, "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
                mib = float(out.stdout.strip().splitlines()[0])
                self.peak = mib if self.peak is None else max(self.peak, mib)
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.available:
            self._stop.set()
            self._thread.join()


def launch(cmd: list[str], env_extra: dict | None = None, timeout_s: float = 600.0, watch_gpu: bool = False,
           log=None) -> Outcome:
    """Run one worker process; its result is the JSON object on the last line of its stdout. Its
    stderr goes to `log` line by line (or is kept for the error message)."""
    env = {**os.environ, **(env_extra or {})}
    poller = NvidiaSmiPeak() if watch_gpu else None
    t_launch = time.time()
    try:
        with poller or _nothing():
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return Outcome(None, f"timed out after {timeout_s:.0f} s\n{tail}", t_launch, time.time() - t_launch,
                       poller.peak if poller else None)
    wall = time.time() - t_launch
    if log is not None and proc.stderr.strip():
        for line in proc.stderr.strip().splitlines()[-20:]:
            log(f"    | {line}")
    lines = proc.stdout.strip().splitlines()
    result = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            result = None
    if proc.returncode != 0 or result is None:
        return Outcome(None, f"exit status {proc.returncode}\n{proc.stderr[-3000:]}", t_launch, wall,
                       poller.peak if poller else None)
    return Outcome(result, None, t_launch, wall, poller.peak if poller else None)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def ours_command(spec: dict) -> list[str]:
    return [sys.executable, "-m", "euler_core.measure.worker", json.dumps(spec)]


def reference_command(python: str, config: dict, B: int, T: int, *, compile: bool, warmup: int = 0,
                      steps: int = 0, init: str | None = None, plan: str | None = None, seed: int = 0,
                      device: str | None = None) -> list[str]:
    """The PyTorch reference (euler_torch_reference.gpt2) for our model config (a GPTConfig dict)."""
    m = config["vocab_multiple"]
    ref_config = {k: config[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")}
    ref_config["padded_vocab"] = (config["vocab_size"] + m - 1) // m * m
    cmd = [python, "-m", "euler_torch_reference.gpt2", "--config", json.dumps(ref_config), "--B", str(B),
           "--T", str(T), "--warmup", str(warmup), "--steps", str(steps), "--seed", str(seed)]
    cmd += ["--compile"] if compile else []
    cmd += ["--init", init] if init else []
    cmd += ["--plan", plan] if plan else []
    cmd += ["--device", device] if device else []
    return cmd


def reference_env() -> dict:
    """PYTHONPATH with the reference's source folder first (it needs no install)."""
    paths = [str(REFERENCE_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(paths)}


def torch_python(given: str | None = None) -> str:
    """The interpreter that runs the reference: --torch-python, else $EULER_TORCH_PYTHON, else this one."""
    return given or os.environ.get("EULER_TORCH_PYTHON") or sys.executable


def torch_unavailable_reason(python: str) -> str | None:
    """None when `python` can import torch, else why not."""
    try:
        out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python} cannot run: {e}"
    if out.returncode != 0:
        return (f"{python} cannot import torch (give --torch-python or $EULER_TORCH_PYTHON: an interpreter "
                "with torch installed)")
    return None


# ---- our worker: the roles ------------------------------------------------------------------------------
def reference_python(given: str | None, references, command: str) -> str:
    """torch_python(given); when `references` asks for the PyTorch reference, a ValueError naming
    `command` if that interpreter cannot import torch (before any measurement starts)."""
    python = torch_python(given)
    if references:
        reason = torch_unavailable_reason(python)
        if reason:
            raise ValueError(f"{command} --reference: {reason}")
    return python


def peak_rss_mb() -> float | None:
    """This process's peak resident memory (VmHWM: fresh at exec); None where /proc is absent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
