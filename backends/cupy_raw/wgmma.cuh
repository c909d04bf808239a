// wgmma.cuh: the warpgroup-level machinery of Hopper's wgmma.mma_async, shared by matmul.cu's
// gemm_wgmma and attention.cu's wgmma variant (after tensor_core.cuh, whose smem_at the emulator uses):
//
//   wgmma_fence()             wgmma.fence: registers written before it (accumulators, A fragments)
//                             are what the wgmma issued after it read
//   wgmma_commit()            closes a group of issued wgmma; wgmma_wait<N>() waits until at most N
//                             groups are in flight
//   fence_accumulators(d)     an empty asm over each accumulator (after wgmma_wait): the compiler may
//                             not move their reads and writes across it while wgmma owns them
//   opaque_zero()             0, as a value the compiler cannot see through
//   WG_FENCE_PROXY_ASYNC()    shared-memory writes of the generic proxy (st.shared, cp.async) made
//                             visible to the async proxy that wgmma reads its operands through
//   emu_wgmma_operand(d, kmajor, mn, k)   (emulator) element (mn, k) of an operand where its
//                             descriptor's canonical 128-byte-swizzle layout puts it: start + (mn / 8)
//                             SBO + (mn % 8) 128 + 2k for K-major, start + (mn / 64) LBO + (k / 8) SBO
//                             + (k % 8) 128 + 2 (mn % 64) for MN-major, then address bits 4-6 XOR
//                             bits 7-9. In the emulator each thread computes its own accumulators at
//                             issue, so fence, commit and wait have nothing to wait for.
#ifdef CUPY_RAW_EMULATOR
__device__ __forceinline__ void wgmma_fence() {}
__device__ __forceinline__ void wgmma_commit() {}
__device__ __forceinline__ int opaque_zero() { return 0; }
template <int N> __device__ __forceinline__ void wgmma_wait() {}
template <int N> __device__ __forceinline__ void fence_accumulators(float (&)[N]) {}
#define WG_FENCE_PROXY_ASYNC()

__device__ __forceinline__ float emu_wgmma_operand(unsigned long long desc, bool kmajor, int mn, int k) {
    const unsigned start = (unsigned)(desc & 0x3FFF) << 4, lbo = (unsigned)((desc >> 16) & 0x3FFF) << 4;
    const unsigned sbo = (unsigned)((desc >> 32) & 0x3FFF) << 4;
    unsigned addr = kmajor ? start + (mn / 8) * sbo + (mn % 8) * 128 + 2 * k
                           : start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + 2 * (mn % 64);
    addr ^= ((addr >> 7) & 7) << 4;
    floatX v;
    memcpy(&v, smem_at(addr), 2);
    return to_f32(v);
}
#else
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// 0, as a value the compiler cannot see through (nothing is computed from it ahead of this point)
__device__ __forceinline__ int opaque_zero() {
    int z;
    asm volatile("mov.b32 %0, 0;\n" : "=r"(z));
    return z;
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#define WG_FENCE_PROXY_ASYNC() asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory")
#endif  // CUPY_RAW_EMULATOR

// the accumulators of M blocks (or n8 tiles) of N floats each
template <int M, int N> __device__ __forceinline__ void fence_accumulators(float (&d)[M][N]) {
#pragma unroll
    for (int h = 0; h < M; ++h) fence_accumulators(d[h]);
}
