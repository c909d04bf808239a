"""mlp: GPT-2's whole MLP block, the up-projection, GPT-2's tanh GELU and the down-projection (a fused op).

    pre = x @ fc_weight.T + fc_bias       x (N,C), fc_weight (H,C), fc_bias (H) or absent -> pre (N,H)
    h   = gelu(pre)                       (N,H); gelu as in euler_core/ops/gelu.py:
                                          gelu(z) = 0.5 z (1 + tanh(u)),  u = sqrt(2/pi) (z + 0.044715 z^3)
    out = h @ proj_weight.T + proj_bias   proj_weight (M,H), proj_bias (M) or absent -> out (N,M)
    out = residual + (h @ proj_weight.T + proj_bias)      with the optional residual (N,M): the stream

In GPT-2 H = 4C and M = C: `c_proj(gelu(c_fc(x)))`. It replaces `matmul` and `gelu` (matmul, then
gelu, then matmul again: `replaces` names each primitive once). Neither smaller fusion can do both
halves of the GELU: matmul_gelu has its forward (in c_fc's GEMM epilogue), but its backward starts
from dh, which the projection's own dx GEMM wrote to memory; gelu_matmul has its backward (in the
projection's dx GEMM epilogue), but its forward starts from pre, which c_fc's own GEMM wrote, and
runs the GELU as a pass of its own. Owning the whole block, a variant can do both: the GELU in
c_fc's epilogue (pre and h written by the same GEMM), and gelu'(pre) applied in the epilogue of the
projection's dx GEMM, so neither dh nor an elementwise GELU backward pass ever touches memory.

With the residual (GPT-2's stream after the attention, x_mid + mlp(ln_2(x_mid))), the op also does
the residual add after the block: the projection's GEMM reads the stream's tile in its epilogue and
writes the new stream, as matmul_residual does, and the layernorm after it only normalises that
(layernorm_residual without b). In 16-bit storage the sum is the composition's: the projection
rounded to the storage dtype as matmul would store it, then residual + it rounded once, as the
residual op rounds.

Backward, given dout (N,M): the projection's matmul backward with h as its input, the chain rule
through gelu, then c_fc's matmul backward with dpre:

    dproj_weight += dout.T @ h            (M,H)   accumulated
    dproj_bias   += sum_n dout[n, :]      (M)     accumulated
    dh            = dout @ proj_weight    (N,H)
    dpre          = dh * gelu'(pre)       (N,H)   gelu'(z) = 0.5 (1 + tanh(u)) + 0.5 z sech^2(u) du/dz,
                                                  du/dz = sqrt(2/pi) (1 + 3 * 0.044715 z^2)
    dfc_weight   += dpre.T @ x            (H,C)   accumulated
    dfc_bias     += sum_n dpre[n, :]      (H)     accumulated
    dx            = dpre @ fc_weight      (N,C)   overwritten
    dresidual     = dout                  (N,M)   with a residual: dout itself (no copy), or copied into
                                                  grads["residual"] when the caller passes that buffer

What is saved is the variant's choice (opaque): typically x, pre and h (two (N,H) arrays a call,
kept by the op, where the composed model keeps them in its arena).

Example: y, saved = forward({"x": ln2, "fc_weight": w_fc, "fc_bias": b_fc, "proj_weight": w_proj,
"proj_bias": b_proj}, {}); grads = backward(saved, dy, {"fc_weight": dw_fc, "fc_bias": db_fc,
"proj_weight": dw_proj, "proj_bias": db_proj}) -> {"x": dln2, "fc_weight": ..., "proj_bias": ...}; with
"residual": x_mid among the inputs, y is the stream after the block and the grads also hold
"residual": dy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import OpSpec, expect_array, expect_same_dtype, expect_shape, nbytes, random_float


@dataclass(frozen=True)
class MlpSpec(OpSpec):
    name: str = "mlp"
    inputs: tuple = ("x", "fc_weight", "fc_bias", "proj_weight", "proj_bias", "residual")
    params: tuple = ("fc_weight", "fc_bias", "proj_weight", "proj_bias")
    differentiable: tuple = ("x", "fc_weight", "fc_bias", "proj_weight", "proj_bias", "residual")
    optional: tuple = ("fc_bias", "proj_bias", "residual")
    attrs: dict = field(default_factory=dict)
    replaces: tuple = ("matmul", "gelu")

    def check(self, inputs, attrs):
        N, C = expect_array(self.name, "x", inputs["x"], 2)
        H, C2 = expect_array(self.name, "fc_weight", inputs["fc_weight"], 2)
        if C2 != C:
            raise ValueError(f"{self.name}: x has {C} columns but fc_weight (H, C) has {C2} inputs; "
                             f"expected fc_weight of shape (H, {C})")
        M, H2 = expect_array(self.name, "proj_weight", inputs["proj_weight"], 2)
        if H2 != H:
            raise ValueError(f"{self.name}: fc_weight has {H} outputs but proj_weight (M, H) has {H2} inputs; "
                             f"expected proj_weight of shape (M, {H})")
        for name, size in (("fc_bias", H), ("proj_bias", M)):
            if inputs.get(name) is not None:
                expect_array(self.name, name, inputs[name], 1)
                expect_shape(self.name, name, inputs[name], (size,))
        if inputs.get("residual") is not None:
            residual = expect_array(self.name, "residual", inputs["residual"], 2)
            if residual != (N, M):
                raise ValueError(f"{self.name}: input 'residual' (the stream the projection is added to) must have "
                                 f"the output's shape (N, M) = {(N, M)}, got {residual}")
        expect_same_dtype(self.name, inputs, self.inputs)

    def output_shape(self, inputs, attrs):
        return (inputs["x"].shape[0], inputs["proj_weight"].shape[0])

    def flops(self, inputs, attrs):
        N, C = inputs["x"].shape
        H, M = inputs["fc_weight"].shape[0], inputs["proj_weight"].shape[0]
        biases = (N * H if inputs.get("fc_bias") is not None else 0) + \
                 (N * M if inputs.get("proj_bias") is not None else 0)
        add = N * M if inputs.get("residual") is not None else 0
        # the two GEMMs (multiply-add = 2; the backward's dx and dW, twice the forward), gelu's count
        # on the (N,H) pre-activation as euler_core/ops/gelu.py's, the biases' adds and sums, the add
        # to the stream (whose gradient is dout: nothing to compute)
        return {"forward": 2 * N * C * H + 10 * N * H + 2 * N * H * M + biases + add,
                "backward": 4 * N * C * H + 20 * N * H + 4 * N * H * M + biases}

    def bytes_moved(self, inputs, attrs):
        x, w_fc, w_proj = inputs["x"], inputs["fc_weight"], inputs["proj_weight"]
        b_fc, b_proj = inputs.get("fc_bias"), inputs.get("proj_bias")
        N, item = x.shape[0], x.dtype.itemsize
        hidden = N * w_fc.shape[0] * item   # one (N,H) array: pre or h
        out = N * w_proj.shape[0] * item    # (N,M): out, or dout
        # forward: read x, both weights and biases (and the residual); write pre and h (kept for the
        # backward) and out. backward: read dout, h (dproj_weight), pre (gelu'), both weights and x
        # (dfc_weight); write dx (the size of x); every weight and bias gradient read and written
        # (accumulated); the residual's gradient is dout itself, as the model calls it
        return {"forward": nbytes(x, w_fc, b_fc, w_proj, b_proj, inputs.get("residual")) + 2 * hidden + out,
                "backward": out + 2 * hidden + 2 * nbytes(x) + 3 * nbytes(w_fc, w_proj) + 2 * nbytes(b_fc, b_proj)}

    def example(self, dims, dtype, rng):
        N, C, H, M = dims["N"], dims["C"], dims["H"], dims["M"]
        inputs = {"x": random_float(rng, (N, C), dtype),
                  "fc_weight": random_float(rng, (H, C), dtype, scale=C ** -0.5),
                  "proj_weight": random_float(rng, (M, H), dtype, scale=H ** -0.5)}
        if dims.get("bias", True):  # both biases, or neither
            inputs["fc_bias"] = random_float(rng, (H,), dtype)
            inputs["proj_bias"] = random_float(rng, (M,), dtype)
        if dims.get("residual", False):  # the stream the projection is added to
            inputs["residual"] = random_float(rng, (N, M), dtype)
        return inputs, {}


SPEC = MlpSpec()
