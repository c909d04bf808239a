"""`euler bench step`: where a training step's time goes, op by op, in a real `euler train` run.

Every kernel call of the run (euler_core.kernels.Kernel.forward/backward: the model's ops and the
optimizer's adamw) is timed on the device it runs on: between two CUDA events on CuPy's current
stream on the GPU (no synchronisation per call, so the run keeps its pace), with
`time.perf_counter` on the CPU. A step ends where `TrainStep.run` returns (run eagerly: a replayed CUDA graph has no kernel calls
to time); there the stream is synchronised once, the step's events are read, and the step's wall time is taken.

The report, per (op, direction): calls per step and the median over the profiled steps of the time
per step, as a share of the median step. What no kernel accounts for, the wall time minus the sum of
the kernel times, is the rest: the Python between launches, CuPy work outside the ops (zeroing the
gradient buffer, the gradient norm, the loss average), data loading and logging. The first `skip`
steps are left out (Triton compiles there, and the memory pools grow). Validation and the final
sample also call kernels: run with --eval-every 0 (the sample after the last step falls outside
every step and is not counted).
"""

from __future__ import annotations

import contextlib
import statistics
import time


class StepProfile:
    """Collects per-call kernel times and splits them into steps (see the module docstring)."""

    def __init__(self, skip: int = 2):
        self.skip = skip
        self.pending: list = []     # (op, direction, start, end): events, or perf_counter floats
        self.steps: list[dict] = []  # per step: {"wall_s", "ops": {(op, direction): [seconds, calls]}}
        self._last = None
        self._cupy = None

    def _timed(self, op: str, direction: str, device: str, call):
        if device == "cuda":
            if self._cupy is None:
                import cupy
                self._cupy = cupy
            start, end = self._cupy.cuda.Event(), self._cupy.cuda.Event()
            start.record()
            result = call()
            end.record()
        else:
            start = time.perf_counter()
            result = call()
            end = time.perf_counter()
        self.pending.append((op, direction, start, end))
        return result

    def end_step(self) -> None:
        if self._cupy is not None:  # the whole device: the step ran on TrainStep's own stream, not the current one
            self._cupy.cuda.Device().synchronize()
        now = time.perf_counter()
        ops: dict = {}
        for op, direction, start, end in self.pending:
            s = (self._cupy.cuda.get_elapsed_time(start, end) * 1e-3 if not isinstance(start, float) else end - start)
            entry = ops.setdefault((op, direction), [0.0, 0])
            entry[0] += s
            entry[1] += 1
        if self._last is not None:
            self.steps.append({"wall_s": now - self._last, "ops": ops})
        self._last = now
        self.pending = []

    @contextlib.contextmanager
    def active(self):
        """Time every Kernel call and mark the steps while inside."""
        from euler_core.kernels import Kernel
        from euler_core.step import TrainStep
        step = TrainStep.run
        profile = self

        def timed(kernel, direction, call):
            return profile._timed(kernel.spec.name, direction, kernel.device, call)

        def marked_step(trainer, *args, **kwargs):
            result = step(trainer, *args, **kwargs)
            profile.end_step()
            return result

        TrainStep.run = marked_step
        Kernel.watchers.append(timed)
        self.end_step()  # the first step starts here
        try:
            yield self
        finally:
            Kernel.watchers.remove(timed)
            TrainStep.run = step

    def summary(self) -> dict:
        """Medians over the profiled steps (after `skip`): wall time, and per (op, direction) time and calls."""
        steps = self.steps[self.skip:] or self.steps
        if not steps:
            return {"steps": 0, "wall_s": None, "rows": []}
        wall = statistics.median(s["wall_s"] for s in steps)
        keys = dict.fromkeys(k for s in steps for k in s["ops"])
        rows = []
        for op, direction in keys:
            times = [s["ops"].get((op, direction), [0.0, 0])[0] for s in steps]
            calls = steps[-1]["ops"].get((op, direction), [0.0, 0])[1]
            rows.append({"op": op, "direction": direction, "calls": calls, "seconds": statistics.median(times),
                         "share": statistics.median(times) / wall})
        rows.sort(key=lambda r: -r["seconds"])
        kernels = statistics.median(sum(v[0] for v in s["ops"].values()) for s in steps)
        return {"steps": len(steps), "skipped": len(self.steps) - len(steps), "wall_s": wall,
                "kernels_s": kernels, "rest_s": wall - kernels, "rows": rows}


def table(summary: dict) -> str:
    """The summary as a markdown table."""
    if not summary["steps"]:
        return "no complete step was profiled"
    wall = summary["wall_s"]
    lines = [f"median step {wall * 1e3:.1f} ms over {summary['steps']} steps (the first {summary['skipped']} left out); "
             f"kernels {summary['kernels_s'] * 1e3:.1f} ms ({100 * summary['kernels_s'] / wall:.0f}%), "
             f"the rest {summary['rest_s'] * 1e3:.1f} ms ({100 * summary['rest_s'] / wall:.0f}%)", "",
             "| op | direction | calls/step | ms/step | % of step |", "|---|---|---|---|---|"]
    for r in summary["rows"]:
        lines.append(f"| {r['op']} | {r['direction']} | {r['calls']} | {r['seconds'] * 1e3:.2f} | {100 * r['share']:.1f}% |")
    lines.append(f"| (outside the kernels) | | | {summary['rest_s'] * 1e3:.2f} | {100 * summary['rest_s'] / wall:.1f}% |")
    return "\n".join(lines)
