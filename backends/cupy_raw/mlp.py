"""mlp, cupy_raw (variant `epilogues`): GPT-2's MLP, out = gelu(x @ fc_weight.T + fc_bias) @
proj_weight.T + proj_bias, as matmul.py's wgmma GEMMs with the GELU's forward and its backward both in
GEMM epilogues (no kernel of its own). Both GELU GEMMs run in gemm_wgmma's pingpong schedule, each
warpgroup's GELU epilogue under the other's multiplies (matmul.py's CONFIGS say why).

Forward: c_fc's GEMM writes pre = x @ fc_weight.T + fc_bias and h = gelu(pre) from its TMA-store
epilogue (matmul.py's forward_gelu, as matmul_gelu.py's forward), then the projection's GEMM writes
out = h @ proj_weight.T + proj_bias, or with a residual input out = residual + that, the stream read
by the epilogue (matmul.py's forward_residual, as matmul_residual.py's: bitwise the projection then
residual's add). Backward: the residual's gradient is dout itself.

Backward, given dout (N,M):

    dpre  = (dout @ proj_weight) * gelu'(pre)    the projection's dx GEMM (matmul.cu's FLAG_DGELU:
                                                 pre prefetched by TMA into the store's image)
    dproj_weight += dout.T @ h,  dproj_bias += sum_n dout      its dW GEMM (db fused into it)
    dx = dpre @ fc_weight,  dfc_weight += dpre.T @ x,  dfc_bias += sum_n dpre      c_fc's backward

Against matmul_gelu then matmul (the fastest composition before it), the projection's dx GEMM writes
dpre straight away: d(h) is never written and read back, and gelu's backward pass over it (dout, pre
in, dpre out: 3 x N x H values) is gone; pre is read once, by the copy engine, under the multiplies.
The arithmetic is the composition's: the product rounded to x's dtype as the plain dx would store it,
then gelu.cu's backward of that (common.cuh's gelu_tanh_backward), so dpre, and every gradient after
it, is bitwise what matmul_gelu + matmul compute.

Saved: x, pre and h (two (N, H) arrays a call, the op's own), and the weights.
Operands TMA cannot describe and float32 inputs take gemm_mma / gemm_simt with the same epilogues:
the same results, slower.
"""

from dataclasses import dataclass

from . import _common, matmul
from .residual import copy_into

OP = "mlp"


@dataclass
class Saved:
    fc: matmul.Saved    # x, fc_weight, fc_bias
    proj: matmul.Saved  # h = gelu(pre), proj_weight, proj_bias
    pre: object         # (N, H): c_fc's output, the GELU's input
    residual: bool      # whether the forward added a residual (its gradient is then dout)


def forward(inputs, attrs, out=None):
    x = inputs["x"]
    fc_weight, fc_bias = inputs["fc_weight"], inputs.get("fc_bias")
    proj_weight, proj_bias = inputs["proj_weight"], inputs.get("proj_bias")
    matmul.check_operands(x, fc_weight, fc_bias, op=f"{OP} (c_fc)")
    N, H = x.shape[0], fc_weight.shape[0]
    xp = _common.xp_of(x)
    pre = xp.empty((N, H), dtype=x.dtype)
    h = matmul.wgmma.forward_gelu(x, fc_weight, fc_bias, out=xp.empty((N, H), dtype=x.dtype), pre=pre)
    matmul.check_operands(h, proj_weight, proj_bias, op=f"{OP} (projection)")
    if inputs.get("residual") is None:
        y, s_proj = matmul.wgmma.forward({"x": h, "weight": proj_weight, "bias": proj_bias}, {}, out=out)
    else:
        y, s_proj = matmul.wgmma.forward_residual(h, proj_weight, proj_bias, inputs["residual"], out=out)
    return y, Saved(matmul.Saved(x, fc_weight, fc_bias), s_proj, pre, inputs.get("residual") is not None)


def backward(saved, dout, grads):
    # every buffer checked before the first launch (naming this op): a refusal must leave the
    # accumulated gradients as they were
    h = saved.proj.x
    N, M = h.shape[0], saved.proj.weight.shape[0]
    if str(dout.dtype) != str(h.dtype) or tuple(dout.shape) != (N, M):
        raise ValueError(f"{OP}: dout must be {h.dtype} of shape {(N, M)}, got {dout.dtype} {tuple(dout.shape)}")
    _common.check_contiguous(OP, dout=dout)
    if grads.get("x") is not None:
        _common.grad_buffer(OP, grads, "x", saved.fc.x, _common.xp_of(h))
    if saved.residual and grads.get("residual") is not None:
        _common.grad_buffer(OP, grads, "residual", dout, _common.xp_of(h))
    for name, param in (("fc_weight", saved.fc.weight), ("fc_bias", saved.fc.bias),
                        ("proj_weight", saved.proj.weight), ("proj_bias", saved.proj.bias)):
        if param is not None:
            _common.check_param_grad(OP, name, grads[name], param)
    proj_grads = {"weight": grads["proj_weight"], "bias": grads.get("proj_bias")}
    dpre = matmul.wgmma.backward(saved.proj, dout, proj_grads, dgelu_at=saved.pre)["x"]  # (dout W) * gelu'(pre)
    fc_grads = {"weight": grads["fc_weight"], "bias": grads.get("fc_bias"), "x": grads.get("x")}
    result = matmul.wgmma.backward(saved.fc, dpre, fc_grads)
    result = {"x": result["x"], "fc_weight": result["weight"], "proj_weight": proj_grads["weight"]}
    if saved.residual:
        result["residual"] = dout if grads.get("residual") is None else copy_into(dout, grads["residual"])
    for name, param in (("fc_bias", saved.fc.bias), ("proj_bias", saved.proj.bias)):
        if param is not None:
            result[name] = grads[name]
    return result
