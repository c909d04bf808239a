"""adamw, triton: the whole AdamW update fused into one pass over param, grad, m and v.

Per element, in float32 whatever the storage dtype (euler_core.ops.adamw has the math):

    g = grad * s;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
    param -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * param)
    param_copy = param rounded to its dtype (the bf16 working copy, in mixed precision)

with s = grad_scale, times min(1, max_norm / sqrt(grad_sumsq)) when clipping. Naive does this in
about ten NumPy passes, each reading and writing whole arrays; here each of the four arrays is read
once and three (four with param_copy) are written once: the minimum traffic for the update.

Nothing is read on the host: `lr` and `step` may be device scalars (then the kernel loads them and
computes the bias corrections 1/(1 - b^t) = 1/(1 - exp(t ln b)) in float32), and the clipping factor
and the bad-step test come from `grad_sumsq` on the device; a non-finite norm masks every load and
store off, so the step changes nothing. With host numbers the bias corrections are computed on the
host in float64 and passed in. A step whose scalars all live on the device can be captured in a
CUDA graph and replayed with new values.
"""

from euler_core.ops.adamw import is_device_scalar

from . import _common
from ._runtime import cdiv, kernel, launch, tl

BLOCK = 1024


@kernel
def _adamw(p_ptr, g_ptr, m_ptr, v_ptr, copy_ptr, sumsq_ptr, lr_arg, step_arg, n, beta1, beta2, eps,
           weight_decay, grad_scale, max_norm, bc1_host, bc2_host,
           HAS_COPY: tl.constexpr, HAS_SUMSQ: tl.constexpr, CLIP: tl.constexpr, LR_ON_DEVICE: tl.constexpr,
           STEP_ON_DEVICE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    scale = grad_scale
    if HAS_SUMSQ:
        norm = tl.sqrt(tl.load(sumsq_ptr).to(tl.float32))
        n = tl.where(norm <= 3.0e38, n, 0)  # NaN or Inf (the comparison is False): a bad step writes nothing
        if CLIP:
            scale = scale * tl.where(norm > max_norm, max_norm / norm, 1.0)
    if LR_ON_DEVICE:
        lr = tl.load(lr_arg)
    else:
        lr = lr_arg
    if STEP_ON_DEVICE:
        t = tl.load(step_arg)
        bc1 = 1.0 / (1.0 - tl.exp(t * tl.log(beta1)))
        bc2 = 1.0 / (1.0 - tl.exp(t * tl.log(beta2)))
    else:
        bc1 = bc1_host
        bc2 = bc2_host
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32) * scale
    m = tl.load(m_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    update = (m * bc1) / (tl.sqrt(v * bc2) + eps) + weight_decay * p
    p = p - lr * update
    tl.store(m_ptr + offs, m.to(m_ptr.dtype.element_ty), mask=mask)
    tl.store(v_ptr + offs, v.to(v_ptr.dtype.element_ty), mask=mask)
    tl.store(p_ptr + offs, p.to(p_ptr.dtype.element_ty), mask=mask)
    if HAS_COPY:
        tl.store(copy_ptr + offs, p.to(copy_ptr.dtype.element_ty), mask=mask)


def forward(inputs, attrs, out=None):
    p, g, m, v = (inputs[k] for k in ("param", "grad", "m", "v"))
    copy, sumsq = inputs.get("param_copy"), inputs.get("grad_sumsq")
    for name, a in (("param", p), ("grad", g), ("m", m), ("v", v), ("param_copy", copy)):
        if a is not None:
            _common.check_float("adamw", name, a)
    _common.check_contiguous("adamw", param=p, grad=g, m=m, v=v, param_copy=copy)
    b1, b2 = float(attrs["beta1"]), float(attrs["beta2"])
    lr, step = attrs["lr"], attrs["step"]
    lr_dev, step_dev = is_device_scalar(lr), is_device_scalar(step)
    bc1 = bc2 = 1.0
    if not step_dev:
        bc1, bc2 = 1.0 / (1.0 - b1 ** step), 1.0 / (1.0 - b2 ** step)
    launch(_adamw, (cdiv(p.size, BLOCK),), p, g, m, v, copy if copy is not None else p,
           sumsq if sumsq is not None else p, lr if lr_dev else float(lr), step if step_dev else float(step),
           p.size, b1, b2, float(attrs["eps"]), float(attrs["weight_decay"]), float(attrs["grad_scale"]),
           float(attrs["max_norm"]), bc1, bc2,
           HAS_COPY=copy is not None, HAS_SUMSQ=sumsq is not None, CLIP=sumsq is not None and attrs["max_norm"] > 0,
           LR_ON_DEVICE=lr_dev, STEP_ON_DEVICE=step_dev, BLOCK=BLOCK)
    return None, None


def backward(saved, dout, grads):  # pragma: no cover - adamw has no backward
    raise TypeError("adamw: has no backward")
