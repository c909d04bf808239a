"""Which triton ops survive a CUDA-graph capture: each op's forward + backward captured and replayed
against an eager call, bit for bit, at GPT-2 124M's shapes in mixed precision (bfloat16 inputs,
float32 parameter gradients). Run by bench/device/mixed.sh on the H200.

For every op (matmul at each of GPT-2's five linear shapes), through the dispatcher as the core calls it:

    eager     forward(out=preallocated) + backward(float32 parameter gradients zeroed first,
              preallocated activation-gradient buffers); the first one also compiles every kernel,
              as the core's eager first step does
    capture   the same calls on a non-blocking stream (begin_capture .. end_capture), with every
              CuPy allocation (saved values, scratch, Triton's TMA scratch) from a private
              cupy.cuda.MemoryPool (cupy.cuda.using_allocator)
    replay    into buffers poisoned with NaN: outputs and gradients bitwise equal to the eager call?
    new data  new values written into the same input arrays; eager again, replay again: equal?
              (the graph reads the live inputs; nothing was baked in at capture)
    time      ms per forward + backward, eager (Python launches) and replayed (one graph launch)

adamw runs its update alone (no backward), as the mixed-precision step calls it (float32 state, a
bf16 param_copy, clipping by grad_sumsq, lr and step as device scalars whose new values are
written into the same arrays), its state reset before each run; sumsq its forward alone.

Then the embedding backward's radix sort at N = 65536 and 131072 ids: its time beside cupy.argsort
(what it replaced), its result against a stable argsort, and the whole embedding backward on
uniform ids and on Zipf-distributed ids (long runs of a few frequent tokens, as real text has).

--dry runs the same logic on the CPU (Triton's interpreter, float16, tiny shapes, "replay" = the
calls again): a check of this script, not of capture.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, when run as a script

from conformance.arrays import np_dtype, param_grad_dtype  # noqa: E402
from euler_core.measure.ops import make_inputs  # noqa: E402
from euler_core.kernels import Kernel, Kernels  # noqa: E402
from euler_core.ops import OPS  # noqa: E402

def cases(B: int, T: int, dry: bool) -> list[tuple[str, str, dict]]:
    """(label, op, dims) at GPT-2 124M's shapes (C=768, 12 heads, V=50304), or tiny ones for --dry."""
    if dry:
        B, T, C, V, NH, F = 2, 16, 64, 300, 2, 128
    else:
        C, V, NH, F = 768, 50304, 12, 3072
    N = B * T
    return [
        ("embedding", "embedding", {"B": B, "T": T, "C": C, "V": V}),
        ("layernorm", "layernorm", {"N": N, "C": C}),
        ("matmul qkv", "matmul", {"N": N, "K": C, "M": 3 * C}),
        ("matmul attn_proj", "matmul", {"N": N, "K": C, "M": C}),
        ("matmul fc", "matmul", {"N": N, "K": C, "M": F}),
        ("matmul fc_proj", "matmul", {"N": N, "K": F, "M": C}),
        ("matmul lm_head", "matmul", {"N": N, "K": C, "M": V, "bias": False}),
        ("attention", "attention", {"B": B, "T": T, "C": C, "NH": NH}),
        ("gelu", "gelu", {"N": N, "C": F}),
        ("residual", "residual", {"N": N, "C": C}),
        ("crossentropy", "crossentropy", {"B": B, "T": T, "V": V, "n_valid": V - 47 if not dry else V - 3}),
        ("adamw", "adamw", {"N": 1 << (20 if not dry else 10)}),
        ("sumsq", "sumsq", {"N": 1 << (20 if not dry else 10)}),
    ]


# ---- the two places this runs: the GPU (real capture) and the CPU (--dry) ------------------------------
class Gpu:
    """The core's own capture (euler_core.graph: its work stream, a private memory pool per graph);
    everything here (eager calls, captures, replays, events) runs on that stream, made current by
    `with gpu.stream:` around the whole run."""

    device = "cuda"

    def __init__(self, dtype):
        import cupy

        from euler_core.graph import work_stream
        self.xp = cupy
        self.kernels = Kernels("triton")  # no dtype: triton lacks some ops, whose fallbacks take none
        self.stream = work_stream()

    def kernel(self, op) -> Kernel:
        return self.kernels[op]

    def sync(self):
        self.stream.synchronize()

    def capture(self, step, what="op"):
        """step() captured by euler_core.graph.CapturedGraph; returns replay(), which queues the
        graph on the stream. A capture that breaks raises GraphCaptureError naming the op."""
        from euler_core.graph import CapturedGraph
        self.sync()
        return CapturedGraph(step, what).replay

    def timed(self, fn, reps=10) -> float:
        """ms per call of fn(), over `reps` back-to-back calls after one warm-up (events on the stream)."""
        cp = self.xp
        fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        self.sync()
        start.record(self.stream)
        for _ in range(reps):
            fn()
        end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / reps


class Cpu:
    device = "cpu"

    def __init__(self, dtype):
        self.xp = np

    def kernel(self, op) -> Kernel:
        from backends.triton._testing import interpreted_variant
        return Kernel(interpreted_variant(op))

    def sync(self):
        pass

    def capture(self, step, what="op"):
        return step  # no graph on the CPU: "replay" runs the calls again

    def timed(self, fn, reps=1) -> float:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3


# ---- one op ------------------------------------------------------------------------------------------
_POISON = {"float32": ("uint32", 0x7FC00000), "float16": ("uint16", 0x7E00), "bfloat16": ("uint16", 0x7FC0)}


def poison(a):
    """Fill a float array with NaN through an integer view (works for bfloat16 in CuPy too)."""
    view, bits = _POISON[str(a.dtype)]
    a.view(view).fill(bits)


def host_bits(a) -> np.ndarray:
    """The bytes of a (NumPy or CuPy) array, on the host."""
    a = a.view("uint8")
    return a.get() if hasattr(a, "get") else a.copy()


class Step:
    """An op's forward + backward into preallocated buffers (the core's arena, in miniature)."""

    def __init__(self, kernel: Kernel, op: str, inputs: dict, attrs: dict, dout, xp):
        self.kernel, self.op, self.inputs, self.attrs, self.dout, self.xp = kernel, op, inputs, attrs, dout, xp
        self.spec = OPS[op]

    def buffers(self) -> dict:
        """The output and gradient buffers one run writes (float32 parameter gradients for 16-bit)."""
        spec, xp, inputs = self.spec, self.xp, self.inputs
        if spec.output is None:
            return {}
        full = spec.fill_attrs(self.attrs)
        bufs = {"out": xp.empty(spec.output_shape(inputs, full), dtype=np_dtype(spec.output_dtype(inputs, full)))}
        for name in spec.differentiable:
            if name in inputs:
                a = inputs[name]
                dt = np_dtype(param_grad_dtype(str(a.dtype))) if name in spec.params else a.dtype
                bufs[f"d{name}"] = xp.empty(a.shape, dtype=dt)
        return bufs

    def run(self, bufs: dict):
        """One forward + backward into `bufs`; returns the forward's saved values (the caller keeps
        them alive as long as a graph that reads them)."""
        if self.spec.output is None:  # adamw: the update in place
            self.kernel.forward(self.inputs, self.attrs)
            return None
        for p in self.spec.params:
            if p in self.inputs:
                bufs[f"d{p}"].fill(0)  # the core zeroes parameter gradients once per step
        _, saved = self.kernel.forward(self.inputs, self.attrs, out=bufs["out"])
        if self.spec.differentiable:  # sumsq has no backward
            grads = {n: bufs[f"d{n}"] for n in self.spec.differentiable if n in self.inputs}
            self.kernel.backward(saved, self.dout, grads)
        return saved

    def results(self, bufs: dict) -> dict:
        if self.spec.output is None:  # adamw: the state it updated
            return {k: host_bits(self.inputs[k]) for k in ("param", "m", "v", "param_copy") if k in self.inputs}
        return {k: host_bits(v) for k, v in bufs.items()}


def make_case(op, dims, dtype, seed, where):
    """(inputs, attrs, dout) on the device. adamw as the mixed-precision step calls it: float32
    param, grad, m, v, a 16-bit param_copy, the gradient's sum of squares (clipping at max_norm 1),
    lr and step as device scalars (their new values land in the same arrays before a replay)."""
    if op != "adamw":
        made = make_inputs(op, dims, dtype, seed, where.device)
        return made.typed, made.attrs, made.dout
    xp, rng, n = where.xp, np.random.default_rng(seed), dims["N"]
    f32 = lambda a: xp.asarray(np.asarray(a, dtype=np.float32))  # noqa: E731
    grad = rng.standard_normal(n) * 0.01
    inputs = {"param": f32(rng.standard_normal(n)), "grad": f32(grad), "m": f32(rng.standard_normal(n) * 1e-3),
              "v": f32(rng.standard_normal(n) ** 2 * 1e-6), "grad_sumsq": f32([np.sum(grad.astype(np.float32) ** 2)])}
    inputs["param_copy"] = inputs["param"].astype(np_dtype(dtype))
    attrs = {"lr": f32([1e-3 * (1 + seed)]), "step": f32([3 + seed]), "weight_decay": 0.1, "max_norm": 1.0}
    return inputs, attrs, None


def differences(got: dict, ref: dict) -> list[str]:
    return [name for name in ref if not np.array_equal(got[name], ref[name])]


def check_op(where, label, op, dims, dtype, seed) -> dict:
    rec = {"case": label, "op": op, "dims": dims, "dtype": dtype}
    xp = where.xp
    try:
        kernel = where.kernel(op)
        made_inputs, attrs, dout = make_case(op, dims, dtype, seed, where)
        inputs = {k: v.copy() for k, v in made_inputs.items()}
        step = Step(kernel, op, inputs, attrs, dout, xp)
        # every array the step reads (device-scalar attributes too) and the values it starts from
        live = {**inputs, **{f"attr {k}": v for k, v in attrs.items() if hasattr(v, "shape")}}
        fresh = {k: v.copy() for k, v in live.items()}

        def restore():  # adamw changes its inputs: every run starts from the same state
            for k, v in fresh.items():
                live[k][...] = v

        eager_bufs, graph_bufs = step.buffers(), step.buffers()
        restore()
        step.run(eager_bufs)   # compiles every kernel of the op before the capture
        where.sync()
        ref = step.results(eager_bufs)
    except Exception as e:
        rec.update(status="eager failed", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=4))
        return rec
    try:
        restore()
        captured = []  # the captured forward's saved values: the graph reads them at every replay
        replay = where.capture(lambda: captured.append(step.run(graph_bufs)), label)
    except Exception as e:
        rec.update(status="capture failed", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=6))
        return rec
    try:
        for b in graph_bufs.values():
            poison(b)
        restore()
        replay()
        where.sync()
        rec["replay_differs"] = differences(step.results(graph_bufs), ref)
        # new values in the very same input arrays: the graph must read them
        new_inputs, new_attrs, _ = make_case(op, dims, dtype, seed + 1, where)
        new = {**new_inputs, **{f"attr {k}": v for k, v in new_attrs.items() if hasattr(v, "shape")}}
        for k, v in new.items():
            fresh[k][...] = v
        restore()
        step.run(eager_bufs)
        where.sync()
        ref2 = step.results(eager_bufs)
        for b in graph_bufs.values():
            poison(b)
        restore()
        replay()
        where.sync()
        rec["new_data_differs"] = differences(step.results(graph_bufs), ref2)
        rec["new_data_changed"] = bool(differences(ref2, ref))  # else the second comparison proves little
        rec["eager_ms"] = where.timed(lambda: step.run(eager_bufs))  # adamw: updates on from there
        rec["replay_ms"] = where.timed(replay)
    except Exception as e:
        rec.update(status="replay failed", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=6))
        return rec
    same = not rec["replay_differs"] and not rec["new_data_differs"]
    rec["status"] = "graph-safe" if same else "replay differs"
    return rec


# ---- the embedding backward's sort -----------------------------------------------------------------------
def sort_timings(where, dtype: str, dry: bool) -> list[dict]:
    from backends.triton import _runtime, embedding
    xp = where.xp
    records = []
    V = 50304 if not dry else 300
    sizes = (65536, 131072) if not dry else (300,)
    ctx = _runtime.interpreter if dry else contextlib.nullcontext
    for N in sizes:
        rng = np.random.default_rng(N)
        for dist in ("uniform", "zipf"):
            ids = rng.integers(0, V, N) if dist == "uniform" else np.minimum(rng.zipf(1.2, N) - 1, V - 1)
            tokens = xp.asarray(ids.astype(np.int32))
            rec = {"case": f"embedding sort N={N} {dist}", "N": N, "V": V, "dist": dist,
                   "largest_run": int(np.bincount(ids).max())}
            try:
                with ctx():
                    got_tokens, got_order = embedding.sort_by_token(tokens, V)
                    rec["sort_ms"] = where.timed(lambda: embedding.sort_by_token(tokens, V), reps=20)
                    kept = []  # GPU time alone: the sort captured as a graph, replayed
                    rec["sort_graph_ms"] = where.timed(where.capture(lambda: kept.append(
                        embedding.sort_by_token(tokens, V)), "sort"), reps=20)
                expected = np.argsort(ids, kind="stable")
                got = got_order.get() if hasattr(got_order, "get") else got_order
                rec["sort_right"] = bool(np.array_equal(got, expected))
                if not dry:  # what it replaced: int64 keys (token * N + position), argsort, a gather
                    def old():
                        keys = tokens.astype("int64") * N + xp.arange(N, dtype="int64")
                        order = xp.argsort(keys).astype("int32")
                        return tokens[order]
                    rec["argsort_ms"] = where.timed(old, reps=20)
                C = 768 if not dry else 64
                B, T = N // 1024 if not dry else 1, 1024 if not dry else N
                dout = xp.asarray(rng.standard_normal((B, T, C)).astype(np.float32)).astype(np_dtype(dtype))
                saved = embedding.Saved(tokens.reshape(B, T), V, T)
                grads = {"wte": xp.zeros((V, C), dtype="float32"), "wpe": xp.zeros((T, C), dtype="float32")}
                with ctx():
                    rec["backward_ms"] = where.timed(lambda: embedding.backward(saved, dout, grads), reps=10)
                    rec["backward_graph_ms"] = where.timed(where.capture(lambda: kept.append(
                        embedding.backward(saved, dout, grads)), "embedding backward"), reps=10)
                rec["status"] = "ok" if rec["sort_right"] else "sort wrong"
            except Exception as e:
                rec.update(status="failed", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc(limit=4))
            records.append(rec)
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default=None, help="bfloat16 on the GPU (default), float16 with --dry")
    p.add_argument("--batch", type=int, default=8, help="B at T=1024 (default 8: N = 8192 rows)")
    p.add_argument("--dry", action="store_true", help="the CPU: interpreter, tiny shapes, no capture")
    p.add_argument("--out", default=None, help="write the records here as JSON")
    p.add_argument("--only", default=None, help="comma-separated case labels (e.g. 'layernorm,matmul qkv')")
    p.add_argument("--part", choices=("ops", "sort", "all"), default="all",
                   help="the ops' capture check, the embedding sort's timing, or both (default)")
    args = p.parse_args(argv)
    dtype = args.dtype or ("float16" if args.dry else "bfloat16")
    where = Cpu(dtype) if args.dry else Gpu(dtype)
    with (where.stream if not args.dry else contextlib.nullcontext()):
        records = run(where, args, dtype)
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1, default=str))
    return report(records)


def run(where, args, dtype) -> list[dict]:
    records = []
    for label, op, dims in cases(args.batch, 1024, args.dry):
        if args.part == "sort" or (args.only and label not in args.only.split(",")):
            continue
        t = time.perf_counter()
        rec = check_op(where, label, op, dims, dtype, seed=0)
        rec["wall_s"] = round(time.perf_counter() - t, 2)
        records.append(rec)
        print(f"{label:<18} {rec['status']:<15} {rec.get('error', '')[:200]}", flush=True)
        if args.out:  # as it goes: a run cut short by its time cap still leaves what it did
            Path(args.out).write_text(json.dumps(records, indent=1, default=str))
    if args.part != "ops" and not args.only:
        for rec in sort_timings(where, dtype, args.dry):
            records.append(rec)
            print(f"{rec['case']:<34} {rec['status']}", flush=True)
    return records


def report(records) -> int:
    """The summary table; 1 when any case failed."""
    print()
    print(f"{'case':<34} {'status':<15} {'eager ms':>9} {'replay ms':>9}  differs")
    for r in records:
        if r["case"].startswith("embedding sort"):
            nan = float("nan")
            print(f"{r['case']:<34} {r['status']:<6} sort {r.get('sort_ms', nan):.3f} ms eager / "
                  f"{r.get('sort_graph_ms', nan):.3f} replayed, argsort {r.get('argsort_ms', nan):.3f}; backward "
                  f"{r.get('backward_ms', nan):.3f} / {r.get('backward_graph_ms', nan):.3f}; largest run "
                  f"{r.get('largest_run')}")
            continue
        diff = ",".join(r.get("replay_differs", []) + [f"new:{n}" for n in r.get("new_data_differs", [])])
        diff = diff or r.get("error", "")[:90]
        print(f"{r['case']:<34} {r['status']:<15} {r.get('eager_ms', float('nan')):>9.3f} "
              f"{r.get('replay_ms', float('nan')):>9.3f}  {diff or '-'}")
    bad = [r for r in records if r["status"] not in ("graph-safe", "ok")]
    print(f"\n{len(records) - len(bad)} of {len(records)} graph-safe / ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
