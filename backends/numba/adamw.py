"""adamw, numba: the whole AdamW update of one element in one parallel pass, in place.

Same update as backends/naive/adamw.py, which makes five passes over memory with temporaries
(g, m_hat, v_hat, ...); here each element's param, m and v are read once and written once (and
param_copy written once, when given). The scalars (betas, bias corrections, lr, the clipping
factor) are cast to the parameter's dtype so float32 stays float32.
"""

import numpy as np
from numba import prange

from euler_core.ops.adamw import host_grad_scale, host_value

from ._jit import pjit, scalar


@pjit
def _update(p, g, m, v, lr, b1, b2, eps, wd, bc1, bc2, gs, one):
    for i in prange(p.size):
        gi = g[i] * gs
        mi = b1 * m[i] + (one - b1) * gi
        vi = b2 * v[i] + (one - b2) * gi * gi
        m[i] = mi
        v[i] = vi
        p[i] -= lr * ((mi / bc1) / (np.sqrt(vi / bc2) + eps) + wd * p[i])


def forward(inputs, attrs, out=None):
    param, m, v = inputs["param"], inputs["m"], inputs["v"]
    scale = host_grad_scale(inputs, attrs)
    if scale is None:
        return None, None  # a NaN or Inf in the gradient: skip the step, change nothing
    dt = param.dtype
    grad = np.ascontiguousarray(inputs["grad"], dtype=dt)
    b1, b2, t = attrs["beta1"], attrs["beta2"], host_value(attrs["step"])
    args = tuple(scalar(a, dt) for a in (host_value(attrs["lr"]), b1, b2, attrs["eps"], attrs["weight_decay"],
                                         1.0 - b1 ** t, 1.0 - b2 ** t, scale, 1.0))
    arrays = (param, m, v)
    if all(a.flags.c_contiguous for a in arrays):
        _update(param.reshape(-1), grad.reshape(-1), m.reshape(-1), v.reshape(-1), *args)
    else:  # strided views: update contiguous copies, then write them back
        pc, mc, vc = (np.ascontiguousarray(a) for a in arrays)
        _update(pc.reshape(-1), grad.reshape(-1), mc.reshape(-1), vc.reshape(-1), *args)
        param[...], m[...], v[...] = pc, mc, vc
    if inputs.get("param_copy") is not None:
        inputs["param_copy"][...] = param
    return None, None
