"""The op spec: what every implementation of one GPT-2 op must compute, and how it is called.

An op spec names its inputs (and which of them are *parameters*), its attributes with defaults, and
its output (adamw has none: it updates in place; a fused op may have several, see below). It
validates inputs before any kernel sees them, gives the output shape, counts FLOPs and bytes for
the roofline, and makes random example inputs for the conformance suite and the benchmarks.

The kernel contract (docs/op-contracts.md has the long form). A variant's implementation offers

    forward(inputs: dict, attrs: dict, out: array | None) -> (output, saved)
    backward(saved, grad_output: array, grads: dict) -> dict

- `inputs` maps the spec's input names to arrays (NumPy on cpu, CuPy on cuda); `attrs` holds every
  attribute, defaults filled in by the core. `out`, when given, is a preallocated array of the
  output's shape and dtype: the kernel writes every element of it and returns it.
- `saved` is opaque to the core: it goes back to the same variant's backward.
- In `grads`, the core passes one buffer per *parameter* input (e.g. `weight`, `bias`): the backward
  ACCUMULATES into it (`dW += ...`), so gradient accumulation over micro-batches costs nothing; the
  core zeroes those buffers once per optimizer step. It may also pass a buffer for an *activation*
  input (e.g. `x`): the backward OVERWRITES every element of that one. The returned dict maps every
  differentiable input's name to its gradient (parameters: the buffer it accumulated into).
- Inputs are never modified (adamw excepted: it updates param, m and v in place).

Fused ops (`replaces` names the primitives one does the work of, e.g. layernorm_residual: residual
then layernorm) are specified and checked like the primitives, with two extensions of the contract:

- Several outputs (`outputs` names them; `output` is then a label for them all): forward returns a
  tuple of arrays, `out` is None or a tuple of preallocated arrays (one per output, in order),
  `output_shape`/`output_dtype` return one shape/dtype per output, and backward's `grad_output` is
  a tuple with one gradient per output, where None means that output's gradient is zero (the
  residual stream after the last block feeds only the final layernorm).
- An output that is an input itself (`aliases`: layernorm_residual without `b`, whose stream x is
  its input a): the forward returns that very input array and writes nothing for it, and the
  output's entry in `out` must be that input (the dispatcher refuses any other array).
- The output's gradient given ahead (`grad_input` names an input, classifier_crossentropy's and
  crossentropy_onepass's `dlosses`): the forward computes the input gradients while its intermediates exist, so they never
  have to be kept; backward then accumulates what the forward computed, and its `grad_output` must
  be None or that very input array (not a copy: the values were already used). Without that input
  the forward computes the outputs only (evaluation) and backward is refused with a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")


def dtype_name(array) -> str:
    """The dtype of a NumPy/CuPy array as a plain string ('float32', 'bfloat16', 'int64', ...)."""
    dtype = array.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:  # str(dtype) costs microseconds, and every kernel call asks it of every input
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


_DTYPE_NAMES: dict = {}


@dataclass(frozen=True)
class OpSpec:
    """Base class of the op specs; each op's module defines one subclass and one instance."""

    name: str
    inputs: tuple[str, ...]
    params: tuple[str, ...] = ()
    differentiable: tuple[str, ...] = ()
    output: str | None = "out"
    attrs: dict = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    #: a fused op names the primitive ops it does the work of (matmul_gelu: matmul, gelu); the model
    #: uses it only where the selection takes it (Kernels), and composes the primitives otherwise
    replaces: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()        # a multi-output op's output names (see the module docstring)
    grad_input: str | None = None        # the input that carries the output's gradient, given ahead

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names: () for adamw, one name for most ops, several for a multi-output op."""
        if self.outputs:
            return self.outputs
        return () if self.output is None else (self.output,)

    # ---- attributes -------------------------------------------------------------------------
    def fill_attrs(self, attrs: dict | None) -> dict:
        """Every attribute, the given ones over the defaults; unknown names are an error."""
        attrs = dict(attrs or {})
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; "
                            f"expected some of {sorted(self.attrs)}")
        full = dict(self.attrs)
        full.update(attrs)
        missing = [k for k, v in full.items() if v is REQUIRED]
        if missing:
            raise TypeError(f"{self.name}: missing required attribute(s) {missing}")
        return full

    # ---- validation ---------------------------------------------------------------------------
    def validate(self, inputs: dict, attrs: dict) -> None:
        """Raise ValueError/TypeError naming the op, the argument and what was expected."""
        missing = [n for n in self.inputs if n not in inputs and n not in self.optional]
        if missing:
            raise TypeError(f"{self.name}: missing input(s) {missing}; expected {list(self.inputs)}")
        unknown = set(inputs) - set(self.inputs)
        if unknown:
            raise TypeError(f"{self.name}: unknown input(s) {sorted(unknown)}; expected {list(self.inputs)}")
        self.check(inputs, attrs)

    def check(self, inputs: dict, attrs: dict) -> None:  # pragma: no cover - every op overrides
        raise NotImplementedError

    def output_shape(self, inputs: dict, attrs: dict) -> tuple[int, ...] | None:
        """The output's shape (a multi-output op: a tuple of shapes, one per output)."""
        raise NotImplementedError

    def output_dtype(self, inputs: dict, attrs: dict) -> str:
        """The output's dtype name (a multi-output op: a tuple, one per output)."""
        return dtype_name(inputs[self.inputs[0]])

    def aliases(self, inputs: dict) -> dict:
        """{output name: input name} for each output that, with these inputs, is that input array
        itself (returned as it is, never written); {} for most ops."""
        return {}

    # ---- roofline counts ----------------------------------------------------------------------
    def flops(self, inputs: dict, attrs: dict) -> dict:
        """{'forward': FLOPs, 'backward': FLOPs} for these inputs (multiply-add = 2 FLOPs)."""
        raise NotImplementedError

    def bytes_moved(self, inputs: dict, attrs: dict) -> dict:
        """{'forward': bytes, 'backward': bytes}: the minimum DRAM traffic (each array once)."""
        raise NotImplementedError

    def check_backward(self, forward_grad, grad_output) -> None:
        """For an op with `grad_input`: a variant's backward calls this first. It needs a forward that
        was given that input (kept as `forward_grad`), and grad_output None or that very array."""
        if forward_grad is None:
            raise ValueError(f"{self.name}: backward needs a forward that was given {self.grad_input} (this one "
                             f"computed the outputs only); pass the gradient of the total loss per position as "
                             f"input '{self.grad_input}'")
        if grad_output is not None and grad_output is not forward_grad:
            raise ValueError(f"{self.name}: backward's grad_output must be None or the {self.grad_input} array given "
                             "to the forward (the gradient was applied there); got another array")

    # ---- examples -----------------------------------------------------------------------------
    def example(self, dims: dict, dtype: str, rng: np.random.Generator) -> tuple[dict, dict]:
        """Random (inputs, attrs) at the named dimensions, NumPy arrays; never zeros."""
        raise NotImplementedError


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()


# ---- checks shared by the specs ----------------------------------------------------------------
def expect_array(op: str, name: str, a, ndim: int | None = None, kind: str = "float"):
    """Check that `a` is an array of the right rank and kind ('float' or 'int'); return its shape."""
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(f"{op}: input '{name}' must be an array, got {type(a).__name__}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{op}: input '{name}' must be {ndim}-D, got shape {tuple(a.shape)}")
    dt = dtype_name(a)
    if kind == "float" and dt not in FLOAT_DTYPES:
        raise TypeError(f"{op}: input '{name}' must be a float array ({', '.join(FLOAT_DTYPES)}), got {dt}")
    if kind == "int" and not np.issubdtype(np.dtype(dt), np.integer):
        raise TypeError(f"{op}: input '{name}' must be an integer array, got {dt}")
    return tuple(a.shape)


def expect_same_dtype(op: str, inputs: dict, names) -> None:
    dts = {n: dtype_name(inputs[n]) for n in names if inputs.get(n) is not None}
    if len(set(dts.values())) > 1:
        raise TypeError(f"{op}: float inputs must share one dtype, got {dts}")


def expect_shape(op: str, name: str, a, shape: tuple) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{op}: input '{name}' must have shape {tuple(shape)}, got {tuple(a.shape)}")


def nbytes(*arrays) -> int:
    return int(sum(a.size * a.dtype.itemsize for a in arrays if a is not None))


def random_float(rng, shape, dtype, scale=1.0):
    """Normal random values, never exactly zero, in `dtype` (bfloat16 kept as float32 for NumPy)."""
    x = rng.standard_normal(shape) * scale
    x[x == 0] = 0.5
    np_dtype = "float32" if dtype in ("bfloat16",) else dtype
    return x.astype(np_dtype)
