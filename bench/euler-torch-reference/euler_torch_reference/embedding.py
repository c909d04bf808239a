"""embedding, torch:embedding: F.embedding(tokens, wte) + wpe[:T] forward; backward the kernel that
nn.Embedding's autograd calls, aten.embedding_dense_backward (it sorts the ids, so it is
deterministic), added into the caller's dwte buffer, and dwpe[:T] += dout.sum(0).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._tensors import array, tensor


@dataclass
class Saved:
    tokens: torch.Tensor  # (B,T) int64
    n_vocab: int


def forward(inputs, attrs, out=None):
    tokens = tensor(inputs["tokens"]).long()
    wte, wpe = tensor(inputs["wte"]), tensor(inputs["wpe"])
    T = tokens.shape[1]
    saved = Saved(tokens, wte.shape[0])
    if out is None:
        return array(torch.add(F.embedding(tokens, wte), wpe[:T]), inputs["wte"]), saved
    torch.add(F.embedding(tokens, wte), wpe[:T], out=tensor(out))
    return out, saved


def backward(saved, dout, grads):
    dy = tensor(dout)
    B, T, C = dy.shape
    dwte = torch.ops.aten.embedding_dense_backward(dy.reshape(B * T, C), saved.tokens.reshape(-1), saved.n_vocab,
                                                   -1, False)
    tensor(grads["wte"]).add_(dwte)
    tensor(grads["wpe"])[:T].add_(dy.sum(0))
    return {"wte": grads["wte"], "wpe": grads["wpe"]}
