"""adamw: one AdamW step, in place, on a flat (or any-shaped) parameter tensor.

With t = step >= 1 and the gradient scaled (by grad_scale, and clipped when max_norm > 0):

    s     = grad_scale * (min(1, max_norm / sqrt(grad_sumsq)) if max_norm > 0 else 1)
    g     = grad * s
    m     <- beta1 * m + (1 - beta1) * g
    v     <- beta2 * v + (1 - beta2) * g^2
    m_hat  = m / (1 - beta1^t)          v_hat = v / (1 - beta2^t)
    param <- param - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)
    param_copy <- param, rounded to param_copy's dtype          (when param_copy is given)

(Loshchilov and Hutter's decoupled weight decay, as in PyTorch's AdamW and llm.c.) param, m, v and
param_copy are updated in place; grad is read only. There is no output and no backward. The core
calls it once for the weights that decay and once for those that do not (biases, layernorms), which
lie in two contiguous halves of the flat parameter buffer.

Mixed precision. `param`, `m` and `v` are the float32 master state; `param_copy` is the 16-bit
working copy the other kernels read, refreshed in the same pass (no second pass over the weights).

Clipping and bad steps. `grad_sumsq` (1,) is the sum of squares of the WHOLE gradient (the `sumsq`
op over the flat gradient buffer), so both halves are clipped by the global norm. When
sqrt(grad_sumsq) is not finite (a NaN or Inf somewhere in the gradient) the update is skipped:
param, m, v and param_copy are left exactly as they were, and the core reports the step.

Device scalars. `lr` and `step` may be Python numbers or (1,) float32 arrays on the variant's device
(step holding an integer >= 1). A GPU variant reads such an array on the device, never on the host,
so a captured CUDA graph replays with the values the core writes into the same arrays before each
replay. The bias corrections are then computed on the device in float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import REQUIRED, OpSpec, dtype_name, expect_array, nbytes, random_float

#: attributes that may be device scalars: a (1,) float32 array instead of a number
DEVICE_SCALARS = ("lr", "step")


def is_device_scalar(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def host_value(value) -> float:
    """A scalar attribute as a float on the host: for NumPy device scalars (CPU variants) only."""
    if is_device_scalar(value):
        if not isinstance(value, np.ndarray):
            raise TypeError("adamw: a CPU variant was given a GPU device scalar")
        return float(value[0])
    return float(value)


@dataclass(frozen=True)
class AdamWSpec(OpSpec):
    name: str = "adamw"
    inputs: tuple = ("param", "grad", "m", "v", "param_copy", "grad_sumsq")
    optional: tuple = ("param_copy", "grad_sumsq")
    output: str | None = None
    attrs: dict = field(default_factory=lambda: {"lr": REQUIRED, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                                 "weight_decay": 0.0, "step": REQUIRED, "grad_scale": 1.0,
                                                 "max_norm": 0.0})

    def check(self, inputs, attrs):
        shape = expect_array(self.name, "param", inputs["param"])
        dt = dtype_name(inputs["param"])
        for name in ("grad", "m", "v", "param_copy"):
            if inputs.get(name) is None:
                continue
            s = expect_array(self.name, name, inputs[name])
            if s != shape:
                raise ValueError(f"adamw: '{name}' must have the shape of param {shape}, got {s}")
        for name in ("m", "v"):
            if dtype_name(inputs[name]) != dt:
                raise TypeError(f"adamw: '{name}' must have param's dtype {dt}, got {inputs[name].dtype}")
        if inputs.get("grad_sumsq") is not None:
            s = expect_array(self.name, "grad_sumsq", inputs["grad_sumsq"])
            if s != (1,):
                raise ValueError(f"adamw: 'grad_sumsq' must have shape (1,) (the whole gradient's sum of "
                                 f"squares), got {s}")
        if attrs["max_norm"] > 0 and inputs.get("grad_sumsq") is None:
            raise ValueError("adamw: max_norm > 0 (clipping) needs the input 'grad_sumsq'")
        for name in DEVICE_SCALARS:
            value = attrs[name]
            if is_device_scalar(value):
                if tuple(value.shape) != (1,) or dtype_name(value) != "float32":
                    raise TypeError(f"adamw: a device scalar '{name}' must be a (1,) float32 array, got shape "
                                    f"{tuple(value.shape)} dtype {value.dtype}")
            elif not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"adamw: '{name}' must be a number or a (1,) float32 array, got {type(value).__name__}")
        step = attrs["step"]
        if not is_device_scalar(step) and not (float(step) == int(step) and step >= 1):
            raise ValueError(f"adamw: step must be an integer >= 1, got {step!r}")
        for name in ("beta1", "beta2"):
            if not 0 <= attrs[name] < 1:
                raise ValueError(f"adamw: {name} must lie in [0, 1), got {attrs[name]}")
        lr = attrs["lr"]
        if (not is_device_scalar(lr) and not lr >= 0) or not attrs["eps"] > 0 or not attrs["weight_decay"] >= 0 \
                or not attrs["max_norm"] >= 0:
            raise ValueError("adamw: lr, weight_decay and max_norm must be >= 0 and eps > 0, got "
                             f"lr={lr}, eps={attrs['eps']}, weight_decay={attrs['weight_decay']}, "
                             f"max_norm={attrs['max_norm']}")

    def output_shape(self, inputs, attrs):
        return None

    def flops(self, inputs, attrs):
        return {"forward": 14 * inputs["param"].size, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        p, g, m, v = (inputs[k] for k in ("param", "grad", "m", "v"))
        return {"forward": nbytes(g) + 2 * nbytes(p, m, v) + nbytes(inputs.get("param_copy")), "backward": 0}

    def example(self, dims, dtype, rng):
        n = dims["N"]
        v = random_float(rng, (n,), dtype) ** 2 * 0.01
        return ({"param": random_float(rng, (n,), dtype), "grad": random_float(rng, (n,), dtype),
                 "m": random_float(rng, (n,), dtype) * 0.1, "v": v},
                {"lr": 1e-3, "weight_decay": 0.1, "step": 3})


def host_grad_scale(inputs: dict, attrs: dict) -> float | None:
    """A CPU variant's factor on the gradient: grad_scale, times the clipping factor when grad_sumsq
    is given; None when the gradient holds a NaN or Inf (the step is skipped, nothing changes)."""
    scale = attrs["grad_scale"]
    if inputs.get("grad_sumsq") is not None:
        sumsq = float(inputs["grad_sumsq"][0])
        if not np.isfinite(np.sqrt(sumsq)):
            return None
        scale *= clip_factor(sumsq, attrs["max_norm"])
    return scale


def clip_factor(grad_sumsq: float, max_norm: float) -> float:
    """min(1, max_norm / sqrt(grad_sumsq)) (1 when max_norm is 0): the clipping of the gradient."""
    if max_norm <= 0:
        return 1.0
    norm = float(np.sqrt(grad_sumsq))
    return max_norm / norm if norm > max_norm else 1.0


SPEC = AdamWSpec()
