"""One attention implementation's forward and backward, launched a few times at GPT-2's shape on the
GPU: the program bench/device/ncu_attention.sh profiles (ncu picks the launches it is asked for).

    python3 bench/device/attention_launches.py cupy_raw   # cupy_raw's default (wgmma) kernels
    python3 bench/device/attention_launches.py triton
    python3 bench/device/attention_launches.py triton_ordered   # triton's `ordered` backward
    python3 bench/device/attention_launches.py cudnn      # PyTorch SDPA's cuDNN backend, the reference

bf16, causal, B = 32, T = 1024, 12 heads of 64, random inputs; each call repeated REPEAT times
(the profiler skips the first, which compiles and warms).
"""

from __future__ import annotations

import sys

B, T, C, NH, REPEAT = 32, 1024, 768, 12, 3


def main(which: str) -> int:
    if which == "cudnn":
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q, k, v = (torch.randn(B, NH, T, C // NH, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dy = torch.randn(B, NH, T, C // NH, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            for _ in range(REPEAT):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                torch.autograd.grad(o, (q, k, v), dy)
        torch.cuda.synchronize()
        return 0
    import cupy as cp
    if which == "cupy_raw":
        from backends.cupy_raw.attention import wgmma as impl
    elif which == "triton":
        from backends.triton import attention as impl
    elif which == "triton_ordered":
        from backends.triton.attention import Ordered as impl
    else:
        raise SystemExit(f"attention_launches.py: expected cupy_raw, triton, triton_ordered or cudnn, got {which!r}")
    import ml_dtypes
    import numpy as np
    rng = np.random.default_rng(0)
    def bf16(shape):  # (copied as 16-bit words, then viewed as ml_dtypes' bfloat16, as CuPy names it)
        return cp.asarray(rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)).view(
            ml_dtypes.bfloat16)
    qkv, dy = bf16((B, T, 3 * C)), bf16((B, T, C))
    for _ in range(REPEAT):
        y, saved = impl.forward({"qkv": qkv}, {"n_head": NH})
        impl.backward(saved, dy, {})
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cupy_raw"))
