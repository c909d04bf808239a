"""Selecting kernels: the `--backend` string, resolved to one variant per op, and the dispatcher
that validates inputs before a variant sees them.

Selection strings (CLI and Python API alike):

    naive                                       every op from one backend
    numba,attention=naive                       a default backend plus per-op overrides
    attention=triton:flash,matmul=cupy_raw:cublas   a variant by name
    auto, auto,attention=naive, attention=auto  per op, the fastest variant that passed on this
                                                device in the latest `euler bench ops` records
    triton,matmul_gelu=none                     a fused op left out: the model composes its primitives
    (ops nobody named come from the default backend; with no default, from the backend named first:
    `attention=triton,matmul=cupy_raw` runs the other ops on triton, the same GPU; `naive,attention=numba`
    keeps the rest on naive)

When that backend offers no usable variant of an op (none at all, or none that runs here with the
dtype), the op falls back to naive and the selection says so (`Kernels.notes`). An override that
names a backend without the op is an error.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

from .device import device_of, to_device
from .ops import OPS
from .ops.base import dtype_name
from .registry import Registry, Variant, get_registry

FALLBACK_BACKEND = "naive"
AUTO = "auto"  # per op, the fastest variant that passed on this device (euler_core/measure/auto.py)
COMPOSE = "none"  # a fused op not used: the model composes the primitives it replaces


class SelectionError(ValueError):
    """A --backend string that names an unknown op, backend or variant, or one unusable here."""


@dataclass
class Selection:
    """The parsed string: a default backend (or None) and per-op overrides 'backend[:variant]'."""

    default: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> "Selection":
        sel = cls()
        for token in (t.strip() for t in (text or "").split(",")):
            if not token:
                continue
            if "=" in token:
                op, _, choice = (s.strip() for s in token.partition("="))
                if op not in OPS:
                    raise SelectionError(f"unknown op {op!r} in --backend {text!r}; ops: {', '.join(OPS)}")
                if not choice:
                    raise SelectionError(f"--backend {text!r}: op {op} names no backend")
                if op in sel.overrides:
                    raise SelectionError(f"--backend {text!r}: op {op} is named twice")
                sel.overrides[op] = choice
            else:
                if sel.default is not None:
                    raise SelectionError(f"--backend {text!r}: two default backends ({sel.default}, {token}); "
                                         "name one, then op=backend overrides")
                sel.default = token
        return sel


def select_variants(backend=None, ops=None, registry: Registry | None = None) -> list[Variant]:
    """The variants named by `backend`: None or "all" (every registered variant), a backend name,
    "backend:variant", a selection string ("numba,attention=naive": the variants it names per op,
    without falling back to naive; "op=none" names none of that op), or a list of those."""
    registry = registry or get_registry()
    ops = list(ops) if ops else list(OPS)
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {unknown}; ops: {', '.join(OPS)}")
    if backend is None or backend == "all":
        chosen = registry.variants()
    elif isinstance(backend, (list, tuple)):
        chosen = [v for b in backend for v in select_variants(b, ops, registry)]
    else:
        chosen = []
        selection = Selection.parse(backend)
        for op in OPS:
            choice = selection.overrides.get(op, selection.default)
            if choice is None or choice == COMPOSE:  # op=none: no variant of it (the model composes it)
                continue
            name, _, variant_name = choice.partition(":")
            candidates = registry.backend(name).variants_of(op)
            if variant_name:
                candidates = [v for v in candidates if v.name == variant_name]
            chosen += candidates
        if not chosen:
            raise ValueError(f"--backend {backend!r} names no variant of any op; variants: "
                             + ", ".join(sorted({v.qualname for v in registry.variants()})))
    seen, result = set(), []
    for v in chosen:
        if v.op in ops and id(v) not in seen:
            seen.add(id(v))
            result.append(v)
    return result


class Kernel:
    """One op bound to one variant: validates, moves arrays to the variant's device, then calls it."""

    #: callables fn(kernel, direction, call) -> call()'s result, wrapped around every forward and
    #: backward while they are in this list (the step profiler's timers, the CUDA-graph capture's check)
    watchers: list = []

    def __init__(self, variant: Variant):
        self.variant = variant
        self.spec = OPS[variant.op]
        self.device = variant.device
        self.impl = variant.load()

    def __repr__(self):
        return f"Kernel({self.spec.name} -> {self.variant.qualname} on {self.device})"

    def _check(self, inputs: dict):
        for name, a in inputs.items():
            if a is None:
                continue
            if self.variant.contiguous and not a.flags.c_contiguous:
                raise ValueError(f"{self.spec.name}: variant {self.variant.qualname} needs input '{name}' "
                                 "C-contiguous; pass a contiguous copy (ascontiguousarray)")
            dt = dtype_name(a)
            if name == self.spec.grad_input:  # the losses' dtype whatever the variant's: the spec checks it
                continue
            if dt.startswith("float") or dt == "bfloat16":
                if dt not in self.variant.dtypes:
                    raise TypeError(f"{self.spec.name}: variant {self.variant.qualname} does not take dtype {dt} "
                                    f"(input '{name}'); it takes {', '.join(self.variant.dtypes)}")

    def forward(self, inputs: dict, attrs: dict | None = None, out=None):
        """(output, saved) of the op; `out` is an optional preallocated output buffer."""
        if self.watchers:
            return self._watched("forward", lambda: self._forward(inputs, attrs, out))
        return self._forward(inputs, attrs, out)

    def backward(self, saved, grad_output, grads: dict):
        """Gradients of the differentiable inputs. Parameter buffers in `grads` are accumulated into;
        they may live on another device than the variant (they are then updated through a copy)."""
        if self.watchers:
            return self._watched("backward", lambda: self._backward(saved, grad_output, grads))
        return self._backward(saved, grad_output, grads)

    def _watched(self, direction: str, call):
        """call() inside every watcher, the first one added outermost."""
        for watch in reversed(self.watchers):
            call = functools.partial(watch, self, direction, call)
        return call()

    def _forward(self, inputs: dict, attrs: dict | None, out):
        attrs = self.spec.fill_attrs(attrs)
        self.spec.validate(inputs, attrs)
        self._check(inputs)
        given = inputs
        inputs = {k: to_device(v, self.device) for k, v in inputs.items()}
        if out is not None:
            outs = self._check_out(out, given, attrs)
            if any(device_of(o) != self.device for o in outs):  # a mixed-device selection: compute here,
                result, saved = self.impl.forward(inputs, attrs, None)  # then copy there
                aliased = [given[a] for a in self.spec.aliases(given).values()]
                for o, r in zip(outs, result if self.spec.outputs else (result,)):
                    if not any(o is a for a in aliased):  # an output that is an input holds its values
                        o[...] = to_device(r, device_of(o))
                return out, saved
        return self.impl.forward(inputs, attrs, out)

    def _check_out(self, out, inputs: dict, attrs: dict) -> tuple:
        """`out`'s arrays as a tuple, checked against the output's shape and dtype; for a multi-output
        op `out` is itself a tuple with one array per output. An output that is an input itself
        (`spec.aliases`) must be given as that very input array."""
        shapes, dtypes = self.spec.output_shape(inputs, attrs), self.spec.output_dtype(inputs, attrs)
        names = self.spec.outputs
        if not names:
            outs, shapes, dtypes, labels = (out,), (shapes,), (dtypes,), ("out",)
        else:
            if not isinstance(out, tuple) or len(out) != len(names):
                raise TypeError(f"{self.spec.name}: out must be a tuple of {len(names)} arrays "
                                f"({', '.join(names)}), got {type(out).__name__}"
                                + (f" of {len(out)}" if isinstance(out, tuple) else ""))
            outs, labels = out, [f"out[{i}] ({n})" for i, n in enumerate(names)]
        for o, shape, dtype, label in zip(outs, shapes, dtypes, labels):
            if tuple(o.shape) != shape:
                raise ValueError(f"{self.spec.name}: {label} must have shape {shape}, got {tuple(o.shape)}")
            if str(o.dtype) != dtype:
                raise TypeError(f"{self.spec.name}: {label} must have dtype {dtype}, got {o.dtype}")
        aliases = self.spec.aliases(inputs)
        for i, name in enumerate(names or ("out",)):
            alias = aliases.get(name)
            if alias is not None and outs[i] is not inputs[alias]:
                raise ValueError(f"{self.spec.name}: with these inputs output {name} is input '{alias}' itself "
                                 f"(nothing is written for it), so {labels[i]} must be that very array; got another")
        return tuple(outs)

    def _backward(self, saved, grad_output, grads: dict):
        missing = [p for p in self.spec.params if p not in grads and p not in self.spec.optional]
        remote = {k: g for k, g in grads.items() if g is not None and device_of(g) != self.device}
        local = {k: (to_device(g, self.device) if k in remote else g) for k, g in grads.items()}
        if missing:
            raise ValueError(f"{self.spec.name}: backward needs gradient buffers for parameters {missing}")
        if self.spec.outputs:  # one gradient per output, None where it is zero
            names = self.spec.outputs
            if not isinstance(grad_output, tuple) or len(grad_output) != len(names):
                raise TypeError(f"{self.spec.name}: grad_output must be a tuple of {len(names)} gradients "
                                f"({', '.join('d' + n for n in names)}; None for zero), got {type(grad_output).__name__}")
            grad_output = tuple(to_device(g, self.device) for g in grad_output)
        elif self.spec.grad_input and grad_output is not None and device_of(grad_output) != self.device:
            grad_output = None  # the forward's own copy of it on this device is what the variant holds
        else:
            grad_output = to_device(grad_output, self.device)
        result = self.impl.backward(saved, grad_output, local)
        for k, g in remote.items():  # copy accumulated parameter gradients back where they live
            g[...] = to_device(local[k], device_of(g))
            result[k] = g
        return result


class Kernels:
    """One Kernel per op, resolved from a selection string; `kernels["layernorm"]` is a Kernel."""

    def __init__(self, text: str = FALLBACK_BACKEND, dtype: str | None = None, registry: Registry | None = None):
        self.text = text
        self.registry = registry or get_registry()
        self.notes: list[str] = []
        self.selection = selection = Selection.parse(text)
        # an inference-only op (attention_cached) is not held to the training dtype: generation with a
        # variant that lacks it fails there, with the dispatcher's message, not the whole selection here
        self.variants: dict[str, Variant] = {
            op: self._resolve(op, selection, None if getattr(OPS[op], "inference_only", False) else dtype)
            for op in OPS if not OPS[op].replaces}
        for op in OPS:  # fused ops after the primitives they replace
            if OPS[op].replaces:
                fused = self._resolve_fused(op, selection, dtype)
                if fused is not None:
                    self.variants[op] = fused
        self._kernels: dict[str, Kernel] = {}
        # the warning is about the training step: an inference-only op (attention_cached) that falls
        # back to naive is said in `notes`, and by the KV cache when it is used
        step = {op: v for op, v in self.variants.items() if not getattr(OPS[op], "inference_only", False)}
        devices = sorted({v.device for v in step.values()})
        if len(devices) > 1:
            where = "; ".join(d + ": " + ", ".join(op for op, v in step.items() if v.device == d)
                              for d in devices)
            warnings.warn(f"--backend {text!r} mixes devices ({where}): "
                          "activations are copied between host and GPU at every boundary, every step",
                          stacklevel=2)

    def _resolve(self, op: str, sel: Selection, dtype: str | None) -> Variant:
        if sel.overrides.get(op, sel.default) == AUTO:
            return self._auto(op, dtype)
        if op in sel.overrides:
            choice = sel.overrides[op]
            backend_name, _, variant_name = choice.partition(":")
            backend = self._backend(backend_name)
            if variant_name:
                try:
                    variant = self.registry.find(choice, op)
                except ValueError as e:
                    raise SelectionError(str(e)) from None
            else:
                if not backend.variants_of(op):
                    offering = sorted({v.backend for v in self.registry.variants(op)})
                    raise SelectionError(f"backend {backend_name} offers no variant of op {op}; "
                                         f"backends that do: {', '.join(offering)}")
                variant = self._first_usable(backend.variants_of(op), op, dtype)
            return self._usable(variant, dtype)
        if sel.default is not None:
            backend_name = sel.default
            candidates = self._backend(backend_name).variants_of(op)
        else:  # the rest from the first backend named; naive where it offers nothing usable here
            backend_name = self._first_named_backend(sel)
            candidates = [v for v in self._backend(backend_name).variants_of(op)
                          if v.unavailable_reason() is None and (dtype is None or dtype in v.dtypes)]
        if not candidates:
            if backend_name != FALLBACK_BACKEND:
                self.notes.append(f"{op}: backend {backend_name} has no usable variant; "
                                  f"falling back to {FALLBACK_BACKEND}")
            candidates = self._backend(FALLBACK_BACKEND).variants_of(op)
        return self._usable(self._first_usable(candidates, op, dtype), dtype)

    @staticmethod
    def _first_named_backend(sel: Selection) -> str:
        """The backend of the first override that names one (not auto or none), else naive."""
        for choice in sel.overrides.values():
            name = choice.partition(":")[0]
            if name not in (AUTO, COMPOSE):
                return name
        return FALLBACK_BACKEND

    def _resolve_fused(self, op: str, sel: Selection, dtype: str | None) -> Variant | None:
        """A fused op (one that replaces several primitives) is used only where it cannot change what
        the user selected: when named explicitly, or when every primitive it replaces comes from one
        backend that offers it. Otherwise None: the model composes the primitives. `op=none` asks for
        the composition (to compare fused with unfused)."""
        if sel.overrides.get(op) == COMPOSE:
            self.notes.append(f"{op}: not fused ({op}={COMPOSE}): the model composes {', '.join(OPS[op].replaces)}")
            return None
        if op in sel.overrides and sel.overrides[op] != AUTO:
            return self._resolve(op, sel, dtype)
        owners = {self.variants[p].backend for p in OPS[op].replaces}
        if len(owners) != 1:
            self.notes.append(f"{op}: not fused, its primitives {', '.join(OPS[op].replaces)} come from "
                              f"different backends ({', '.join(sorted(owners))})")
            return None
        backend = self.registry.backend(owners.pop())
        usable = [v for v in backend.variants_of(op) if not v.opt_in
                  and v.unavailable_reason() is None and (dtype is None or dtype in v.dtypes)]
        return usable[0] if usable else None

    def named(self, op: str) -> bool:
        """Whether the selection names `op` itself (`op=backend[:variant]`), not just its backend."""
        return op in self.selection.overrides

    def has(self, op: str) -> bool:
        """Whether a variant of `op` was selected (fused ops may not be: then compose the primitives)."""
        return op in self.variants

    def _auto(self, op: str, dtype: str | None) -> Variant:
        """'auto': the fastest variant that passed on this device, from the bench records
        (euler_core/measure/auto.py); naive, with a note saying why, when there are none."""
        from .measure.auto import choose
        choice = choose(op, dtype, self.registry)
        if choice.variant is None:
            self.notes.append(f"{op}: auto: {choice.reason}; falling back to {FALLBACK_BACKEND}")
            return self._usable(self._first_usable(self._backend(FALLBACK_BACKEND).variants_of(op), op, dtype), dtype)
        self.notes.append(f"{op}: auto chose {choice.variant}, {choice.reason}")
        return self._usable(self.registry.find(choice.variant, op), dtype)

    def _backend(self, name: str):
        try:
            return self.registry.backend(name)
        except ValueError as e:
            raise SelectionError(f"{e}; ops: {', '.join(OPS)}") from None

    @staticmethod
    def _first_usable(candidates: list[Variant], op: str, dtype: str | None) -> Variant:
        """The first variant (in the backend's order) that can run here and takes `dtype`."""
        for v in candidates:
            if v.unavailable_reason() is None and (dtype is None or dtype in v.dtypes):
                return v
        return candidates[0]  # unusable: _usable() says why

    def _usable(self, variant: Variant, dtype: str | None) -> Variant:
        reason = variant.unavailable_reason()
        if reason:
            raise SelectionError(f"variant {variant.qualname} of op {variant.op} cannot run here: {reason}")
        if dtype is not None and dtype not in variant.dtypes:
            takers = sorted({v.backend for v in self.registry.variants(variant.op) if dtype in v.dtypes})
            where = (f"backends whose {variant.op} takes {dtype}: {', '.join(takers)}" if takers else
                     f"no backend's {variant.op} takes {dtype}")
            raise SelectionError(f"variant {variant.qualname} of op {variant.op} does not take {dtype}; "
                                 f"it takes {', '.join(variant.dtypes)} ({where})")
        return variant

    def __getitem__(self, op: str) -> Kernel:
        if op not in self._kernels:
            self._kernels[op] = Kernel(self.variants[op])
        return self._kernels[op]

    @property
    def device(self) -> str:
        """Where the model's parameters live: the device of the matmul variant (most of the work)."""
        return self.variants["matmul"].device

    def describe(self) -> list[str]:
        return [f"{op:<13} {v.qualname:<24} {v.device}" for op, v in self.variants.items()]
