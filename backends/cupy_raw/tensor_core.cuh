// tensor_core.cuh: the tensor-core primitives of the sm_80 generation, shared by matmul.cu's gemm_mma
// and attention.cu's flash variant (floatX the 16-bit storage type of the operands; the cp.async
// copies that feed them are common.cuh's):
//
//   smem_u32(p)                the 32-bit shared-memory address of p (what PTX's .shared operands take)
//   ldsm_x4<TRANS>(r, row)     ldmatrix.x4: four 8 x 8 16-bit matrices from shared memory, lane 8j + i
//                              giving the address of row i of matrix j; .trans delivers them transposed
//   mma_16816(d, a, b)         mma.sync.m16n8k16: d (16 x 8, float32) += a (16 x 16) b (16 x 8)
//
// Under CUPY_RAW_EMULATOR (backends/cupy_raw/_emulator.py: the kernels on the CPU, one fiber per CUDA
// thread) ldmatrix is assembled from warp shuffles by its PTX definition and mma.sync is the
// emulator's emu_mma16816; a shared-memory address is the offset into the block's dynamic shared
// memory (smem_at turns one back).

template <typename U, typename V> struct SameType { static constexpr bool value = false; };
template <typename U> struct SameType<U, U> { static constexpr bool value = true; };
constexpr bool T_IS_BF16 = SameType<floatX, __nv_bfloat16>::value;

#ifdef CUPY_RAW_EMULATOR
// a shared-memory "address": the offset into the block's dynamic shared memory
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return (unsigned)(static_cast<const unsigned char*>(p) - static_cast<const unsigned char*>(emu::dynamic_shared()));
}
// (an address with bits 24 and up set is another block's of the cluster, rank + 1 there: tma.cuh's emu_mapa)
__device__ __forceinline__ unsigned char* smem_at(unsigned addr) {
    const unsigned rank_plus_1 = addr >> 24;
    return static_cast<unsigned char*>(rank_plus_1 ? emu::dynamic_shared_of((int)rank_plus_1 - 1) : emu::dynamic_shared()) +
           (addr & 0xffffffu);
}

// ldmatrix.x4: lane 8j + i addresses row i (16 bytes) of matrix j; lane l gets in register j row l/4,
// elements 2(l%4) and 2(l%4)+1 of matrix j (.trans: elements [2(l%4)][l/4] and [2(l%4)+1][l/4]).
template <bool TRANS> __device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const unsigned char* row) {
    const int lane = threadIdx.x & 31;
    for (int j = 0; j < 4; ++j) {
        if (!TRANS) {
            const unsigned char* p = __shfl_xor_sync(0xffffffffu, row, lane ^ (8 * j + lane / 4));
            memcpy(&r[j], p + 4 * (lane % 4), 4);
        } else {
            const unsigned char* p0 = __shfl_xor_sync(0xffffffffu, row, lane ^ (8 * j + 2 * (lane % 4)));
            const unsigned char* p1 = __shfl_xor_sync(0xffffffffu, row, lane ^ (8 * j + 2 * (lane % 4) + 1));
            unsigned short lo, hi;
            memcpy(&lo, p0 + 2 * (lane / 4), 2);
            memcpy(&hi, p1 + 2 * (lane / 4), 2);
            r[j] = (unsigned)lo | ((unsigned)hi << 16);
        }
    }
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    emu_mma16816(d, a, b, !T_IS_BF16);
}
#else
// the 32-bit shared-memory address of a pointer into shared memory (what PTX's .shared operands take)
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

template <bool TRANS> __device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const unsigned char* row) {
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(row)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(row)));
}

// d (16 x 8, float32) += a (16 x 16) @ b (16 x 8)
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#define MMA_16816(AB)                                                                                   \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 "                            \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                   \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
    if constexpr (T_IS_BF16) MMA_16816("bf16");
    else MMA_16816("f16");
#undef MMA_16816
}
#endif  // CUPY_RAW_EMULATOR
