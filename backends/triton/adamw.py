"""adamw, triton: the whole AdamW update fused into one pass over param, grad, m and v.

Per element, in float32 whatever the storage dtype (euler_core.ops.adamw has the math):

    g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
    param -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * param)

Naive does this in about ten NumPy passes, each reading and writing whole arrays; here each of the
four arrays is read once and three are written once: the minimum traffic for the update. The bias
corrections are computed once on the host (float64) and passed as two factors.
"""

from . import _common
from ._runtime import cdiv, kernel, launch, tl, xp_of

BLOCK = 1024


@kernel
def _adamw(p_ptr, g_ptr, m_ptr, v_ptr, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2,
           BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32) * grad_scale
    m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    update = (m * bc1) / (tl.sqrt(v * bc2) + eps) + weight_decay * p
    p = p - lr * update
    tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)
    tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), mask=mask)
    tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=mask)


def forward(inputs, attrs, out=None):
    p, g, m, v = (inputs[k] for k in ("param", "grad", "m", "v"))
    for name, a in (("param", p), ("grad", g), ("m", m), ("v", v)):
        _common.check_float("adamw", name, a)
    _common.check_contiguous("adamw", param=p, grad=g, m=m, v=v)
    xp_of(p)
    t = attrs["step"]
    b1, b2 = float(attrs["beta1"]), float(attrs["beta2"])
    bc1, bc2 = 1.0 / (1.0 - b1 ** t), 1.0 / (1.0 - b2 ** t)
    launch(_adamw, (cdiv(p.size, BLOCK),), p, g, m, v, p.size, float(attrs["lr"]), b1, b2,
           float(attrs["eps"]), float(attrs["weight_decay"]), float(attrs["grad_scale"]), bc1, bc2,
           BLOCK=BLOCK)
    return None, None


def backward(saved, dout, grads):  # pragma: no cover - adamw has no backward
    raise TypeError("adamw: has no backward")
