"""Registers the numba backend: Numba JIT kernels on the CPU for every GPT-2 op.

This module must stay light: it is imported whenever the registry is built, so it names each
variant's module as a string and never imports numba (Variant.requires makes the registry say
"numba not installed" when it is missing). The first variant listed for an op is the backend's
default for it, and is the fastest one measured (reports/cpu-training/).
"""

from euler_core.registry import Backend, Variant, hookimpl

_DT = ("float32", "float64")


def _v(op, name, impl, description, probe=""):
    return Variant(op, name, impl=f"backends.numba.{impl}", device="cpu", dtypes=_DT,
                   requires=("numba",), description=description, probe=probe)


_OPENBLAS = "backends.numba._openblas:unavailable_reason"   # the blas variants call NumPy's OpenBLAS


@hookimpl
def nanoeuler_backends():
    variants = [
        _v("embedding", "rows", "embedding", "parallel gather; scatter-add split over channels"),
        _v("layernorm", "fused", "layernorm", "one pass per row forward and backward, rows in parallel"),
        _v("matmul", "blas", "matmul:Blas", "OpenBLAS GEMM per core-block from numba; bias and dW accumulated in place",
           _OPENBLAS),
        _v("matmul", "blocked", "matmul:Blocked", "own tiled, parallel kernel, no BLAS"),
        _v("attention", "blas", "attention:Blas", "blocks of queries; tile products through BLAS, softmax in numba",
           _OPENBLAS),
        _v("attention", "flash", "attention:Flash", "online softmax over key blocks, no T x T matrix"),
        _v("attention", "rows", "attention:Rows", "one query row at a time, exact softmax, no T x T matrix"),
        _v("attention_cached", "rows", "attention_cached", "KV-cache attention, one query row at a time"),
        _v("gelu", "fused", "gelu", "sigmoid form with a vectorised exp, one pass"),
        _v("residual", "parallel", "residual", "one parallel pass"),
        _v("crossentropy", "fused", "crossentropy", "logsumexp and loss in one pass; dlogits in one"),
        _v("adamw", "fused", "adamw", "the whole update in one parallel pass"),
        _v("sumsq", "blocks", "sumsq", "fixed blocks summed in parallel, then in order"),
    ]
    return [Backend("numba", "Numba JIT kernels on the CPU: parallel, fused, cached on disk", variants)]
