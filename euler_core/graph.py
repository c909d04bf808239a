"""CUDA graphs: a function's GPU work captured once and replayed, so Python launches nothing per step.

A GPT-2 step is hundreds of kernel launches; launched one by one from Python each costs 5-500 us
of host time (../shared/MACHINE-NOTES.md), more than many of the kernels themselves. Captured into a
CUDA graph, the whole sequence replays from one call for about 1 us a kernel. The rules a captured
function must keep (docs/op-contracts.md, "CUDA graphs"):

- every kernel has been launched once before (Triton compiles and loads modules on a first launch,
  which a capture cannot hold), so the caller runs the function eagerly first;
- no host synchronisation and no device-to-host copy (`.get()`, `.item()`, `float(array)`), no
  Python branch on a device value, no CuPy function backed by cuBLAS, cuRAND or thrust;
- inputs that change between replays live in fixed device buffers that the caller refills before
  each replay (`buffer[...] = new` or `buffer.set(host)` on `stream`), outside the graph.

Memory. Arrays allocated while capturing (a kernel's saved statistics, scratch, split-K partials,
TMA descriptors) come from a memory pool private to the graph: their addresses are baked into the
graph, so nothing else may ever reuse them. The pool lives as long as the graph; the arrays a caller
keeps from the capture (outputs it reads after a replay) stay valid across replays.

Everything runs on one CuPy stream, `work_stream()`: the eager warm-up, the capture, the replays,
and the caller's input copies, so their order is the stream's order.

    with work_stream():
        step()                              # eager: compiles every kernel
        graph = CapturedGraph(step, "training step")
        graph.replay()                      # the same work again, on the stream

A capture that fails names the op that broke it (`GraphCaptureError`): the kernel dispatcher tells
this module which op is running (`euler_core.kernels.Kernel.watchers`).
"""

from __future__ import annotations

import contextlib

from .kernels import Kernel


class GraphCaptureError(RuntimeError):
    """The function cannot be captured as a CUDA graph; the message names the op that broke it."""


_STREAM: list = []


def work_stream():
    """The process's CuPy stream for GPU training and generation (created on first use)."""
    if not _STREAM:
        import cupy
        cupy.cuda.Device().synchronize()  # work queued on the default stream before it is done
        _STREAM.append(cupy.cuda.Stream())  # blocking: ordered with work on the default stream too
    return _STREAM[0]


class _CaptureWatch:
    """Checks after every kernel call during a capture that the capture is still valid, and keeps
    the op running when something raised, so the error can name it."""

    def __init__(self, stream):
        self.stream = stream
        self.last = None  # "op direction (variant)" of the call in flight or last completed
        self.broken_by = None

    def __call__(self, kernel: Kernel, direction: str, call):
        self.last = f"{kernel.spec.name} {direction} ({kernel.variant.qualname})"
        try:
            result = call()
        except Exception:
            self.broken_by = self.broken_by or self.last
            raise
        if self.broken_by is None and not self._capturing():
            self.broken_by = self.last
        return result

    def _capturing(self) -> bool:
        from cupy_backends.cuda.api import runtime
        try:
            return runtime.streamIsCapturing(self.stream.ptr) == 1  # 1: active, 2: invalidated
        except runtime.CUDARuntimeError:
            return False


class CapturedGraph:
    """`fn()`'s GPU work on `work_stream()`, captured once; `replay()` runs it again.

    `what` names the work in errors ("training step"). The caller must have run `fn` eagerly once
    (see the module docstring)."""

    def __init__(self, fn, what: str):
        import cupy
        self.what = what
        self.stream = work_stream()
        self.pool = cupy.cuda.MemoryPool()
        watch = _CaptureWatch(self.stream)
        graph, error = None, None
        with self.stream, cupy.cuda.using_allocator(self.pool.malloc), _watching(watch):
            self.stream.begin_capture()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - re-raised below, named
                error = e
            finally:
                try:
                    graph = self.stream.end_capture()
                except Exception as e:  # noqa: BLE001 - an invalidated capture ends with an error
                    error = error or e
        if error is not None or watch.broken_by is not None:
            culprit = watch.broken_by or watch.last or "work outside any op"
            raise GraphCaptureError(
                f"the {what} cannot be captured as a CUDA graph: {culprit} did something a graph cannot "
                f"hold (a host synchronisation, a device-to-host copy, a cuBLAS/thrust call or an "
                f"allocation outside the capture){f': {type(error).__name__}: {error}' if error else ''}. "
                "Run with --no-graph, or select another variant of that op") from error
        self.graph = graph
        self.graph.upload(self.stream)  # instantiate now, not at the first replay

    def replay(self) -> None:
        """Queue the captured work on the stream (returns at once)."""
        self.graph.launch(stream=self.stream)


@contextlib.contextmanager
def _watching(watch):
    Kernel.watchers.append(watch)
    try:
        yield
    finally:
        Kernel.watchers.remove(watch)
