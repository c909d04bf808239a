"""The checks, one function each, and the context they share for one (variant, op, case, dtype).

A *case check* gets a `CaseContext`: the variant bound through the dispatcher (`Kernel`), fresh
random inputs in the tested dtype on the variant's device, and the float64 naive reference computed
from the same (rounded) inputs. A *variant check* (`reject`, `gradcheck`) gets the variant and op.
A check returns quietly when the variant passes, raises `CheckFailed` with a message that says what
is wrong, or `CheckSkipped` with the reason it cannot run here.

Case checks, in the order they run:

    forward      out=None call: output shape, dtype and values against float64 naive
                 (adamw: param, m and v after the in-place update)
    out          out= filled with NaN: every element written, the buffer returned, values right
    backward     every differentiable input's gradient against float64 naive (parameter buffers
                 start at zero)
    grad_buffer  activation-gradient buffers passed in `grads` filled with NaN: every element
                 overwritten with the right values; with 16-bit inputs, a float32 activation
                 buffer is refused (activation gradients keep the inputs' dtype)
    accumulate   parameter-gradient buffers start at random non-zero values S; after one backward
                 they hold S + g, after a second S + 2g (catches `=` for `+=`)
    finite       no NaN/Inf in any output or gradient
    inputs       inputs (and the output gradient) unchanged by forward and backward, bit for bit
    repeat       the same inputs give bitwise-identical outputs and gradients on a second call

Parameter-gradient buffers are in the inputs' dtype, except for float16 and bfloat16 inputs: then
they are float32 (mixed precision, `arrays.param_grad_dtype`), in every check that passes them.

Variant checks:

    reject       bad inputs (wrong rank, shape, dtype, int for float, out-of-range ids, n_head not
                 dividing C ...) raise ValueError/TypeError naming the op, through the dispatcher
    gradcheck    central finite differences of sum(forward * R) against backward(R), float64,
                 small shapes (for the naive reference this checks the reference itself)
"""

from __future__ import annotations

import importlib
import zlib
from dataclasses import dataclass, field

import numpy as np

from euler_core.device import array_module, to_device
from euler_core.kernels import Kernel
from euler_core.ops import OPS

from .arrays import (HALF_DTYPES, CheckFailed, CheckSkipped, compare, dtype_unavailable_reason, expect_finite,
                     expect_written, host, host64, is_float, np_dtype, param_grad_dtype, same_bits, snapshot)
from .cases import BAD_INPUT_DIMS, BAD_INPUTS, GRADCHECK_DIMS, Case, DeviceScalar
from .tolerances import FD_STEP, FD_TOL, tolerance


def case_rng(seed: int, op: str, case: str) -> np.random.Generator:
    """The generator of one case: stable across processes (crc32, not hash()), different per case."""
    return np.random.default_rng([seed, zlib.crc32(op.encode()), zlib.crc32(case.encode())])


def reference_impl(op: str):
    """The naive backend's implementation of `op` (imported directly: the reference does not depend
    on which plugins a registry holds)."""
    return importlib.import_module(f"backends.naive.{op}")


def _nan_like(shape, dtype, xp=np):
    return xp.full(shape, np.nan, dtype=dtype)


@dataclass
class CaseContext:
    """Everything the case checks of one (variant, op, case, dtype, seed) share; built lazily."""

    variant: object
    op: str
    case: Case
    dtype: str
    seed: int
    _cache: dict = field(default_factory=dict)

    def __post_init__(self):
        self.spec = OPS[self.op]
        self.device = self.variant.device
        self.xp = array_module(self.device)

    # ---- the variant -------------------------------------------------------------------------
    @property
    def kernel(self) -> Kernel:
        if "kernel" not in self._cache:
            try:
                self._cache["kernel"] = Kernel(self.variant)
            except Exception as e:
                raise CheckFailed(f"the variant cannot be loaded: {type(e).__name__}: {e}") from e
        return self._cache["kernel"]

    # ---- inputs --------------------------------------------------------------------------------
    def _make(self):
        rng = case_rng(self.seed, self.op, self.case.name)
        inputs, attrs = self.spec.example(self.case.dims, "float64", rng)
        if self.case.transform is not None:
            inputs = self.case.transform(inputs, rng)
        attrs = {**attrs, **self.case.attrs}
        dt = np_dtype(self.dtype)
        wide = np.float32 if self.dtype in ("float16", "bfloat16") else dt
        # The tested inputs (rounded to the dtype) and their exact float64 values for the reference.
        typed = {k: (v.astype(wide if k in self.case.keep_float32 else dt) if is_float(v) else v)
                 for k, v in inputs.items() if v is not None}
        exact = {k: (v.astype(np.float64) if is_float(v) else v) for k, v in typed.items()}
        full_attrs = self.spec.fill_attrs(attrs)
        out_shape = self.spec.output_shape(exact, full_attrs)
        self._cache.update(typed=typed, exact=exact, attrs=attrs, out_shape=out_shape)
        if self.spec.output is not None:
            out_dtype = self.spec.output_dtype(typed, full_attrs)
            dout = rng.standard_normal(out_shape)
            dout[dout == 0] = 0.5
            dout = dout.astype(np_dtype(out_dtype))
            self._cache.update(out_dtype=out_dtype, dout=dout, dout64=dout.astype(np.float64))

    def get(self, key):
        if "typed" not in self._cache:
            self._make()
        return self._cache[key]

    @property
    def attrs(self) -> dict:
        return self._attrs_on(self.device)

    def _attrs_on(self, device: str) -> dict:
        """The case's attributes, device scalars made as (1,) float32 arrays on `device`."""
        return {k: (to_device(np.array([v.value], dtype=np.float32), device) if isinstance(v, DeviceScalar) else v)
                for k, v in self.get("attrs").items()}

    @property
    def state_names(self) -> tuple:
        """adamw: the inputs it updates in place."""
        return ("param", "m", "v") + (("param_copy",) if "param_copy" in self.get("typed") else ())

    def inputs(self) -> dict:
        """Fresh copies of the inputs, in the tested dtype, on the variant's device."""
        return {k: to_device(v.copy(), self.device) for k, v in self.get("typed").items()}

    def dout(self):
        return to_device(self.get("dout").copy(), self.device)

    @property
    def activations(self) -> list[str]:
        """Differentiable inputs that are not parameters (their gradients are overwritten)."""
        present = self.get("typed")
        return [n for n in self.spec.differentiable if n not in self.spec.params and n in present]

    @property
    def params(self) -> list[str]:
        present = self.get("typed")
        return [n for n in self.spec.params if n in present]

    def param_buffers(self, inputs, fill="zeros", rng=None) -> dict:
        """One gradient buffer per parameter, in `param_grad_dtype` (float32 for 16-bit inputs):
        zeros, or random non-zero values (the accumulate check)."""
        dt = np_dtype(param_grad_dtype(self.dtype))
        if fill == "zeros":
            return {p: self.xp.zeros(inputs[p].shape, dtype=dt) for p in self.params}
        return {p: to_device(rng.standard_normal(inputs[p].shape).astype(dt), self.device) for p in self.params}

    # ---- the reference ----------------------------------------------------------------------------
    def reference(self) -> dict:
        """{'out': ..., 'grads': {...}} (adamw: {'state': {param, m, v}}) from naive in float64."""
        if "ref" not in self._cache:
            impl = reference_impl(self.op)
            exact = {k: v.copy() for k, v in self.get("exact").items()}
            attrs = self.spec.fill_attrs(self._attrs_on("cpu"))
            if self.spec.output is None:
                impl.forward(exact, attrs, None)
                self._cache["ref"] = {"state": {k: exact[k] for k in self.state_names}}
            else:
                out, saved = impl.forward(exact, attrs, None)
                grads = {p: np.zeros_like(exact[p]) for p in self.params}
                res = impl.backward(saved, self.get("dout64").copy(), grads)
                self._cache["ref"] = {"out": np.asarray(out, dtype=np.float64),
                                      "grads": {k: np.array(v, dtype=np.float64) for k, v in res.items()}}
        return self._cache["ref"]

    def tol(self, kind: str):
        return tolerance(self.dtype, kind, self.variant.dtypes)

    # ---- the basic run, shared by forward/backward/finite/inputs --------------------------------
    def basic(self) -> dict:
        """forward(out=None) then backward into zeroed parameter buffers, with snapshots of the inputs
        before and after. An exception is kept and re-raised by every check that needs the run."""
        if "basic" not in self._cache:
            try:
                self._cache["basic"] = self._basic()
            except (CheckFailed, CheckSkipped) as e:
                self._cache["basic"] = e
            except Exception as e:
                self._cache["basic"] = CheckFailed(f"raised {type(e).__name__}: {e}")
                self._cache["basic"].__cause__ = e
        result = self._cache["basic"]
        if isinstance(result, Exception):
            raise result
        return result

    def _basic(self) -> dict:
        kernel, attrs = self.kernel, self.attrs
        inputs = self.inputs()
        before = snapshot(inputs)
        if self.spec.output is None:  # adamw: in place
            kernel.forward(inputs, attrs)
            return {"inputs": inputs, "before": before, "state": {k: inputs[k] for k in self.state_names}}
        out, saved = kernel.forward(inputs, attrs)
        after_forward = snapshot(inputs)
        dout = self.dout()
        dout_before = host(dout).copy()
        grads = self.param_buffers(inputs)
        res = kernel.backward(saved, dout, grads)
        return {"inputs": inputs, "before": before, "after_forward": after_forward, "out": out,
                "dout": dout, "dout_before": dout_before, "grads": res, "buffers": grads}


# ---- case checks ---------------------------------------------------------------------------------
def check_forward(ctx: CaseContext) -> None:
    run, ref = ctx.basic(), ctx.reference()
    if ctx.spec.output is None:
        for k in ctx.state_names:
            compare(f"{k} after the update", run["state"][k], ref["state"][k], ctx.tol("forward"))
        return
    out = run["out"]
    if not hasattr(out, "shape"):
        raise CheckFailed(f"forward returned {type(out).__name__} as its output, not an array")
    if tuple(out.shape) != tuple(ctx.get("out_shape")):
        raise CheckFailed(f"output has shape {tuple(out.shape)}, expected {ctx.get('out_shape')}")
    if str(out.dtype) != ctx.get("out_dtype"):
        raise CheckFailed(f"output has dtype {out.dtype}, expected {ctx.get('out_dtype')}")
    compare(ctx.spec.output, out, ref["out"], ctx.tol("forward"))


def check_out(ctx: CaseContext) -> None:
    kernel, inputs = ctx.kernel, ctx.inputs()
    out = _nan_like(ctx.get("out_shape"), np_dtype(ctx.get("out_dtype")), ctx.xp)
    try:
        got, _ = kernel.forward(inputs, ctx.attrs, out=out)
    except Exception as e:
        raise CheckFailed(f"forward(out=...) raised {type(e).__name__}: {e}") from e
    expect_written(f"out= buffer ({ctx.spec.output})", out)
    if got is not out:
        raise CheckFailed("forward(out=buf) must return buf itself; it returned another array")
    compare(f"out= buffer ({ctx.spec.output})", out, ctx.reference()["out"], ctx.tol("forward"))


def check_backward(ctx: CaseContext) -> None:
    run, ref = ctx.basic(), ctx.reference()
    res = run["grads"]
    if not isinstance(res, dict):
        raise CheckFailed(f"backward returned {type(res).__name__}, expected a dict of gradients")
    expected = [n for n in ctx.spec.differentiable if n in ctx.get("typed")]
    missing = [n for n in expected if res.get(n) is None]
    if missing:
        raise CheckFailed(f"backward returned no gradient for {missing} (it returned {sorted(res)})")
    for name in expected:
        if tuple(res[name].shape) != tuple(ctx.get("typed")[name].shape):
            raise CheckFailed(f"d{name} has shape {tuple(res[name].shape)}, expected "
                              f"{tuple(ctx.get('typed')[name].shape)}")
        compare(f"d{name}", res[name], ref["grads"][name], ctx.tol("gradient"))
    for p in ctx.params:
        if res[p] is not run["buffers"][p] and not same_bits(res[p], run["buffers"][p]):
            raise CheckFailed(f"d{p}: backward must accumulate into the buffer grads['{p}'] and return it; "
                              "it returned a different array")


def check_grad_buffer(ctx: CaseContext) -> None:
    if not ctx.activations:
        raise NotApplicable
    kernel, inputs = ctx.kernel, ctx.inputs()
    try:
        _, saved = kernel.forward(inputs, ctx.attrs)
        grads = ctx.param_buffers(inputs)
        for name in ctx.activations:
            grads[name] = _nan_like(inputs[name].shape, inputs[name].dtype, ctx.xp)
        bufs = dict(grads)
        res = kernel.backward(saved, ctx.dout(), grads)
    except Exception as e:
        raise CheckFailed(f"backward with activation buffers in grads raised {type(e).__name__}: {e}") from e
    ref = ctx.reference()["grads"]
    for name in ctx.activations:
        expect_written(f"grads['{name}'] buffer", bufs[name])
        compare(f"grads['{name}'] buffer", bufs[name], ref[name], ctx.tol("gradient"))
        if res.get(name) is not bufs[name] and not same_bits(res.get(name), bufs[name]):
            raise CheckFailed(f"backward was given grads['{name}'] to overwrite but returned another array")
    if ctx.dtype in HALF_DTYPES:
        _expect_wide_activation_buffer_refused(ctx, saved)


def _expect_wide_activation_buffer_refused(ctx: CaseContext, saved) -> None:
    """With 16-bit inputs, parameter gradients are float32 but activation gradients keep the inputs'
    dtype: a float32 buffer for an activation must be refused (ValueError/TypeError naming the op),
    not silently written in another dtype than the next op expects."""
    for name in ctx.activations:
        inputs = ctx.get("typed")
        grads = {**ctx.param_buffers(inputs), name: ctx.xp.zeros(inputs[name].shape, dtype=np.float32)}
        try:
            ctx.kernel.backward(saved, ctx.dout(), grads)
        except (ValueError, TypeError) as e:
            if ctx.op not in str(e):
                raise CheckFailed(f"a float32 grads['{name}'] buffer with {ctx.dtype} inputs raised "
                                  f"{type(e).__name__} without naming the op: {e}") from None
            continue
        except Exception as e:
            raise CheckFailed(f"a float32 grads['{name}'] buffer with {ctx.dtype} inputs raised {type(e).__name__} "
                              f"(expected ValueError/TypeError naming {ctx.op}): {e}") from e
        raise CheckFailed(f"a float32 grads['{name}'] buffer with {ctx.dtype} inputs was accepted; activation "
                          f"gradients keep the inputs' dtype ({ctx.dtype}), only parameter gradients are float32")


def check_accumulate(ctx: CaseContext) -> None:
    if not ctx.params:
        raise NotApplicable
    kernel, inputs = ctx.kernel, ctx.inputs()
    rng = case_rng(ctx.seed + 1, ctx.op, ctx.case.name)
    buffers = ctx.param_buffers(inputs, fill="random", rng=rng)
    start = {p: host64(b).copy() for p, b in buffers.items()}
    ref = ctx.reference()["grads"]
    try:
        _, saved = kernel.forward(inputs, ctx.attrs)
        for times in (1, 2):
            kernel.backward(saved, ctx.dout(), buffers)
            for p in ctx.params:
                expected = start[p] + times * ref[p]
                try:
                    compare(f"d{p} buffer after {times} backward call(s)", buffers[p], expected,
                            ctx.tol("gradient"), what="start + " + ("grad" if times == 1 else "2*grad"))
                except CheckFailed as e:
                    hint = (" (it looks overwritten: '=' where '+=' belongs)"
                            if np.allclose(host64(buffers[p]), ref[p], rtol=1e-2, atol=1e-3) else "")
                    raise CheckFailed(f"parameter gradients must accumulate (the buffer started at random "
                                      f"non-zero values): {e}{hint}") from None
    except CheckFailed:
        raise
    except Exception as e:
        raise CheckFailed(f"raised {type(e).__name__}: {e}") from e


def check_finite(ctx: CaseContext) -> None:
    run = ctx.basic()
    if ctx.spec.output is None:
        for k, a in run["state"].items():
            expect_finite(k, a)
        return
    expect_finite(ctx.spec.output, run["out"])
    for name, g in run["grads"].items():
        if g is not None:
            expect_finite(f"d{name}", g)


def check_inputs(ctx: CaseContext) -> None:
    run = ctx.basic()
    mutable = ctx.state_names if ctx.spec.output is None else ()
    stages = [("forward", run.get("after_forward"))] if "after_forward" in run else []
    stages.append(("backward" if ctx.spec.output else "the update", snapshot(run["inputs"])))
    for stage, after in stages:
        for name, before in run["before"].items():
            if name in mutable or not hasattr(before, "dtype"):
                continue
            if before.tobytes() != after[name].tobytes():
                diff = int((before != after[name]).sum()) if before.shape == after[name].shape else "?"
                raise CheckFailed(f"input '{name}' was modified by {stage} ({diff} elements changed)")
    if "dout" in run and host(run["dout"]).tobytes() != run["dout_before"].tobytes():
        raise CheckFailed("the output gradient passed to backward was modified")


def check_repeat(ctx: CaseContext) -> None:
    kernel, attrs = ctx.kernel, ctx.attrs
    try:
        runs = []
        for _ in range(2):
            inputs = ctx.inputs()
            if ctx.spec.output is None:
                kernel.forward(inputs, attrs)
                runs.append({k: inputs[k] for k in ctx.state_names})
                continue
            out, saved = kernel.forward(inputs, attrs)
            res = kernel.backward(saved, ctx.dout(), ctx.param_buffers(inputs))
            runs.append({ctx.spec.output: out, **{f"d{k}": v for k, v in res.items() if v is not None}})
    except Exception as e:
        raise CheckFailed(f"raised {type(e).__name__}: {e}") from e
    for name in runs[0]:
        if not same_bits(runs[0][name], runs[1][name]):
            a, b = host64(runs[0][name]), host64(runs[1][name])
            raise CheckFailed(f"{name} differs between two calls with the same inputs "
                              f"(max |diff| {np.nanmax(np.abs(a - b)):.3g}); results must be bitwise repeatable")


class NotApplicable(Exception):
    """Raised by a check that does not apply to this op (no output, no parameters ...)."""


CASE_CHECKS = {
    "forward": check_forward,
    "out": check_out,
    "backward": check_backward,
    "grad_buffer": check_grad_buffer,
    "accumulate": check_accumulate,
    "finite": check_finite,
    "inputs": check_inputs,
    "repeat": check_repeat,
}

#: checks that need a backward (not applicable to adamw)
NEEDS_BACKWARD = {"out", "backward", "grad_buffer", "accumulate"}


def applicable_case_checks(op: str) -> list[str]:
    if OPS[op].output is None:
        return [c for c in CASE_CHECKS if c not in NEEDS_BACKWARD]
    spec = OPS[op]
    names = list(CASE_CHECKS)
    if not spec.differentiable:  # a forward-only op (attention_cached): nothing to differentiate
        names.remove("backward")
    if not spec.params:
        names.remove("accumulate")
    if not [n for n in spec.differentiable if n not in spec.params]:
        names.remove("grad_buffer")
    return names


# ---- variant checks ------------------------------------------------------------------------------
def reject_dtype(variant) -> str:
    for dt in ("float32", "float64", "float16", "bfloat16"):
        if dt in variant.dtypes and dtype_unavailable_reason(dt, "cpu") is None:
            return dt
    raise CheckSkipped(f"none of its dtypes {variant.dtypes} can be made here")


def check_reject(variant, op: str, seed: int = 0) -> None:
    """Every bad input of cases.BAD_INPUTS raises ValueError/TypeError naming the op, through the
    dispatcher; so does a float dtype the variant does not declare, and an out= of the wrong shape."""
    spec = OPS[op]
    try:
        kernel = Kernel(variant)
    except Exception as e:
        raise CheckFailed(f"the variant cannot be loaded: {type(e).__name__}: {e}") from e
    dt = reject_dtype(variant)
    rng = case_rng(seed, op, "reject")
    inputs, attrs = spec.example(BAD_INPUT_DIMS[op], "float64", rng)
    inputs = {k: (v.astype(np_dtype(dt)) if is_float(v) else v) for k, v in inputs.items()}
    bad = list(BAD_INPUTS[op])
    undeclared = [d for d in ("float16", "float32", "float64") if d not in variant.dtypes]
    if undeclared:
        d = undeclared[0]
        bad.append((f"undeclared-dtype-{d}", lambda i, a: (
            {k: (v.astype(d) if is_float(v) else v) for k, v in i.items()}, a)))
    failures = []
    for name, make in bad:
        bad_inputs, bad_attrs = make({k: v.copy() for k, v in inputs.items()}, dict(attrs))
        problem = _expect_rejected(kernel, op, bad_inputs, bad_attrs)
        if problem:
            failures.append(f"{name}: {problem}")
    if spec.output is not None:
        full = spec.fill_attrs(attrs)
        shape = spec.output_shape(inputs, full)
        wrong = array_module(variant.device).zeros(tuple(s + 1 for s in shape), dtype=np_dtype(spec.output_dtype(inputs, full)))
        problem = _expect_rejected(kernel, op, inputs, attrs, out=wrong)
        if problem:
            failures.append(f"out-shape: {problem}")
    if failures:
        raise CheckFailed(f"{len(failures)} bad input(s) not rejected cleanly: " + "; ".join(failures))


def _expect_rejected(kernel, op, inputs, attrs, out=None) -> str | None:
    try:
        kernel.forward(inputs, attrs, out=out) if out is not None else kernel.forward(inputs, attrs)
    except (ValueError, TypeError) as e:
        if op not in str(e):
            return f"raised {type(e).__name__} without naming the op: {e}"
        return None
    except Exception as e:
        return f"raised {type(e).__name__} (expected ValueError/TypeError naming {op}): {e}"
    return "accepted (no error)"


def check_gradcheck(variant, op: str, seed: int = 0) -> None:
    """Central differences of L = sum(forward(x) * R) against backward(R), in float64."""
    spec = OPS[op]
    if spec.output is None:
        raise NotApplicable
    if "float64" not in variant.dtypes:
        raise CheckSkipped("the variant takes no float64 (its gradients are compared with the naive "
                           "reference, whose own gradient is finite-difference checked)")
    try:
        kernel = Kernel(variant)
    except Exception as e:
        raise CheckFailed(f"the variant cannot be loaded: {type(e).__name__}: {e}") from e
    rng = case_rng(seed, op, "gradcheck")
    dims = GRADCHECK_DIMS[op]
    inputs, attrs = spec.example(dims, "float64", rng)
    inputs = {k: v for k, v in inputs.items() if v is not None}
    dev = variant.device
    full = spec.fill_attrs(attrs)
    R = rng.standard_normal(spec.output_shape(inputs, full))

    def loss(x):
        out, _ = kernel.forward({k: to_device(v, dev) for k, v in x.items()}, attrs)
        return float(np.sum(host64(out) * R))

    _, saved = kernel.forward({k: to_device(v, dev) for k, v in inputs.items()}, attrs)
    xp = array_module(dev)
    grads = {p: xp.zeros(inputs[p].shape, dtype=np.float64) for p in spec.params if p in inputs}
    analytic = kernel.backward(saved, to_device(R.copy(), dev), grads)
    for name in spec.differentiable:
        if name not in inputs:
            continue
        x0 = inputs[name]
        fd = np.zeros(x0.shape)
        for i in range(x0.size):
            plus = x0.copy()
            plus.flat[i] += FD_STEP
            minus = x0.copy()
            minus.flat[i] -= FD_STEP
            fd.flat[i] = (loss({**inputs, name: plus}) - loss({**inputs, name: minus})) / (2 * FD_STEP)
        compare(f"d{name}", analytic[name], fd, FD_TOL, what=f"central differences (h={FD_STEP:g})")


VARIANT_CHECKS = {
    "reject": check_reject,
    "gradcheck": check_gradcheck,
}


def applicable_variant_checks(op: str) -> list[str]:
    return [c for c in VARIANT_CHECKS if not (c == "gradcheck" and (OPS[op].output is None
                                                                    or not OPS[op].differentiable))]
