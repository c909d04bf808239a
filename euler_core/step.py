"""One optimizer step on any device: what `euler train`, `euler sft` and `euler bench train` all call.

    step = TrainStep(model, optimizer, batch_size=B, seq_len=T, accum=K, grad_clip=1.0)
    result = step.run(batches, lr)     # batches: K (inputs, targets) pairs of host int arrays (B,T)
    result.loss, result.grad_norm      # floats; reading one waits for the device

A step: zero the gradients; for each of the K micro-batches, copy its tokens, targets and loss
weights into the step's fixed input buffers and run forward and backward (the gradients accumulate,
the micro-batch's per-position losses are kept); take the sum of squares of the whole gradient (the
`sumsq` op); one AdamW update clipped by it. Everything stays on the device: clipping happens in the
adamw kernel, a non-finite gradient norm makes it skip the update (so a bad step corrupts nothing),
and the learning rate and step number are device scalars written before the step. The host only
prepares the batches and reads the result.

On the GPU, with `graph` True (the default there), the first step runs eagerly: Triton compiles its
kernels and everything is checked on the way. From the second step on, the micro-batch's forward +
backward and the update are two CUDA graphs (euler_core/graph.py), captured once and replayed: one
replay per micro-batch and one for the update, whatever the number of kernels. `graph=False` keeps
every step eager (the debugging path, and the only path on the CPU).

The loss of a step is sum over micro-batches k and positions n of losses_k[n] * dlosses_k[n], with
dlosses_k = (valid_k / count_k) / K: the mean over each micro-batch's valid positions, averaged over
the micro-batches. The weights are computed on the host from the host targets, so the device never
has to count anything.

A bad step. When the loss or the gradient norm comes back non-finite, `StepResult.check()` runs the
same micro-batches again, eagerly, checking the output of every kernel call (the parameters did not
change: the update was skipped), and raises FloatingPointError naming the first op whose output went
non-finite. `check_finite=True` checks every call of every step that way (slow; a debug mode).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from .device import array_module, device_of, to_device
from .kernels import Kernel
from .model import GPT, loss_weights
from .ops import OPS
from .optim import AdamW


@dataclass
class StepResult:
    """The outcome of one step; the floats are read on first access. On the GPU the step's per-position
    losses and gradient sum of squares were copied into pinned host memory at the end of the step, in
    stream order: reading them waits for this step only, not for steps queued after it (the training
    loop reads step k while step k+1 runs: euler_core/train.py, run_loop)."""

    trainer: "TrainStep"
    step: int                  # the optimizer step this was (1 = the first)
    dlosses: np.ndarray        # (K, N) host copy of the loss weights
    batches: list
    losses: np.ndarray         # (K, N) the step's losses, host memory (filled when `done` has passed)
    sumsq: np.ndarray          # (1,) the gradient's sum of squares, likewise
    done: object = None        # a CUDA event recorded after the copies (None on the CPU: already there)
    _loss: float | None = None
    _norm: float | None = None

    def _read(self) -> None:
        if self._loss is None:
            if self.done is not None:
                self.done.synchronize()
            self._loss = float(np.sum(self.losses.astype(np.float64) * self.dlosses))
            self._norm = float(math.sqrt(float(self.sumsq[0])))

    @property
    def loss(self) -> float:
        self._read()
        return self._loss

    @property
    def grad_norm(self) -> float:
        self._read()
        return self._norm

    def check(self) -> None:
        """Raise FloatingPointError if the step went bad, naming the first op that made a NaN/Inf."""
        if math.isfinite(self.loss) and math.isfinite(self.grad_norm):
            return
        self.trainer.optimizer.step_count = self.step - 1  # the update was skipped on the device: not counted
        where = self.trainer.find_nonfinite(self.batches)
        raise FloatingPointError(
            f"step {self.step - 1}: loss {self.loss}, gradient norm {self.grad_norm}; the update was skipped "
            f"(the weights are those of step {self.step - 1}). {where}. Lower --lr, or check the data")


class TrainStep:
    """The preallocated step of `model` at (batch_size, seq_len) with `accum` micro-batches."""

    def __init__(self, model: GPT, optimizer: AdamW, batch_size: int, seq_len: int, accum: int = 1,
                 grad_clip: float = 1.0, graph: bool | None = None, check_finite: bool = False):
        if batch_size < 1 or seq_len < 1 or accum < 1:
            raise ValueError(f"TrainStep: batch_size, seq_len and accum must be >= 1, got {batch_size}, {seq_len}, {accum}")
        if seq_len > model.config.block_size:
            raise ValueError(f"TrainStep: seq_len {seq_len} exceeds the model's block_size {model.config.block_size}")
        self.model, self.optimizer = model, optimizer
        self.B, self.T, self.accum = batch_size, seq_len, accum
        with self._memory_named():
            self._setup(model, batch_size, seq_len, accum, grad_clip, graph, check_finite)

    def _setup(self, model, batch_size, seq_len, accum, grad_clip, graph, check_finite) -> None:
        """The step's settings and its device buffers (the arena, inputs, results)."""
        self.grad_clip = grad_clip
        self.check_finite = check_finite
        on_gpu = model.device == "cuda" and all(v.device == "cuda" for op, v in model.kernels.variants.items()
                                                if not getattr(OPS[op], "inference_only", False))
        if graph and not on_gpu:
            raise ValueError("TrainStep: a CUDA graph needs the model and every selected kernel on the GPU "
                             f"(--backend {model.kernels.text!r} runs some on the CPU); use --no-graph")
        self.graph = on_gpu if graph is None else graph
        self.graph = self.graph and not check_finite
        xp, N = model.xp, batch_size * seq_len
        self.acts = model.activations(batch_size, seq_len)
        # the step's inputs, refilled before each micro-batch
        self.tokens = xp.zeros((batch_size, seq_len), dtype=np.int32)
        self.targets = xp.zeros((batch_size, seq_len), dtype=np.int32)
        self.dlosses = xp.zeros(N, dtype=model.losses_dtype)
        self.lr = xp.zeros(1, dtype=np.float32)      # device scalars of adamw
        self.step_number = xp.zeros(1, dtype=np.float32)
        # what the step leaves behind to read
        self.losses = xp.zeros((accum, N), dtype=model.losses_dtype)
        self.sumsq = xp.zeros(1, dtype="float64" if model.master_dtype == "float64" else "float32")
        self.graphs = None  # (micro-batch graph, update graph) once captured
        self.eager_steps = 0  # steps run eagerly so far (a capture needs one first: kernels compile there)
        on_device = not isinstance(self.tokens, np.ndarray)
        self._batch_staging = _Staging(2 * accum) if on_device else None  # two steps' micro-batches in flight
        self._scalar_staging = _Staging(2) if on_device else None

    # ---- the host's part ----------------------------------------------------------------------
    def _prepare(self, inputs, targets) -> tuple:
        """Host checks and conversions of one micro-batch: (tokens, targets) int32, dlosses (N,)."""
        cfg = self.model.config
        inputs, targets = np.asarray(inputs), np.asarray(targets)
        for name, a in (("inputs", inputs), ("targets", targets)):
            if a.shape != (self.B, self.T):
                raise ValueError(f"TrainStep: {name} must be (B,T) = {(self.B, self.T)}, got {a.shape}")
            if not np.issubdtype(a.dtype, np.integer):
                raise TypeError(f"TrainStep: {name} must be integer token ids, got {a.dtype}")
        lo, hi = int(inputs.min()), int(inputs.max())
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"TrainStep: token ids must lie in [0, {cfg.vocab_size}) (the vocabulary), got [{lo}, {hi}]")
        lo, hi = int(targets.min()), int(targets.max())
        if lo < -1 or hi >= cfg.vocab_size:
            raise ValueError(f"TrainStep: targets must lie in [-1, {cfg.vocab_size}) (-1 = no loss), got [{lo}, {hi}]")
        weights = loss_weights(targets, 1.0 / self.accum).reshape(-1)  # float64: the host's loss is exact
        return inputs.astype(np.int32), targets.astype(np.int32), weights

    def _upload(self, tokens, targets, dlosses) -> None:
        self._copy_in(self._batch_staging, ((self.tokens, tokens), (self.targets, targets), (self.dlosses, dlosses)))

    def _set_scalars(self, lr: float, step: int) -> None:
        self._copy_in(self._scalar_staging, ((self.lr, np.float32(lr)), (self.step_number, np.float32(step))))

    @staticmethod
    def _copy_in(staging, pairs) -> None:
        """Fill device buffers from host values: on the CPU in place, on the GPU through `staging`."""
        if staging is None:
            for buf, host in pairs:
                buf[...] = host
        else:
            staging.upload(pairs)

    # ---- the device's part ----------------------------------------------------------------------
    def _micro(self) -> None:
        """One micro-batch's forward and backward, from the input buffers (capturable)."""
        self.model.forward_train(self.acts, self.tokens, self.targets, self.dlosses)
        self.model.backward()

    def _update(self) -> None:
        """The gradient's sum of squares, then AdamW clipped by it (capturable)."""
        self.model.grad_sumsq(out=self.sumsq)
        self.optimizer.update(self.lr, self.step_number, grad_sumsq=self.sumsq, max_norm=self.grad_clip)

    def run(self, batches, lr: float) -> StepResult:
        """One optimizer step over `accum` micro-batches at learning rate `lr` (returns at once on the
        GPU; the result's floats wait for the device)."""
        if len(batches) != self.accum:
            raise ValueError(f"TrainStep: {len(batches)} micro-batches given, the step takes {self.accum}")
        prepared = [self._prepare(x, y) for x, y in batches]
        step = self.optimizer.step_count + 1
        with self._memory_named(), self._stream():
            if self.graph and self.graphs is None and self.eager_steps:
                self._capture()
            self._set_scalars(lr, step)
            self.model.zero_grad()
            for k, (tokens, targets, dlosses) in enumerate(prepared):
                self._upload(tokens, targets, dlosses)
                if self.graphs is not None:
                    self.graphs[0].replay()
                else:
                    with _checking(self.check_finite):
                        self._micro()
                self.losses[k][...] = self.acts.losses
            if self.graphs is not None:
                self.graphs[1].replay()
            else:
                with _checking(self.check_finite):
                    self._update()
            losses, sumsq, done = self._snapshot()
        self.optimizer.step_count = step
        self.eager_steps += self.graphs is None
        result = StepResult(self, step, np.stack([d for _, _, d in prepared]), batches, losses, sumsq, done)
        if self.check_finite:
            result.check()
        return result

    def _snapshot(self) -> tuple:
        """(losses, sumsq, event): host copies of the step's results. On the GPU, asynchronous copies
        into pinned memory queued on the step's stream, then an event to wait on (the buffers are
        reused by the next step, which may already be queued when the caller reads this one)."""
        if isinstance(self.losses, np.ndarray):
            return self.losses.copy(), self.sumsq.copy(), None
        import cupy
        import cupyx
        stream = cupy.cuda.get_current_stream()
        losses = cupyx.empty_pinned(self.losses.shape, self.losses.dtype)
        sumsq = cupyx.empty_pinned(self.sumsq.shape, self.sumsq.dtype)
        self.losses.get(stream=stream, out=losses, blocking=False)
        self.sumsq.get(stream=stream, out=sumsq, blocking=False)
        return losses, sumsq, stream.record()

    @contextlib.contextmanager
    def _memory_named(self):
        """Out of device memory: say which batch size fits, not just that memory ran out."""
        try:
            yield
        except Exception as e:
            if type(e).__name__ != "OutOfMemoryError":
                raise
            import cupy
            from .activations import largest_batch, step_bytes
            m = self.model
            need = step_bytes(m.config, self.B, self.T, m.dtype, m.plan)["total"]
            total = cupy.cuda.Device().mem_info[1]
            fits = largest_batch(m.config, self.T, m.dtype, m.plan, total)
            raise MemoryError(
                f"out of GPU memory for a step at batch size {self.B} x {self.T} tokens ({m.dtype}): it needs about "
                f"{need / 2**30:.1f} GiB and this GPU has {total / 2**30:.1f} GiB in all. The largest batch size "
                f"that fits is about {fits}: use --batch-size {max(1, fits)} (and --total-batch to keep the tokens "
                f"per step, through gradient accumulation)") from e

    def _stream(self):
        if self.model.device != "cuda":
            return contextlib.nullcontext()
        from .graph import work_stream
        return work_stream()

    def _capture(self) -> None:
        import cupy

        from .graph import CapturedGraph
        cupy.get_default_memory_pool().free_all_blocks()  # the eager step's temporaries: the graphs make their own
        self.graphs = (CapturedGraph(self._micro, "training step's forward and backward"),
                       CapturedGraph(self._update, "training step's optimizer update"))

    # ---- a bad step ---------------------------------------------------------------------------
    def find_nonfinite(self, batches) -> str:
        """Run `batches` again eagerly, checking every kernel call's output; name the first bad one."""
        with self._stream():
            try:
                with _checking(True):
                    self.model.zero_grad()
                    for x, y in batches:
                        tokens, targets, dlosses = self._prepare(x, y)
                        self._upload(tokens, targets, dlosses)
                        self._micro()
                    self.model.grad_sumsq(out=self.sumsq)
            except _NonFinite as e:
                return f"The first non-finite output: {e}"
        return "Run again eagerly, every kernel's output was finite: the inputs or the weights are the cause"


class _Staging:
    """Pinned host buffers that uploads to the GPU go through. A copy from pageable memory may wait
    for the stream, which would stall the host behind a step still queued; from pinned memory it is
    queued like a kernel. `slots` sets of buffers are used in turn, each refilled only once the copies
    queued from it have run (its event): with two steps in flight, a step's inputs stay untouched
    until the device has read them."""

    def __init__(self, slots: int):
        self.buffers: list = [None] * slots
        self.events: list = [None] * slots
        self.turn = 0

    def upload(self, pairs) -> None:
        import cupy
        import cupyx
        i, self.turn = self.turn, (self.turn + 1) % len(self.buffers)
        if self.events[i] is not None:
            self.events[i].synchronize()
        if self.buffers[i] is None:
            self.buffers[i] = [cupyx.empty_pinned(buf.shape, buf.dtype) for buf, _ in pairs]
        stream = cupy.cuda.get_current_stream()
        for (buf, host), pinned in zip(pairs, self.buffers[i]):
            pinned[...] = host
            buf.set(pinned, stream=stream)
        self.events[i] = stream.record()


class _NonFinite(FloatingPointError):
    pass


class _FiniteCheck:
    """A Kernel watcher that raises _NonFinite naming the call whose output holds a NaN or Inf."""

    def __init__(self):
        self.calls = 0

    def __call__(self, kernel: Kernel, direction: str, call):
        result = call()
        self.calls += 1
        arrays = [result[0]] if direction == "forward" else list(result.values())
        for a in arrays:
            if isinstance(a, tuple):
                arrays.extend(a)
                continue
            if a is None or not hasattr(a, "dtype") or a.dtype.kind not in "fV":  # V: ml_dtypes' bfloat16
                continue
            xp = array_module(device_of(a))
            finite = xp.isfinite(a if a.dtype.kind == "f" else a.astype(np.float32))
            if not bool(finite.all()):
                bad = int(a.size - int(finite.sum()))
                raise _NonFinite(f"{kernel.spec.name} {direction} ({kernel.variant.qualname}), call {self.calls} "
                                 f"of the step: {bad} of {a.size} elements of shape {tuple(a.shape)}")
        return result


class _checking:
    """Inside: every kernel call's outputs are checked for NaN/Inf (when `on`)."""

    def __init__(self, on: bool):
        self.watch = _FiniteCheck() if on else None

    def __enter__(self):
        if self.watch is not None:
            Kernel.watchers.append(self.watch)

    def __exit__(self, *exc):
        if self.watch is not None:
            Kernel.watchers.remove(self.watch)
