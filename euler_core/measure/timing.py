"""Timing one call many times, honestly: warm-up, batches of back-to-back calls, rotating inputs,
percentiles. Used by the op benchmarks (ops.py) and the peak measurements (peaks.py).

A *sample* is one batch of `k` back-to-back calls timed as a whole, divided by `k`:
- on the GPU, between two CUDA events recorded on the current stream around the batch, with the
  batch queued behind a *spin kernel*: one GPU thread that waits, on the GPU's own clock, about 1.5x
  as long as the host took to launch the previous batch. While it spins, Python launches the whole
  batch; when it ends, the GPU finds every call queued and runs them back to back. So a sample is the
  GPU's time for the calls, not Python's time to launch them (for a 20 us kernel whose Python side
  costs 100 us, back-to-back calls would measure the Python). That is the time a CUDA graph of the
  step would see, and it treats every backend alike whatever its Python costs. The Python side is
  measured too: the host seconds per call (`host_samples`), what a step run without a graph pays
  where it exceeds the GPU's time. A batch long enough (>= `sample_s`, at least `min_batch_gpu`
  calls) amortises the events' own overhead.
- on the CPU, with `time.perf_counter` around the batch, the garbage collector off, so nothing else
  in this process runs in between. Batches matter less here, but make microsecond kernels measurable.
Successive calls cycle through `n_sets` copies of the inputs, so a kernel whose inputs fit in a cache
is not flattered by finding them there from the previous call.

What it does not do: pin CPU frequency, isolate cores, or lock GPU clocks. The load average before
and after a run is kept in its records so a reader can judge how quiet the machine was.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TimingConfig:
    warmup_s: float = 0.1        # warm-up lasts at least this long ...
    warmup_calls: int = 2        # ... and at least this many calls
    sample_s: float = 2e-3       # a batch lasts about this long
    min_batch_gpu: int = 10      # GPU batches have at least this many calls
    max_batch: int = 10_000
    min_samples: int = 10
    max_samples: int = 200
    min_time_s: float = 0.5      # keep sampling until this much time was spent (and min_samples taken)
    max_time_s: float = 10.0     # stop after this long, once 3 samples exist
    cache_bytes: int = 128 << 20  # rotate through enough input copies to exceed this much memory
    max_sets: int = 8

    @classmethod
    def quick(cls) -> "TimingConfig":
        """For tests and CI: a handful of short samples."""
        return cls(warmup_s=0.0, warmup_calls=1, sample_s=2e-4, min_samples=3, max_samples=5, min_time_s=0.0,
                   max_time_s=0.5, cache_bytes=1 << 20, max_sets=2)

    def input_sets(self, bytes_per_set: int) -> int:
        """How many copies of the inputs to rotate through."""
        return max(1, min(self.max_sets, math.ceil(self.cache_bytes / max(1, bytes_per_set))))


class CpuTimer:
    device = "cpu"
    host_per_call = None   # on the CPU the host time is the time

    def batch(self, call, indices) -> float:
        """Seconds per call of call(i) for i in indices, run back to back."""
        t0 = time.perf_counter()
        for i in indices:
            call(i)
        return (time.perf_counter() - t0) / len(indices)

    def sync(self) -> None:
        pass


_SPIN_SOURCE = r"""
extern "C" __global__ void euler_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""
MAX_SPIN_S = 0.5


def spin_seconds(host_per_call: float | None, calls: int) -> float:
    """How long the GPU waits before a batch: 1.5x the host's launch time for `calls` calls at the
    last measured rate, plus 50 us; 1 ms before anything was measured; at most MAX_SPIN_S."""
    if host_per_call is None:
        return 1e-3
    return min(MAX_SPIN_S, 1.5 * host_per_call * calls + 50e-6)


class CudaTimer:
    """CUDA events on CuPy's current stream around each batch (every kernel contract launches there),
    the batch queued behind a spin kernel (see the module docstring)."""

    device = "cuda"

    def __init__(self):
        import cupy
        self.cupy = cupy
        self.start = cupy.cuda.Event()
        self.end = cupy.cuda.Event()
        self.spin = cupy.RawKernel(_SPIN_SOURCE, "euler_spin")
        self.host_per_call: float | None = None   # host seconds per call in the last batch

    def batch(self, call, indices) -> float:
        stream = self.cupy.cuda.get_current_stream()
        stream.synchronize()                  # nothing from before is still queued inside our window
        wait_ns = int(spin_seconds(self.host_per_call, len(indices)) * 1e9)
        self.spin((1,), (1,), (np.uint64(wait_ns),))   # on the current stream, before the batch
        self.start.record(stream)
        t0 = time.perf_counter()
        for i in indices:
            call(i)
        self.host_per_call = (time.perf_counter() - t0) / len(indices)
        self.end.record(stream)
        self.end.synchronize()
        ms = self.cupy.cuda.get_elapsed_time(self.start, self.end)
        return ms * 1e-3 / len(indices)

    def sync(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()


def timer_for(device: str):
    return CudaTimer() if device == "cuda" else CpuTimer()


@dataclass
class Timing:
    samples: list[float]   # seconds per call, one per batch
    calls_per_sample: int
    input_sets: int
    host_samples: list[float] = field(default_factory=list)  # GPU only: host (Python) seconds per call

    @property
    def host_p50(self) -> float | None:
        return float(np.percentile(self.host_samples, 50)) if self.host_samples else None

    @property
    def p20(self) -> float:
        return float(np.percentile(self.samples, 20))

    @property
    def p50(self) -> float:
        return float(np.percentile(self.samples, 50))

    @property
    def p80(self) -> float:
        return float(np.percentile(self.samples, 80))


def measure(call, n_sets: int, timer, cfg: TimingConfig) -> Timing:
    """Warm up, choose the batch size, then sample call(i) (i cycling over range(n_sets))."""
    counter = 0

    def next_indices(k):
        nonlocal counter
        idx = [(counter + j) % n_sets for j in range(k)]
        counter += k
        return idx

    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        t0, calls, per_call = time.perf_counter(), 0, None
        while calls < cfg.warmup_calls or time.perf_counter() - t0 < cfg.warmup_s:
            per_call = timer.batch(call, next_indices(1))
            calls += 1
            if time.perf_counter() - t0 > cfg.max_time_s:
                break
        # the batch size from an estimate over one pass of the input sets
        per_call = timer.batch(call, next_indices(n_sets)) if per_call is None or per_call < cfg.sample_s else per_call
        k = max(1, math.ceil(cfg.sample_s / max(per_call, 1e-9)))
        if timer.device == "cuda":
            k = max(k, cfg.min_batch_gpu)
        k = min(k, cfg.max_batch)
        samples: list[float] = []
        host: list[float] = []
        start = time.perf_counter()
        while True:
            samples.append(timer.batch(call, next_indices(k)))
            if timer.host_per_call is not None:
                host.append(timer.host_per_call)
            spent = time.perf_counter() - start
            if len(samples) >= cfg.max_samples:
                break
            if len(samples) >= cfg.min_samples and spent >= cfg.min_time_s:
                break
            if len(samples) >= 3 and spent >= cfg.max_time_s:
                break
    finally:
        if was_enabled:
            gc.enable()
    return Timing(samples, k, n_sets, host)
