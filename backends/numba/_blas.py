"""BLAS products called from inside numba kernels: `gemm` and `single_threaded_blas`.

The `blas` variants (matmul, attention) cut their work into one block per core with `prange` and
call OpenBLAS's single-threaded GEMM on each block from numba's own threads, so a whole op (the
products, the bias, the softmax between products) is one compiled kernel:

    gemm(trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc)

is CBLAS's row-major  C = alpha op(A) op(B) + beta C  with A, B and C given as a NumPy array plus an
element offset into it (any shape: only the data pointer is used) and leading dimensions in
elements; trans_* is NO_TRANS or TRANS. What this buys over NumPy's matmul:
- beta = 1 accumulates into the output (weight gradients, dk and dv) with no temporary;
- leading dimensions let products read heads straight out of qkv (B,T,3C) and write into dqkv,
  with no split-heads copies;
- no Python between the products, and no second thread pool: OpenBLAS's own threads spin for a
  while after each call and, on a 2-core machine, fight numba's threads for the cores, so each
  block first calls single_threaded_blas() (OpenBLAS's per-thread thread count, set to 1).

How the calls reach OpenBLAS: _openblas.py finds the functions' addresses in the OpenBLAS NumPy
ships; we register them with LLVM under fixed names (euler_cblas_sgemm, ...) and the compiled
kernels call those names. Compiled code refers to the names, not the addresses, so numba's on-disk
cache stays valid across processes (each process registers the addresses again when it imports
this module, before any kernel that calls them is loaded).
"""

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _openblas
from ._jit import jit

NO_TRANS, TRANS = 111, 112     # CBLAS_TRANSPOSE
_ROW_MAJOR = 101               # CBLAS_ORDER

if _openblas.unavailable_reason() is None:   # else the blas variants are unavailable and never compiled
    for _name, _address in _openblas.addresses().items():
        llvm.add_symbol(_name, _address)


def _data_pointer(context, builder, array_type, array, offset):
    """Address of element `offset` of the array's buffer."""
    data = cgutils.create_struct_proxy(array_type)(context, builder, value=array).data
    return builder.gep(data, [offset])


@intrinsic
def gemm(typingctx, trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc):
    """C = alpha op(A) op(B) + beta C in row-major order (CBLAS sgemm/dgemm by A's dtype)."""
    if not (isinstance(a, types.Array) and a.dtype in (types.float32, types.float64)
            and isinstance(b, types.Array) and b.dtype == a.dtype and isinstance(c, types.Array) and c.dtype == a.dtype):
        return None
    sig = types.void(trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c, c_offset, ldc)

    def codegen(context, builder, signature, args):
        ta, tb, m_, n_, k_, alpha_, a_, ao, lda_, b_, bo, ldb_, beta_, c_, co, ldc_ = args
        argtys = signature.args
        flt = context.get_value_type(a.dtype)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, flt, flt.as_pointer(), i64,
                                               flt.as_pointer(), i64, flt, flt.as_pointer(), i64])
        name = "euler_cblas_sgemm" if a.dtype == types.float32 else "euler_cblas_dgemm"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)

        def as_int(value, ty, width):
            return context.cast(builder, value, ty, types.int32 if width == 32 else types.int64)

        builder.call(fn, [
            ir.Constant(i32, _ROW_MAJOR), as_int(ta, argtys[0], 32), as_int(tb, argtys[1], 32),
            as_int(m_, argtys[2], 64), as_int(n_, argtys[3], 64), as_int(k_, argtys[4], 64),
            context.cast(builder, alpha_, argtys[5], a.dtype),
            _data_pointer(context, builder, a, a_, as_int(ao, argtys[7], 64)), as_int(lda_, argtys[8], 64),
            _data_pointer(context, builder, b, b_, as_int(bo, argtys[10], 64)), as_int(ldb_, argtys[11], 64),
            context.cast(builder, beta_, argtys[12], a.dtype),
            _data_pointer(context, builder, c, c_, as_int(co, argtys[14], 64)), as_int(ldc_, argtys[15], 64),
        ])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def single_threaded_blas(typingctx):
    """Make the calling thread's BLAS calls run on this thread only (openblas_set_num_threads_local(1))."""
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "euler_blas_threads_local")
        builder.call(fn, [ir.Constant(ir.IntType(32), 1)])
        return context.get_dummy_value()

    return types.void(), codegen


@jit
def blocks(n, threads):
    """(parts, size): n rows (or heads) cut into one contiguous block per thread, the last one shorter;
    block p is rows p*size .. min(n, (p+1)*size)."""
    parts = max(1, min(threads, n))
    return parts, (n + parts - 1) // parts
