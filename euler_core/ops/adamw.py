"""adamw: one AdamW step, in place, on a flat (or any-shaped) parameter tensor.

With g = grad * grad_scale (grad_scale < 1 when the gradient norm is clipped) and t = step >= 1:

    m     <- beta1 * m + (1 - beta1) * g
    v     <- beta2 * v + (1 - beta2) * g^2
    m_hat  = m / (1 - beta1^t)          v_hat = v / (1 - beta2^t)
    param <- param - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)

(Loshchilov and Hutter's decoupled weight decay, as in PyTorch's AdamW and llm.c.) param, m and v
are updated in place; grad is read only. There is no output and no backward. The core calls it once
for the weights that decay and once for those that do not (biases, layernorms), which lie in two
contiguous halves of the flat parameter buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import REQUIRED, OpSpec, expect_array, nbytes, random_float


@dataclass(frozen=True)
class AdamWSpec(OpSpec):
    name: str = "adamw"
    inputs: tuple = ("param", "grad", "m", "v")
    output: str | None = None
    attrs: dict = field(default_factory=lambda: {"lr": REQUIRED, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                                 "weight_decay": 0.0, "step": REQUIRED, "grad_scale": 1.0})

    def check(self, inputs, attrs):
        shape = expect_array(self.name, "param", inputs["param"])
        for name in ("grad", "m", "v"):
            s = expect_array(self.name, name, inputs[name])
            if s != shape:
                raise ValueError(f"adamw: '{name}' must have the shape of param {shape}, got {s}")
        for name in ("m", "v"):
            if inputs[name].dtype != inputs["param"].dtype:
                raise TypeError(f"adamw: '{name}' must have param's dtype {inputs['param'].dtype}, "
                                f"got {inputs[name].dtype}")
        if not (isinstance(attrs["step"], int) and attrs["step"] >= 1):
            raise ValueError(f"adamw: step must be an int >= 1, got {attrs['step']!r}")
        for name in ("beta1", "beta2"):
            if not 0 <= attrs[name] < 1:
                raise ValueError(f"adamw: {name} must lie in [0, 1), got {attrs[name]}")
        if attrs["lr"] < 0 or attrs["eps"] <= 0 or attrs["weight_decay"] < 0:
            raise ValueError("adamw: lr and weight_decay must be >= 0 and eps > 0, got "
                             f"lr={attrs['lr']}, eps={attrs['eps']}, weight_decay={attrs['weight_decay']}")

    def output_shape(self, inputs, attrs):
        return None

    def flops(self, inputs, attrs):
        return {"forward": 14 * inputs["param"].size, "backward": 0}

    def bytes_moved(self, inputs, attrs):
        p, g, m, v = (inputs[k] for k in self.inputs)
        return {"forward": nbytes(g) + 2 * nbytes(p, m, v), "backward": 0}

    def example(self, dims, dtype, rng):
        n = dims["N"]
        v = random_float(rng, (n,), dtype) ** 2 * 0.01
        return ({"param": random_float(rng, (n,), dtype), "grad": random_float(rng, (n,), dtype),
                 "m": random_float(rng, (n,), dtype) * 0.1, "v": v},
                {"lr": 1e-3, "weight_decay": 0.1, "step": 3})


SPEC = AdamWSpec()
