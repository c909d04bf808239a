"""matmul_residual, cupy_raw (variants `wgmma`, `tiled`): a projection with the residual add after it,
out = residual + (x @ W.T + b), in the GEMM's epilogue (matmul.py's forward_residual; no kernel of
its own).

Forward: one GEMM whose epilogue reads the residual stream at every element it writes (matmul.cu's
FLAG_RESIDUAL): in wgmma's TMA-store epilogue the copy engine loads each warpgroup's 64-row share of
the stream into the store's image under the tile's first multiplies (WG_STORE_RESIDUAL, the prefetch
dx_dgelu uses for pre), and the epilogue adds the product to it in place before the image is stored.
Against matmul then residual (or then layernorm_residual, which reads both), the product is never
written and read back: one pass over (N, M) fewer, and the layernorm after it normalises the stream
alone (layernorm_residual without b). The arithmetic is the composition's: the product rounded to
x's dtype as matmul stores it, then added to the residual in float32 and rounded once, so out is
bitwise matmul then residual.

Backward: matmul's (dx, dW += and db += with the bias gradient fused into dW's GEMM); the residual's
gradient is dout itself (returned as it is, or copied into grads["residual"] where the caller passes
that buffer).
"""

from . import _common, matmul
from .residual import copy_into

OP = "matmul_residual"


class MatmulResidual:
    """One registered variant: matmul_residual on one of matmul.py's GEMM engines."""

    def __init__(self, gemms: matmul.Matmul):
        self.gemms = gemms

    def forward(self, inputs, attrs, out=None):
        x, weight, bias, residual = inputs["x"], inputs["weight"], inputs.get("bias"), inputs["residual"]
        matmul.check_operands(x, weight, bias, op=OP)
        return self.gemms.forward_residual(x, weight, bias, residual, out=out)

    def backward(self, saved, dout, grads):
        # every buffer checked before any launch, naming this op: a refusal changes nothing
        xp = _common.xp_of(dout)
        if grads.get("x") is not None:
            _common.grad_buffer(OP, grads, "x", saved.x, xp)
        if grads.get("residual") is not None:
            _common.grad_buffer(OP, grads, "residual", dout, xp)
        for name, param in (("weight", saved.weight), ("bias", saved.bias)):
            if param is not None:
                _common.check_param_grad(OP, name, grads[name], param)
        result = self.gemms.backward(saved, dout, {k: v for k, v in grads.items() if k != "residual"})
        result["residual"] = dout if grads.get("residual") is None else copy_into(dout, grads["residual"])
        return result


wgmma = MatmulResidual(matmul.wgmma)
tiled = MatmulResidual(matmul.tiled)
