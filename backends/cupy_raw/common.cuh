// common.cuh: what the cupy_raw sources share. Inlined into each source by _runtime.source() (so
// CuPy's kernel cache sees its text); never compiled alone.
//
//   to_f32(x) / from_f32<T>(f)   storage type <-> float32 (round to nearest even), for float,
//                                __half and __nv_bfloat16: every kernel computes in float32
//   warp_sum, warp_max           butterfly reductions over the 32 lanes of a warp (every lane
//                                gets the result)
//   block_sum, block_max         the same over a whole block (a shared array of 32 floats; every
//                                thread gets the result; all threads of the block must call it)
//   POS_INF_F                    +infinity
//   Quad<U>, Duo<U>              4 or 2 values of U aligned as one vector load/store
//   TmaDescriptor                a TMA tensor map, the kernel parameter (tma.cuh has the copies)
//   gelu_tanh(x)                 GPT-2's tanh GELU in float32 (one exp2f, one fast division)
//   gelu_tanh_backward(x, dout)  dout * gelu'(x), the same way
//   online_update(m, s, z)       a running max m and sum s of exp(x - m) meet one more value z with
//                                one exp (crossentropy.cu's docstring derives it)
//   Pack<T>                      16 bytes of T (8 bf16/fp16 or 4 floats): one vector load/store
//   load_pack_stream             the same load with the evict-first hint (__ldcs): for data a kernel
//                                reads once, so that it does not push reusable lines out of L2
//   load_pack_by<CACHE_GLOBAL>   the same load by L2 only (__ldcg): for data other blocks just wrote
//   load_l2                      one element by L2 only
//   store_pack_stream            a store with the evict-first hint (__stcs)
//   cp_async16, cp_async4        cp.async: global -> shared copies that go around the registers (16
//                                bytes by L2 only, or 4), in groups (cp_async_commit) waited for by
//                                cp_async_wait<N> (all but the N newest groups landed; cp_async_wait_upto
//                                for an N known at run time); in the CPU emulator a plain copy and no-ops
//
// Every function is written __device__ explicitly: NVRTC (CuPy) defaults to device code, nvcc
// (the CI compile check) does not, and both must accept these sources.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// +infinity as a float (NVRTC has no <math.h>, so no INFINITY)
#define POS_INF_F __int_as_float(0x7f800000)

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The sum of v over the block, in a fixed order (lanes by butterfly, then warps in order): bitwise
// the same on every run. `scratch` is __shared__ float[32]; blockDim.x a multiple of 32, at most 1024.
// Safe to call twice in a row with one scratch (the barrier at the start protects the reuse).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -POS_INF_F;
    return warp_max(v);
}

__device__ __forceinline__ void online_update(float& m, float& s, float z) {
    const float e = __expf(-fabsf(z - m));
    const bool larger = z > m;
    s = larger ? s * e + 1.0f : s + e;
    m = larger ? z : m;
}

// 16 bytes of T, loaded or stored as one vector (the address must be 16-byte aligned).
template <typename T> struct alignas(16) Pack {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
};

template <typename T> __device__ __forceinline__ Pack<T> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T>*>(p);
}

template <typename T> __device__ __forceinline__ void store_pack(T* p, const Pack<T>& pack) {
    *reinterpret_cast<Pack<T>*>(p) = pack;
}

// load_pack with a cache operator: CACHE_STREAMING (ld.global.cs, evict first: for data read once)
// or CACHE_GLOBAL (ld.global.cg, by L2 only: for data other blocks wrote during the kernel, which
// this SM's L1 must not answer for). The CPU emulator has no caches: a plain load there.
enum CacheOp { CACHE_STREAMING, CACHE_GLOBAL };
template <CacheOp OP, typename T> __device__ __forceinline__ Pack<T> load_pack_by(const T* p) {
#ifdef CUPY_RAW_EMULATOR
    return load_pack(p);
#else
    const uint4* q = reinterpret_cast<const uint4*>(p);
    const uint4 bits = OP == CACHE_STREAMING ? __ldcs(q) : __ldcg(q);
    return *reinterpret_cast<const Pack<T>*>(&bits);
#endif
}

template <typename T> __device__ __forceinline__ Pack<T> load_pack_stream(const T* p) {
    return load_pack_by<CACHE_STREAMING>(p);
}

// one element by L2 only (ld.global.cg), as load_pack_by<CACHE_GLOBAL>
template <typename T> __device__ __forceinline__ T load_l2(const T* p) {
#ifdef CUPY_RAW_EMULATOR
    return *p;
#else
    return __ldcg(p);
#endif
}

template <typename T> __device__ __forceinline__ void store_pack_stream(T* p, const Pack<T>& pack) {
#ifdef CUPY_RAW_EMULATOR
    store_pack(p, pack);
#else
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&pack));
#endif
}

#ifdef CUPY_RAW_EMULATOR
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool inside) {
    if (inside) memcpy(dst, src, 16);
    else memset(dst, 0, 16);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) { memcpy(dst, src, 4); }
__device__ __forceinline__ void cp_async_commit() {}
template <int N> __device__ __forceinline__ void cp_async_wait() {}
#else
// `inside` false: src-size 0 copies nothing and zero-fills the 16 bytes
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool inside) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src), "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"
                 ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// GPT-2's tanh GELU, gelu(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
// with sigmoid(2u) = 1 / (1 + 2^(x (GELU_A + GELU_B x^2))): one exp2f and one fast division, ~8
// instructions an element where expf() and an IEEE division took ~25 (gelu.cu's header measures why
// that matters; the GEMM's GELU epilogue takes the same form)
#define GELU_A -2.302208198f   // -2 sqrt(2/pi) log2(e)
#define GELU_B -0.1029432396f  // 0.044715 GELU_A
__device__ __forceinline__ float gelu_tanh(float x) {
    return __fdividef(x, 1.0f + exp2f(x * (GELU_A + GELU_B * x * x)));
}
// its backward, dout * gelu'(x) = dout * (s + 2 x s (1 - s) du/dx), s = sigmoid(2u), du/dx =
// sqrt(2/pi) (1 + 3 * 0.044715 x^2) (gelu.cu derives it): gelu.cu's kernel and the GEMM's epilogue
// that multiplies the MLP projection's dx by it (matmul.cu, FLAG_DGELU) share it, so they agree bit for bit
#define GELU_DU_1 0.7978845608028654f  // du/dx = GELU_DU_1 + GELU_DU_3 x^2
#define GELU_DU_3 0.1070322243f        // 3 * 0.044715 * sqrt(2/pi)
__device__ __forceinline__ float gelu_tanh_backward(float x, float dout) {
    const float x2 = x * x;
    const float s = __fdividef(1.0f, 1.0f + exp2f(x * (GELU_A + GELU_B * x2)));
    const float du = GELU_DU_1 + GELU_DU_3 * x2;
    return dout * s * (1.0f + 2.0f * x * (1.0f - s) * du);  // s + 2 x s (1 - s) du
}

// cp_async_wait<n> for an n known only at run time (or once the loop around it is unrolled): at
// most 7 younger groups are left in flight (a larger n waits for more than it must, never less)
__device__ __forceinline__ void cp_async_wait_upto(int n) {
    switch (n) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        case 5: cp_async_wait<5>(); break;
        case 6: cp_async_wait<6>(); break;
        default: cp_async_wait<7>(); break;
    }
}

// 4 or 2 values of U as one aligned vector load/store (Quad<float>: 16 bytes, like float4; these
// rather than CUDA's float2/float4 so that the CPU emulator needs no vector types)
template <typename U> struct alignas(4 * sizeof(U)) Quad { U v[4]; };
template <typename U> struct alignas(2 * sizeof(U)) Duo { U v[2]; };

// A CUtensorMap (cuTensorMapEncodeTiled's opaque 128 bytes), passed by value as a __grid_constant__
// (declared in every source: the CPU emulator declares a launcher for each kernel of a source, #if'd
// out or not).
// In the emulator it holds _tma.py's own description of the array instead (tma.cuh's EmuTensorMap),
// and is only 8-byte aligned, as a C struct passed by value from ctypes is.
#ifdef CUPY_RAW_EMULATOR
#ifndef __grid_constant__
#define __grid_constant__  // a qualifier the CPU has no use for
#endif
struct TmaDescriptor {
#else
struct alignas(64) TmaDescriptor {
#endif
    unsigned long long opaque[16];
};
