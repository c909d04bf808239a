"""Registers the triton backend: Triton kernels on CuPy arrays, a variant of every GPT-2 op (two of attention).

This module imports neither triton nor cupy (entry points are loaded at start-up): each variant
names its implementation by string, imported the first time it is used.

    embedding     gather   gather forward; deterministic scatter-add backward (sort, one writer per row)
    layernorm     rows     a block of rows per program (4 at C=768), each row in registers; dweight/dbias
                           from per-program partials, no atomics
    matmul        tiled    tensor-core GEMM, bias in the epilogue; fp32 inputs in IEEE fp32
    attention     flash    FlashAttention-2: online softmax, logsumexp saved, no T x T in memory
                  ordered  flash's forward; the backward in one walk, dQ added in key-block order
    attention_cached  split  flash-decoding: the cache cut into splits across the SMs, partials merged
    gelu          fused    one pass each way
    residual      fused    one pass; backward hands dout on
    crossentropy  chunked  online logsumexp over BLOCK_V chunks of the vocabulary
    adamw         fused    the whole update in one pass over param, grad, m, v
    sumsq         blocks   sum of squares in fixed slices, then the partials in order

and the fused ops, built on those kernels. layernorm_residual and crossentropy_onepass are used by
default; matmul_gelu, gelu_matmul and classifier_crossentropy are opt-in, used only when named (e.g. --backend
triton,classifier_crossentropy=triton), as in the whole step on the H200 they are not faster than
the composition (reports/train-h200/README.md; the classifier saves the full logits' memory):

    layernorm_residual       fused    x = a + b written and normalised in one pass; da = dx + dln in one
    matmul_gelu              fused    GELU (and gelu' for the backward) in the GEMM epilogue; the backward
                                      GEMMs multiply dy by gelu' as they load it (no dpre pass)
                             epilogue GELU and pre from the GEMM epilogue (no pass to activate pre);
                                      the backward composed (gelu's kernel, then matmul's)
                             passes   the composition's forward; the GELU backward's pass also sums
                                      the bias gradient (no column sum over dpre)
    gelu_matmul              fused    the MLP projection of gelu(x): its dx GEMM multiplies by gelu'(x)
                                      in the epilogue (no d(gelu) pass); the forward composed
    classifier_crossentropy  chunked  lm_head GEMM, loss, dlogits, dx and dW GEMMs a chunk of rows at a
                                      time: no (N, Vp) logits
    crossentropy_onepass     rows     the loss and dlogits from one program per row (the dlosses given
                                      ahead), one launch where the unfused pair makes two
"""

from euler_core.registry import Backend, Variant, hookimpl

DTYPES = ("float32", "float16", "bfloat16")

_VARIANTS = [
    ("embedding", "gather", "gather forward; sorted, deterministic scatter-add backward"),
    ("layernorm", "rows", "a block of rows per program; deterministic dweight/dbias partial sums"),
    ("matmul", "tiled", "persistent TMA tensor-core GEMM, bias in the epilogue, split-K dW, fp32 accumulation"),
    ("attention", "flash", "FlashAttention-2: online softmax, logsumexp saved, no T x T matrix"),
    ("attention", "ordered", "flash's forward; backward in one walk of five products, dQ added in key-block order"),
    ("attention_cached", "split", "flash-decoding: the KV cache split across the SMs, exact merge of the partials"),
    ("gelu", "fused", "tanh GELU, one pass each way"),
    ("residual", "fused", "a + b in one pass"),
    ("crossentropy", "chunked", "online logsumexp over vocabulary chunks; no probabilities kept"),
    ("adamw", "fused", "the whole AdamW update in one pass"),
    ("sumsq", "blocks", "sum of squares in fixed slices, then the partials in order"),
    ("layernorm_residual", "fused", "residual add and layernorm in one pass each way (layernorm's kernels)"),
    ("matmul_gelu", "fused", "GELU in the GEMM epilogue; backward GEMMs scale dy by the saved gelu' as they load"),
    ("matmul_gelu", "epilogue", "GELU and pre from the GEMM epilogue; the backward composed of gelu's and matmul's"),
    ("matmul_gelu", "passes", "the composition's forward; the GELU backward's pass also sums db (no column-sum pass)"),
    ("gelu_matmul", "fused", "the GELU backward in the dx GEMM's epilogue (dx = (dy W) * gelu'(x)); forward composed"),
    ("classifier_crossentropy", "chunked", "lm_head GEMM, loss, dlogits, dx and dW a chunk of rows at a time"),
    ("crossentropy_onepass", "rows", "loss and dlogits from one program per row, one launch"),
]


#: variants whose implementation is not the module of their op's name
_IMPLS = {("attention", "ordered"): "backends.triton.attention:Ordered",
          ("matmul_gelu", "epilogue"): "backends.triton.matmul_gelu:Epilogue",
          ("matmul_gelu", "passes"): "backends.triton.matmul_gelu:Passes"}


def impl_of(op: str, name: str) -> str:
    """The `impl` string ("module" or "module:attr") of variant `name` of `op`."""
    return _IMPLS.get((op, name), f"backends.triton.{op}")


@hookimpl
def nanoeuler_backends():
    # embedding and the two cross-entropies take integer ids that callers slice out of token windows
    # (views): they copy those to contiguous themselves and check their float inputs; attention_cached
    # reads q as a strided view of qkv; every other variant has the dispatcher refuse non-contiguous input.
    takes_views = ("embedding", "crossentropy", "classifier_crossentropy", "crossentropy_onepass", "attention_cached")
    opt_in = ("matmul_gelu", "gelu_matmul", "classifier_crossentropy")
    variants = [Variant(op, name, impl=impl_of(op, name), device="cuda", dtypes=DTYPES,
                        requires=("triton", "cupy"), contiguous=op not in takes_views,
                        description=description + ("; opt-in" if op in opt_in else ""), opt_in=op in opt_in)
                for op, name, description in _VARIANTS]
    return [Backend("triton", "Triton kernels on CuPy arrays (GPU); FlashAttention-2 forward and backward",
                    variants)]
