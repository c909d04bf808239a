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
    grad_ahead   (an op whose output gradient is an input, `spec.grad_input`: classifier_crossentropy)
                 without that input the forward gives the same outputs and backward is refused;
                 backward takes None for grad_output and refuses any array but the forward's own

Multi-output ops (`spec.outputs`, layernorm_residual) are checked output by output: `out=` is a tuple
of NaN-filled buffers, the output gradient a tuple (None for an output the case gives no gradient:
`Case.zero_grads`). An output that is an input itself (`spec.aliases`: layernorm_residual's x without
b) must be returned as that very input array, by forward and by forward(out=...), whose buffer for it
is that input. For an op with `spec.grad_input`, the output gradient R is that input: the
forward gets it, and backward gets the very same array.

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
from .tolerances import FD_STEP, FD_TOL, Tol, tolerance


def case_rng(seed: int, op: str, case: str) -> np.random.Generator:
    """The generator of one case: stable across processes (crc32, not hash()), different per case."""
    return np.random.default_rng([seed, zlib.crc32(op.encode()), zlib.crc32(case.encode())])


def reference_impl(op: str):
    """The naive backend's implementation of `op` (imported directly: the reference does not depend
    on which plugins a registry holds)."""
    return importlib.import_module(f"backends.naive.{op}")


def _nan_like(shape, dtype, xp=np):
    return xp.full(shape, np.nan, dtype=dtype)


def _each(value, fn):
    """fn applied to an array, or to each entry of a tuple of arrays (None entries stay None)."""
    if isinstance(value, tuple):
        return tuple(None if v is None else fn(v) for v in value)
    return None if value is None else fn(value)


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
            douts = []
            for name, shape, out_dt in zip(self.spec.output_names, *self.per_output(out_shape, out_dtype)):
                if name in self.case.zero_grads:  # no gradient reaches this output: None
                    douts.append(None)
                    continue
                d = rng.standard_normal(shape)
                d[d == 0] = 0.5
                douts.append(d.astype(np_dtype(out_dt)))
            dout = tuple(douts) if self.spec.outputs else douts[0]
            dout64 = _each(dout, lambda d: d.astype(np.float64))
            if self.spec.grad_input:  # the output gradient is this input: the forward gets R itself
                typed[self.spec.grad_input], exact[self.spec.grad_input] = dout, dout64
            self._cache.update(out_dtype=out_dtype, dout=dout, dout64=dout64)

    def per_output(self, value_or_values, *more):
        """A spec's per-output value(s) as tuples: (x,) for a single-output op, x itself otherwise."""
        multi = bool(self.spec.outputs)
        result = tuple(v if multi else (v,) for v in (value_or_values, *more))
        return result if more else result[0]

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

    def dout(self, inputs: dict):
        """A fresh copy of the output gradient on the variant's device (a tuple for a multi-output
        op); for an op whose output gradient is an input, that very input array of `inputs`."""
        if self.spec.grad_input:
            return inputs[self.spec.grad_input]
        return _each(self.get("dout"), lambda d: to_device(d.copy(), self.device))

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
                dout = exact[self.spec.grad_input] if self.spec.grad_input else _each(self.get("dout64"), np.copy)
                res = impl.backward(saved, dout, grads)
                self._cache["ref"] = {"out": _each(out, lambda o: np.asarray(o, dtype=np.float64)),
                                      "grads": {k: np.array(v, dtype=np.float64) for k, v in res.items()}}
        return self._cache["ref"]

    def tol(self, kind: str):
        tol = tolerance(self.dtype, kind, self.variant.dtypes)
        if self.dtype in HALF_DTYPES and self.case.stored_roundings > 1:  # (cases.py's Case says why)
            return Tol(tol.rtol * self.case.stored_roundings, tol.atol * self.case.stored_roundings)
        return tol

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
        dout = self.dout(inputs)
        dout_before = _each(dout, lambda d: host(d).copy())
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
    outs = run["out"]
    if ctx.spec.outputs and not (isinstance(outs, tuple) and len(outs) == len(ctx.spec.outputs)):
        raise CheckFailed(f"forward returned {type(outs).__name__} as its outputs, not a tuple of "
                          f"{len(ctx.spec.outputs)} arrays ({ctx.spec.output})")
    aliases = ctx.spec.aliases(run["inputs"])
    shapes, dtypes, outs, refs = ctx.per_output(ctx.get("out_shape"), ctx.get("out_dtype"), outs, ref["out"])
    for name, shape, dtype, out, expected in zip(ctx.spec.output_names, shapes, dtypes, outs, refs):
        label = f"output {name}" if ctx.spec.outputs else "output"
        if name in aliases and out is not run["inputs"][aliases[name]]:
            raise CheckFailed(f"{label} must be input '{aliases[name]}' itself with these inputs (it is that input, "
                              "not a copy: nothing is written for it); forward returned another array")
        if not hasattr(out, "shape"):
            raise CheckFailed(f"forward returned {type(out).__name__} as its {label}, not an array")
        if tuple(out.shape) != tuple(shape):
            raise CheckFailed(f"{label} has shape {tuple(out.shape)}, expected {shape}")
        if str(out.dtype) != dtype:
            raise CheckFailed(f"{label} has dtype {out.dtype}, expected {dtype}")
        compare(name, out, expected, ctx.tol("forward"))


def check_out(ctx: CaseContext) -> None:
    kernel, inputs = ctx.kernel, ctx.inputs()
    shapes, dtypes = ctx.per_output(ctx.get("out_shape"), ctx.get("out_dtype"))
    aliases = ctx.spec.aliases(inputs)  # an output that is an input is given as that input (not poisoned)
    bufs = tuple(inputs[aliases[name]] if name in aliases else _nan_like(shape, np_dtype(dt), ctx.xp)
                 for name, shape, dt in zip(ctx.spec.output_names, shapes, dtypes))
    out = bufs if ctx.spec.outputs else bufs[0]
    try:
        got, _ = kernel.forward(inputs, ctx.attrs, out=out)
    except Exception as e:
        raise CheckFailed(f"forward(out=...) raised {type(e).__name__}: {e}") from e
    got = ctx.per_output(got)
    if not isinstance(got, tuple) or len(got) != len(bufs):
        raise CheckFailed(f"forward(out=(...)) must return the tuple of its {len(bufs)} buffers, "
                          f"got {type(got).__name__}")
    for name, buf, returned, expected in zip(ctx.spec.output_names, bufs, got, ctx.per_output(ctx.reference()["out"])):
        label = f"out= buffer ({name})"
        expect_written(label, buf)
        if returned is not buf:
            raise CheckFailed(f"forward(out=buf) must return buf itself{f' as output {name}' if ctx.spec.outputs else ''}; "
                              "it returned another array")
        compare(label, buf, expected, ctx.tol("forward"))


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
        res = kernel.backward(saved, ctx.dout(inputs), grads)
    except Exception as e:
        raise CheckFailed(f"backward with activation buffers in grads raised {type(e).__name__}: {e}") from e
    ref = ctx.reference()["grads"]
    for name in ctx.activations:
        expect_written(f"grads['{name}'] buffer", bufs[name])
        compare(f"grads['{name}'] buffer", bufs[name], ref[name], ctx.tol("gradient"))
        if res.get(name) is not bufs[name] and not same_bits(res.get(name), bufs[name]):
            raise CheckFailed(f"backward was given grads['{name}'] to overwrite but returned another array")
    if ctx.dtype in HALF_DTYPES:
        _expect_wide_activation_buffer_refused(ctx, saved, inputs)


def _expect_wide_activation_buffer_refused(ctx: CaseContext, saved, forward_inputs: dict) -> None:
    """With 16-bit inputs, parameter gradients are float32 but activation gradients keep the inputs'
    dtype: a float32 buffer for an activation must be refused (ValueError/TypeError naming the op),
    not silently written in another dtype than the next op expects."""
    for name in ctx.activations:
        inputs = ctx.get("typed")
        grads = {**ctx.param_buffers(inputs), name: ctx.xp.zeros(inputs[name].shape, dtype=np.float32)}
        try:
            ctx.kernel.backward(saved, ctx.dout(forward_inputs), grads)
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
            kernel.backward(saved, ctx.dout(inputs), buffers)
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
    for name, out in zip(ctx.spec.output_names, ctx.per_output(run["out"])):
        expect_finite(name, out)
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
    if "dout" in run:
        for d, before in zip(*ctx.per_output(run["dout"], run["dout_before"])):
            if d is not None and host(d).tobytes() != before.tobytes():
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
            res = kernel.backward(saved, ctx.dout(inputs), ctx.param_buffers(inputs))
            runs.append({**dict(zip(ctx.spec.output_names, ctx.per_output(out))),
                         **{f"d{k}": v for k, v in res.items() if v is not None}})
    except Exception as e:
        raise CheckFailed(f"raised {type(e).__name__}: {e}") from e
    for name in runs[0]:
        if not same_bits(runs[0][name], runs[1][name]):
            a, b = host64(runs[0][name]), host64(runs[1][name])
            raise CheckFailed(f"{name} differs between two calls with the same inputs "
                              f"(max |diff| {np.nanmax(np.abs(a - b)):.3g}); results must be bitwise repeatable")


def check_grad_ahead(ctx: CaseContext) -> None:
    spec = ctx.spec
    if not spec.grad_input:
        raise NotApplicable
    kernel, attrs, ref = ctx.kernel, ctx.attrs, ctx.reference()
    inputs = ctx.inputs()
    without = {k: v for k, v in inputs.items() if k != spec.grad_input}
    try:
        out, saved = kernel.forward(without, attrs)
    except Exception as e:
        raise CheckFailed(f"forward without '{spec.grad_input}' raised {type(e).__name__}: {e}") from e
    compare(f"{spec.output} (forward without '{spec.grad_input}')", out, ref["out"], ctx.tol("forward"))
    _expect_refused(lambda: kernel.backward(saved, None, ctx.param_buffers(inputs)), spec.name,
                    f"backward after a forward without '{spec.grad_input}'")
    _, saved = kernel.forward(inputs, attrs)
    copy = ctx.xp.array(inputs[spec.grad_input], copy=True)
    _expect_refused(lambda: kernel.backward(saved, copy, ctx.param_buffers(inputs)), spec.name,
                    f"backward given a copy of '{spec.grad_input}' as grad_output (not the forward's own array)")
    try:
        res = kernel.backward(saved, None, ctx.param_buffers(inputs))
    except Exception as e:
        raise CheckFailed(f"backward(saved, None, grads) raised {type(e).__name__}: {e}") from e
    for name in spec.differentiable:
        compare(f"d{name} (grad_output None)", res[name], ref["grads"][name], ctx.tol("gradient"))


def _expect_refused(call, op: str, what: str) -> None:
    try:
        call()
    except ValueError as e:
        if op not in str(e):
            raise CheckFailed(f"{what} raised ValueError without naming the op: {e}") from None
        return
    except Exception as e:
        raise CheckFailed(f"{what} raised {type(e).__name__} (expected a ValueError naming {op}): {e}") from e
    raise CheckFailed(f"{what} was accepted; it must raise a ValueError naming {op}")


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
    "grad_ahead": check_grad_ahead,
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
    if not spec.grad_input:
        names.remove("grad_ahead")
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
        shapes, dtypes = spec.output_shape(inputs, full), spec.output_dtype(inputs, full)
        xp = array_module(variant.device)
        if spec.outputs:
            wrong = tuple(xp.zeros(tuple(s + 1 for s in shape), dtype=np_dtype(dt)) for shape, dt in zip(shapes, dtypes))
            problem = _expect_rejected(kernel, op, inputs, attrs, out=wrong[0])
            if problem:
                failures.append(f"out-not-a-tuple: {problem}")
        else:
            wrong = xp.zeros(tuple(s + 1 for s in shapes), dtype=np_dtype(dtypes))
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
    shapes = spec.output_shape(inputs, full)
    if spec.grad_input:  # R is the gradient given ahead (the example made it); L's forward runs without it
        Rs = (inputs[spec.grad_input],)
    else:
        Rs = tuple(rng.standard_normal(shape) for shape in (shapes if spec.outputs else (shapes,)))

    def loss(x):
        out, _ = kernel.forward({k: to_device(v, dev) for k, v in x.items() if k != spec.grad_input}, attrs)
        return sum(float(np.sum(host64(o) * r)) for o, r in zip(out if spec.outputs else (out,), Rs))

    on_device = {k: to_device(v, dev) for k, v in inputs.items()}
    _, saved = kernel.forward(on_device, attrs)
    xp = array_module(dev)
    grads = {p: xp.zeros(inputs[p].shape, dtype=np.float64) for p in spec.params if p in inputs}
    if spec.grad_input:
        R = on_device[spec.grad_input]
    else:
        R = tuple(to_device(r.copy(), dev) for r in Rs) if spec.outputs else to_device(Rs[0].copy(), dev)
    analytic = kernel.backward(saved, R, grads)
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
