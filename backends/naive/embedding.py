"""embedding, naive: a gather forward, a scatter-add backward.

    out[b, t] = wte[tokens[b, t]] + wpe[t]
    dwte[tokens[b, t]] += dout[b, t]         dwpe[t] += sum_b dout[b, t]

`add.at` is the unbuffered scatter-add: with `dwte[tokens] += dout`, a token that occurs twice
would receive only one of its two gradients. It is taken from the buffer's own module (numpy, or
cupy for the benchmark's float64 reference on the GPU).
"""

from dataclasses import dataclass

import numpy as np

from euler_core.device import module_of

from ._out import into


@dataclass
class Saved:
    tokens: np.ndarray  # (B,T) the ids each position read


def forward(inputs, attrs, out=None):
    tokens, wte, wpe = inputs["tokens"], inputs["wte"], inputs["wpe"]
    B, T = tokens.shape
    x = wte[tokens] + wpe[:T]  # (B,T,C) = (B,T,C) + (T,C) broadcast over B
    return into(out, x), Saved(tokens)


def backward(saved, dout, grads):
    dwte, dwpe = grads["wte"], grads["wpe"]
    B, T, C = dout.shape
    module_of(dwte).add.at(dwte, saved.tokens.reshape(-1), dout.reshape(B * T, C))  # (N,C) rows into (V,C)
    dwpe[:T] += dout.sum(axis=0)  # (T,C)
    return {"wte": dwte, "wpe": dwpe}
