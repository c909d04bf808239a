"""crossentropy, naive: log-softmax over the valid columns, per position.

    lse[b,t]    = logsumexp_v logits[b,t,v]          over v < n_valid
    losses[b,t] = lse[b,t] - logits[b,t,target]      (0 where target = -1)

Backward: d lse / d logits_v = softmax_v, and d logits_target / d logits_v = [v == target], so

    dlogits[b,t,v] = dlosses[b,t] * (softmax[b,t,v] - [v == target])

zero in the padded columns (v >= n_valid) and at ignored positions. float32 logits are reduced in
float32, float64 in float64; the losses come back in float64 for float64 logits and in float32
otherwise (float16/bfloat16 logits too), as the spec's output_dtype says.
"""

from dataclasses import dataclass

import numpy as np

from ._out import into


@dataclass
class Saved:
    logits: np.ndarray   # (B,T,Vp)
    targets: np.ndarray  # (B,T)
    row_max: np.ndarray  # (B,T) max over the valid columns
    log_sum: np.ndarray  # (B,T) log sum_v exp(logits - row_max): lse = row_max + log_sum
    n_valid: int


def forward(inputs, attrs, out=None):
    logits, targets = inputs["logits"], inputs["targets"]
    V = attrs["n_valid"] or logits.shape[-1]
    z = logits[..., :V]                                        # (B,T,V) the real vocabulary
    m = z.max(axis=-1, keepdims=True)                          # (B,T,1)
    log_sum = np.log(np.exp(z - m).sum(axis=-1))               # (B,T) in [0, log V]
    valid = targets >= 0                                       # (B,T)
    safe = np.where(valid, targets, 0)                         # (B,T) any index where ignored
    picked = np.take_along_axis(z, safe[..., None], axis=-1)[..., 0]  # (B,T) logit of the target
    # lse - picked, grouped as (m - picked) + log_sum: with large logits, m + log_sum rounded first
    # would lose log_sum's low digits (float32 keeps ~7 of them at |logits| ~ 100)
    loss_dtype = np.float64 if logits.dtype == np.float64 else np.float32  # the spec's output dtype
    losses = np.where(valid, (m[..., 0] - picked) + log_sum, 0.0).astype(loss_dtype)
    return into(out, losses), Saved(logits, targets, m[..., 0], log_sum, V)


def backward(saved, dlosses, grads):
    logits, targets, V = saved.logits, saved.targets, saved.n_valid
    valid = targets >= 0
    shifted = logits[..., :V] - saved.row_max[..., None]       # (B,T,V) <= 0, exact near the max
    probs = np.exp(shifted - saved.log_sum[..., None])         # (B,T,V) softmax
    b, t = np.nonzero(valid)
    probs[b, t, targets[b, t]] -= 1.0                          # minus the one-hot target
    dlogits = np.zeros_like(logits)                            # (B,T,Vp) padded columns stay 0
    dlogits[..., :V] = probs * (dlosses * valid)[..., None]    # ignored rows get 0
    return {"logits": into(grads.get("logits"), dlogits)}
