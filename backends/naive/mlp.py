"""mlp, naive: GPT-2's MLP composed from the naive kernels, the very calls the model makes unfused.

    pre = x @ fc_weight.T + fc_bias      (matmul.py)     h = gelu(pre)     (gelu.py)
    out = h @ proj_weight.T + proj_bias  (matmul.py)
    out = residual + out                 (residual.py; with the optional residual, the stream)

Backward, in the reverse order: the projection's matmul backward turns dout into dh, dproj_weight
and dproj_bias; gelu's backward turns dh into dpre = dh * gelu'(pre); c_fc's matmul backward turns
dpre into dx, dfc_weight and dfc_bias. The residual's gradient is dout itself (residual's backward).
"""

from dataclasses import dataclass

from . import gelu, matmul, residual


@dataclass
class Saved:
    fc: matmul.Saved    # x, fc_weight, has_bias
    gelu: gelu.Saved    # pre (N,H)
    proj: matmul.Saved  # h (N,H), proj_weight, has_bias
    has_residual: bool  # whether out was added to a residual (its gradient is then dout)


def forward(inputs, attrs, out=None):
    stream = inputs.get("residual")                                                       # (N,M) or None
    pre, s_fc = matmul.forward({"x": inputs["x"], "weight": inputs["fc_weight"],
                                "bias": inputs.get("fc_bias")}, {})                       # (N,H)
    h, s_gelu = gelu.forward({"x": pre}, {})                                              # (N,H)
    y, s_proj = matmul.forward({"x": h, "weight": inputs["proj_weight"],
                                "bias": inputs.get("proj_bias")}, {}, out if stream is None else None)  # (N,M)
    if stream is not None:
        y, _ = residual.forward({"a": stream, "b": y}, {}, out)                           # (N,M)
    return y, Saved(s_fc, s_gelu, s_proj, stream is not None)


def backward(saved, dout, grads):
    proj = matmul.backward(saved.proj, dout, {"weight": grads["proj_weight"], "bias": grads.get("proj_bias")})
    dpre = gelu.backward(saved.gelu, proj["x"], {})["x"]                                  # (N,H)
    fc = matmul.backward(saved.fc, dpre, {"weight": grads["fc_weight"], "bias": grads.get("fc_bias"),
                                          "x": grads.get("x")})                           # dx (N,C)
    result = {"x": fc["x"]}
    if saved.has_residual:
        result["residual"] = residual.backward(None, dout, {"a": grads.get("residual")})["a"]  # dout
    for prefix, part in (("fc_", fc), ("proj_", proj)):
        result.update({prefix + name: part[name] for name in ("weight", "bias") if name in part})
    return result
