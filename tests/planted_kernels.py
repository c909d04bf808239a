"""Deliberately wrong kernels, planted to show that the conformance suite catches each kind of bug.

Each class is the naive reference with one realistic mistake, named after it. tests/
test_conformance_catches.py registers them as the variants of a backend called "planted" and checks
that exactly the right checks fail. Nothing here is used by the project itself.
"""

import numpy as np

from backends.naive import (attention, classifier_crossentropy, crossentropy, embedding, gelu, layernorm,
                            layernorm_residual, matmul, matmul_residual, residual)
from backends.naive._out import into


class LayerNormDxMissingMeanTerm:
    """dx forgets the `- mean(g)` term (the gradient through the row mean)."""

    forward = staticmethod(layernorm.forward)

    @staticmethod
    def backward(saved, dout, grads):
        mean, rstd = saved.mean[:, None], saved.rstd[:, None]
        xhat = (saved.x - mean) * rstd
        grads["bias"] += dout.sum(axis=0)
        grads["weight"] += (dout * xhat).sum(axis=0)
        g = dout * saved.weight
        dx = rstd * (g - xhat * (g * xhat).mean(axis=1, keepdims=True))  # BUG: no - g.mean(...)
        return {"x": into(grads.get("x"), dx), "weight": grads["weight"], "bias": grads["bias"]}


class MatmulLastColumnUnwritten:
    """With an out= buffer, writes every column but the last (an off-by-one in a tiled loop)."""

    backward = staticmethod(matmul.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = matmul.forward(inputs, attrs, None)
        if out is None:
            return y, saved
        out[..., :-1] = y[..., :-1]  # BUG: out[..., -1] never written
        return out, saved


class MatmulWeightGradAssigned:
    """dW = ... instead of dW += ...: gradient accumulation over micro-batches silently breaks."""

    forward = staticmethod(matmul.forward)

    @staticmethod
    def backward(saved, dout, grads):
        result = {"x": into(grads.get("x"), dout @ saved.weight)}
        grads["weight"][...] = dout.T @ saved.x  # BUG: '=' where '+=' belongs
        result["weight"] = grads["weight"]
        if saved.has_bias:
            grads["bias"] += dout.sum(axis=0)
            result["bias"] = grads["bias"]
        return result


class ResidualMutatesInput:
    """Adds b into a in place and returns a: right values, but the caller's `a` is destroyed."""

    backward = staticmethod(residual.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        a = inputs["a"]
        a += inputs["b"]  # BUG: writes into an input
        return into(out, a), None


class GeluForwardOff:
    """The forward is off by 1e-3 (a wrong constant); the backward is right."""

    backward = staticmethod(gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = gelu.forward(inputs, attrs, None)
        return into(out, y + 1e-3), saved  # BUG


class GeluNotRepeatable:
    """Adds noise far below any tolerance, different at every call (like a racy atomic reduction)."""

    backward = staticmethod(gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = gelu.forward(inputs, attrs, None)
        noise = np.random.default_rng().standard_normal(y.shape) * 1e-15 * np.abs(y)
        return into(out, (y + noise).astype(y.dtype)), saved  # BUG: not deterministic


class GeluWrongOutputDtype:
    """Computes in float64 and forgets to cast back: float32 in, float64 out."""

    backward = staticmethod(gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        x = inputs["x"].astype(np.float64)
        y, saved = gelu.forward({"x": x}, attrs, None)  # BUG: y stays float64
        saved.x = inputs["x"]
        return into(out, y) if out is not None else y, saved


class AttentionAccumulatesIntoDqkv:
    """Adds into the activation-gradient buffer it was given instead of overwriting it."""

    forward = staticmethod(attention.forward)

    @staticmethod
    def backward(saved, dout, grads):
        res = attention.backward(saved, dout, {})
        if grads.get("qkv") is not None:
            grads["qkv"] += res["qkv"]  # BUG: activation gradients are overwritten, not accumulated
            return {"qkv": grads["qkv"]}
        return res


class CrossEntropyNoMaxShift:
    """logsumexp without subtracting the row max: exp() overflows for large logits in float32."""

    backward = staticmethod(crossentropy.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        logits, targets = inputs["logits"], inputs["targets"]
        V = attrs["n_valid"] or logits.shape[-1]
        z = logits[..., :V]
        lse = np.log(np.exp(z).sum(axis=-1))  # BUG: no max shift
        valid = targets >= 0
        safe = np.where(valid, targets, 0)
        picked = np.take_along_axis(z, safe[..., None], axis=-1)[..., 0]
        losses = np.where(valid, lse - picked, 0.0).astype(logits.dtype)
        # the reference's Saved holds lse as row_max + log_sum: an unshifted log_sum over a zero max
        return into(out, losses), crossentropy.Saved(logits, targets, np.zeros_like(lse), lse, V)


class EmbeddingNoValidation:
    """Validates nothing and wraps out-of-range ids (garbage, silently): the dispatcher must stop
    bad inputs before they reach it."""

    backward = staticmethod(embedding.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        tokens, wte, wpe = inputs["tokens"], inputs["wte"], inputs["wpe"]
        T = tokens.shape[-1]
        x = wte[np.asarray(tokens).astype(np.int64) % wte.shape[0]] + wpe[:T]
        return into(out, x), embedding.Saved(tokens)


class LayerNormResidualDropsStreamGradient:
    """da = db = layernorm_backward(dy): forgets that x also reaches the loss directly (dx)."""

    forward = staticmethod(layernorm_residual.forward)

    @staticmethod
    def backward(saved, grad_output, grads):
        _, dy = grad_output
        return layernorm_residual.backward(saved, (None, dy), grads)  # BUG: the stream's dx dropped


class LayerNormResidualStreamNotWrittenToOut:
    """Given out=(x_buf, y_buf), writes y into its buffer but returns a new array for x."""

    backward = staticmethod(layernorm_residual.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        (x, y), saved = layernorm_residual.forward(inputs, attrs, None if out is None else (None, out[1]))
        return (x, y), saved  # BUG: out[0] never written, another array returned


class LayerNormResidualCopiesTheStream:
    """Without b, returns a copy of a as x (the very pass over the stream the fusion saves), where
    the contract says x is a itself."""

    backward = staticmethod(layernorm_residual.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        (x, y), saved = layernorm_residual.forward(inputs, attrs, out)
        return (x.copy() if "b" not in inputs else x, y), saved  # BUG: a copy of the stream


class MatmulResidualDropsTheStream:
    """Returns x @ W.T + b, never adding the residual it was given (its gradient, dout, still right)."""

    backward = staticmethod(matmul_residual.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        return matmul.forward({k: v for k, v in inputs.items() if k != "residual"}, attrs, out)  # BUG


class ClassifierAcceptsAnyGradOutput:
    """Backward takes whatever grad_output it is given and silently uses the forward's dlosses."""

    forward = staticmethod(classifier_crossentropy.forward)

    @staticmethod
    def backward(saved, grad_output, grads):
        return classifier_crossentropy.backward(saved, None, grads)  # BUG: grad_output never checked
