"""Registers the cupy_raw backend: hand-written CUDA C kernels, compiled at run time by CuPy's
RawModule (NVRTC) for the GPU at hand, launched on CuPy arrays.

This module imports neither cupy nor the backend's runtime (entry points are loaded at start-up):
each variant names its implementation by string, imported the first time it is used. The first
variant listed for an op is the backend's default for it.

    embedding     gather     one warp per position forward; sort-free deterministic scatter-add backward
    layernorm     rows       one warp per row, rows copied into shared memory by cp.async; dweight/dbias partials
    matmul        wgmma      Hopper GEMM: TMA in and out, mbarriers, warp-specialised wgmma consumers (tiled's
                             gemm_mma where TMA cannot describe an operand)
    matmul        tiled      tensor-core GEMM (mma.sync, cp.async pipeline), bias and GELU epilogues (matmul.py)
    matmul        cublaslt   cuBLASLt called directly, capturable in a CUDA graph: the reference point
    attention     wgmma      FlashAttention-2's schedule on Hopper's wgmma for 16-bit heads of 64 (flash's otherwise)
    attention     flash      FlashAttention-2 forward and backward on tensor cores (mma.sync m16n8k16)
    attention     simple     one block per query row, exact softmax in shared memory, no tensor cores
    attention_cached simple  generation with a KV cache: block per new query row, cache views in place
    gelu          fused      tanh GELU, one pass each way, 16-byte vectors
    residual      fused      a + b in one pass, 16-byte vectors
    crossentropy  online     one block per row, online logsumexp; no probabilities kept
    adamw         fused      the whole update in one pass; bf16 weight copy, clipping, device scalars
    sumsq         ordered    the gradient's sum of squares in a fixed order (two launches)
    crossentropy_onepass staged  (fused) the loss and dlogits from one read of each row, its exps kept in shared memory
    matmul_gelu   epilogue   (fused) the GEMM's TMA epilogue writes pre, then gelu(pre) while the other warpgroup multiplies; the backward composed
    layernorm_residual fused (fused) x = a + b written and normalised in one pass (layernorm's kernels); da = dx + dln in one
    mlp           epilogues  (fused) the whole MLP: the GELU in c_fc's epilogue, gelu' in the projection's dx
                             epilogue (no d(gelu) array, no GELU-backward pass); the residual add in the
                             projection's epilogue where given the stream
    matmul_residual wgmma    (fused) the projection and the residual add after it: the stream prefetched into
                             the TMA store's image and added there (one pass over (N, M) fewer)
    matmul_residual tiled    (fused) the same epilogue on gemm_mma
"""

from euler_core.ops import OPS
from euler_core.registry import Backend, Variant, hookimpl

DTYPES = ("float32", "float16", "bfloat16")

_VARIANTS = [
    ("embedding", "gather", "embedding", "warp per position; sort-free, deterministic scatter-add backward"),
    ("layernorm", "rows", "layernorm", "warp per row, rows staged by cp.async; deterministic dweight/dbias partials"),
    ("matmul", "wgmma", "matmul:wgmma", "Hopper GEMM: TMA tiles, a producer warp, wgmma consumers; bias and GELU epilogues"),
    ("matmul", "tiled", "matmul:tiled", "hand-written tensor-core GEMM, bias and GELU epilogues, fp32 accumulation"),
    ("matmul", "cublaslt", "matmul:cublaslt", "cuBLASLt called directly (ctypes), graph-capturable; the reference"),
    ("attention", "wgmma", "attention:wgmma", "FlashAttention-2's schedule on Hopper's wgmma (heads of 64, 16-bit)"),
    ("attention", "flash", "attention:flash", "FlashAttention-2 on tensor cores (mma.sync), logsumexp saved"),
    ("attention", "simple", "attention:simple", "one block per query row, exact softmax, no tensor cores"),
    ("attention_cached", "simple", "attention_cached", "KV-cache attention: block per query row, cache views read in place"),
    ("gelu", "fused", "gelu", "tanh GELU, one pass each way"),
    ("residual", "fused", "residual", "a + b in one pass"),
    ("crossentropy", "online", "crossentropy", "block per row, online logsumexp; no probabilities kept"),
    ("crossentropy_onepass", "staged", "crossentropy_onepass",
     "the loss and dlogits from one read of each row (in by cp.async), its exps held in shared memory between the two walks"),
    ("adamw", "fused", "adamw", "the whole AdamW update in one pass, bf16 copy and clipping fused"),
    ("sumsq", "ordered", "sumsq", "sum of squares in a fixed order: per-block partials, then one block"),
    ("matmul_gelu", "epilogue", "matmul_gelu",
     "wgmma GEMM writing pre and gelu(pre) from its TMA-store epilogue while the other warpgroup multiplies; "
     "the backward composed (gelu, matmul)"),
    ("layernorm_residual", "fused", "layernorm_residual",
     "residual add and layernorm in one pass each way (layernorm's kernels with the stream staged beside each row)"),
    ("mlp", "epilogues", "mlp",
     "the MLP's GEMMs with the GELU in c_fc's TMA-store epilogue and gelu'(pre) in the projection's dx epilogue "
     "(pre prefetched into its image): no d(gelu) array, no GELU-backward pass; the residual add in the projection's"
     " epilogue"),
    ("matmul_residual", "wgmma", "matmul_residual:wgmma",
     "wgmma GEMM whose TMA-store epilogue adds the product to the residual stream, prefetched into its image"),
    ("matmul_residual", "tiled", "matmul_residual:tiled", "gemm_mma with the residual add in its epilogue"),
]


@hookimpl
def nanoeuler_backends():
    # embedding and crossentropy take integer ids that callers slice out of token windows (views):
    # they copy those to contiguous themselves; attention_cached reads the KV cache's views in place;
    # every other variant has the dispatcher refuse non-contiguous input.
    variants = [Variant(op, name, impl=f"backends.cupy_raw.{impl}", device="cuda", dtypes=DTYPES,
                        requires=("cupy",), contiguous=op not in ("embedding", "crossentropy", "crossentropy_onepass",
                                                               "attention_cached"),
                        description=description)
                for op, name, impl, description in _VARIANTS
                if op in OPS]  # a core without an op (sumsq is younger than the rest) gets the others
    return [Backend("cupy_raw", "hand-written CUDA C kernels compiled at run time through CuPy (NVRTC)",
                    variants)]
