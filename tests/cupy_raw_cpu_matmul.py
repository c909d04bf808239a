"""A test-only matmul for the CPU that takes 16-bit NumPy arrays (float32 products, rounded once;
parameter gradients accumulated in their buffer's dtype, float32 under mixed precision), so a whole
model step can run the cupy_raw kernels in the CPU emulator with 16-bit activations
(tests/test_cupy_raw_emulator.py). The naive matmul takes float32 and float64 only."""

from dataclasses import dataclass

import numpy as np


@dataclass
class Saved:
    x: np.ndarray       # (N,K)
    weight: np.ndarray  # (M,K)
    has_bias: bool


def _f32(a):
    return a.astype(np.float32)


def forward(inputs, attrs, out=None):
    x, w, b = inputs["x"], inputs["weight"], inputs.get("bias")
    y = _f32(x) @ _f32(w).T + (0.0 if b is None else _f32(b))
    out = np.empty(y.shape, dtype=x.dtype) if out is None else out
    out[...] = y.astype(x.dtype)
    return out, Saved(x, w, b is not None)


def backward(saved, dout, grads):
    d = _f32(dout)
    dx = grads.get("x") if grads.get("x") is not None else np.empty(saved.x.shape, saved.x.dtype)
    dx[...] = (d @ _f32(saved.weight)).astype(dx.dtype)
    dw = grads["weight"]
    dw[...] = (_f32(dw) + d.T @ _f32(saved.x)).astype(dw.dtype)
    result = {"x": dx, "weight": dw}
    if saved.has_bias:
        grads["bias"][...] = (_f32(grads["bias"]) + d.sum(0)).astype(grads["bias"].dtype)
        result["bias"] = grads["bias"]
    return result
