"""mlp, cupy_raw: GPT-2's MLP, out = gelu(x @ fc_weight.T + fc_bias) @ proj_weight.T + proj_bias, as
matmul.py's wgmma GEMMs with the GELU's forward and its backward both in GEMM epilogues (no kernel of
its own). Two variants, the same arithmetic (bitwise the same results):

    epilogues   the two GELU GEMMs in gemm_wgmma's cooperative schedule (matmul.CONFIGS): both
                consumer warpgroups on one 128 x 256 tile, so the tensor cores wait while the
                epilogue's GELU (or gelu') runs
    pingpong    the same two GEMMs in the pingpong schedule (matmul.PINGPONG_CONFIGS): each consumer
                warpgroup a 64 x 256 tile of its own, its epilogue (the GELU, or pre prefetched and
                gelu') run while the other warpgroup's tile multiplies; the price is 1.67x the operand
                bytes per result (measured slower for the plain products: reports/cupy_raw-h200/
                pingpong-61e6ab8)

Forward: c_fc's GEMM writes pre = x @ fc_weight.T + fc_bias and h = gelu(pre) from its TMA-store
epilogue (matmul.py's forward_gelu, as matmul_gelu.py's forward), then the projection's GEMM writes
out = h @ proj_weight.T + proj_bias.

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

OP = "mlp"


@dataclass
class Saved:
    fc: matmul.Saved    # x, fc_weight, fc_bias
    proj: matmul.Saved  # h = gelu(pre), proj_weight, proj_bias
    pre: object         # (N, H): c_fc's output, the GELU's input


class Mlp:
    """One registered variant: `pingpong` picks the GELU GEMMs' schedule (the module's docstring)."""

    def __init__(self, pingpong: bool):
        self.pingpong = pingpong

    def _config(self, product: str):
        return matmul.PINGPONG_CONFIGS[product] if self.pingpong else None  # None: the product's CONFIGS

    def forward(self, inputs, attrs, out=None):
        x = inputs["x"]
        fc_weight, fc_bias = inputs["fc_weight"], inputs.get("fc_bias")
        proj_weight, proj_bias = inputs["proj_weight"], inputs.get("proj_bias")
        matmul.check_operands(x, fc_weight, fc_bias, op=f"{OP} (c_fc)")
        N, H = x.shape[0], fc_weight.shape[0]
        xp = _common.xp_of(x)
        pre = xp.empty((N, H), dtype=x.dtype)
        h = matmul.wgmma.forward_gelu(x, fc_weight, fc_bias, out=xp.empty((N, H), dtype=x.dtype), pre=pre,
                                      config=self._config("forward_pre"))
        matmul.check_operands(h, proj_weight, proj_bias, op=f"{OP} (projection)")
        y, s_proj = matmul.wgmma.forward({"x": h, "weight": proj_weight, "bias": proj_bias}, {}, out=out)
        return y, Saved(matmul.Saved(x, fc_weight, fc_bias), s_proj, pre)

    def backward(self, saved, dout, grads):
        # every buffer checked before the first launch (naming this op): a refusal must leave the
        # accumulated gradients as they were
        h = saved.proj.x
        N, M = h.shape[0], saved.proj.weight.shape[0]
        if str(dout.dtype) != str(h.dtype) or tuple(dout.shape) != (N, M):
            raise ValueError(f"{OP}: dout must be {h.dtype} of shape {(N, M)}, got {dout.dtype} {tuple(dout.shape)}")
        _common.check_contiguous(OP, dout=dout)
        if grads.get("x") is not None:
            _common.grad_buffer(OP, grads, "x", saved.fc.x, _common.xp_of(h))
        for name, param in (("fc_weight", saved.fc.weight), ("fc_bias", saved.fc.bias),
                            ("proj_weight", saved.proj.weight), ("proj_bias", saved.proj.bias)):
            if param is not None:
                _common.check_param_grad(OP, name, grads[name], param)
        proj_grads = {"weight": grads["proj_weight"], "bias": grads.get("proj_bias")}
        dpre = matmul.wgmma.backward(saved.proj, dout, proj_grads, dgelu_at=saved.pre,   # (dout W) * gelu'(pre)
                                     dx_config=self._config("dx_dgelu"))["x"]
        fc_grads = {"weight": grads["fc_weight"], "bias": grads.get("fc_bias"), "x": grads.get("x")}
        result = matmul.wgmma.backward(saved.fc, dpre, fc_grads)
        result = {"x": result["x"], "fc_weight": result["weight"], "proj_weight": proj_grads["weight"]}
        for name, param in (("fc_bias", saved.fc.bias), ("proj_bias", saved.proj.bias)):
            if param is not None:
                result[name] = grads[name]
        return result


epilogues = Mlp(pingpong=False)
pingpong = Mlp(pingpong=True)
