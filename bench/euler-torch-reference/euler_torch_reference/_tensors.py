"""Arrays to torch tensors and back, through DLPack: the same memory, never a copy.

    t = tensor(a)        a NumPy (CPU) or CuPy (GPU) array  ->  a torch tensor over its memory
    a = array(t, like)   a torch tensor                     ->  an array of the kind of `like`

bfloat16 travels as int16 (NumPy cannot export ml_dtypes' bfloat16 through DLPack) and is viewed
back as bfloat16 on the other side: same bytes, same strides.

Importing torch. The triton backend keeps Triton from importing torch by putting a placeholder
(None) in sys.modules["torch"] when it loads first (backends/triton/_runtime.py). This reference
runs torch in the same process, so it removes that placeholder before importing torch; Triton's
launches go through NanoEuler's own CuPy driver either way and never ask torch for anything.

Streams: PyTorch launches on its current stream and CuPy on its own; both are the default (legacy)
stream unless a caller changes one, which the bench harness and the trainer do not. The CUDA events
the harness records on CuPy's stream therefore bracket PyTorch's kernels too.
"""

from __future__ import annotations

import sys

import numpy as np

if "torch" in sys.modules and sys.modules["torch"] is None:
    del sys.modules["torch"]  # the triton backend's placeholder (see above)

import torch  # noqa: E402


def _xp(a):
    return np if isinstance(a, np.ndarray) else __import__("cupy")


def tensor(a) -> torch.Tensor:
    """A torch tensor over the memory of the NumPy/CuPy array `a` (its dtype, shape and strides)."""
    if str(a.dtype) == "bfloat16":
        return torch.from_dlpack(a.view(_xp(a).int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def array(t: torch.Tensor, like):
    """The tensor `t` as an array of the kind of `like` (NumPy or CuPy), sharing its memory."""
    xp = _xp(like)
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return xp.from_dlpack(t.view(torch.int16)).view(ml_dtypes.bfloat16)
    return xp.from_dlpack(t)


def activation_buffer(op: str, grads: dict, name: str, like):
    """grads[name], the buffer an activation's gradient overwrites (None when none was given). It
    must have the dtype of the input `like`: activation gradients keep the inputs' dtype (only the
    parameter gradients of 16-bit inputs are float32); any other dtype is refused."""
    buf = grads.get(name)
    if buf is not None and str(buf.dtype) != str(like.dtype):
        raise TypeError(f"{op}: grads['{name}'] must have the input's dtype {like.dtype}, got {buf.dtype}")
    return buf


def into(out, t: torch.Tensor, like):
    """`t` written into the array `out` when one is given (returned), else `t` as an array."""
    if out is None:
        return array(t, like)
    tensor(out).copy_(t)
    return out
