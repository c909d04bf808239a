// gelu.cu: GPT-2's tanh-approximate GELU, forward and backward, elementwise (one variant, "fused").
//
//   out = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),        u = sqrt(2/pi) (x + 0.044715 x^3)
//   dx  = dout * (s + 2 x s (1 - s) du/dx),             s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
// (1 + tanh u) / 2 = sigmoid(2u) and 1 - tanh(u)^2 = 4 s (1 - s): one exponential per element, no
// tanh. The math runs in float32 whatever the storage type floatX (a define: float, __half or
// __nv_bfloat16).
//
// Memory-bound, but only just: the H200's ~4.3 TB/s bring each SM ~16 bytes a clock, so a bf16
// forward element (2 bytes in, 2 out) leaves an SM's 4 schedulers x 32 lanes ~32 thread-instructions.
// expf() and an IEEE division took ~25 of them, and issue slots, not memory, nearly set the pace.
// Hence, with the constants folded,
//   s = 1 / (1 + 2^(x (A + B x^2))),   A = -2 sqrt(2/pi) log2(e),  B = 0.044715 A
// 3 FMA-pipe instructions, one exp2f (the SFU's ex2, ~2 ulp) and one fast division (__fdividef,
// ~2 ulp; x / inf = 0 where x << 0): ~8 an element. The float32 rounding of the exponent's argument
// (~1e-7 of |arg|, the error that grows with |x|) is the same as expf(-2u)'s was.
//
// Layout (ITEMS and the block size from gelu.py's table): thread t of block b takes ITEMS items
// (an item is one 16-byte pack: 8 bf16/fp16 or 4 floats) b*ITEMS*THREADS + k*THREADS + t, k < ITEMS,
// so a warp's k-th loads are 512 contiguous bytes.
// It issues all ITEMS loads (of x, and of dout in the backward) before computing any, so ITEMS x
// 16 bytes per array are in flight per thread, and then stores. One item per thread with a
// grid-stride loop (the old kernel) kept one load in flight and serialised load, math, store.
// `vec` = 0 (a pointer not 16-byte aligned) makes an item one element (scalar loads); the last
// n % 8 (or % 4) elements after the packs are done one per thread by the first threads.
#include "common.cuh"

typedef Pack<floatX> PackX;

// one thread's items as float32: W = PackX::N elements each (vector path) or 1 (scalar path)
template <int W> struct Items {
    float v[ITEMS][W];
};

// the element index of item k's first element for this thread, and whether that item exists
template <int W> __device__ __forceinline__ long long item_start(int k) {
    return ((long long)blockIdx.x * ITEMS * blockDim.x + (long long)k * blockDim.x + threadIdx.x) * W;
}

template <int W> __device__ __forceinline__ void load_items(const floatX* __restrict__ src, long long items,
                                                            Items<W>& r) {
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const long long i = item_start<W>(k);
        if (i >= items * W) continue;
        if constexpr (W == PackX::N) {
            const PackX p = load_pack(src + i);
#pragma unroll
            for (int e = 0; e < W; e++) r.v[k][e] = to_f32(p.v[e]);
        } else {
            r.v[k][0] = to_f32(src[i]);
        }
    }
}

template <int W> __device__ __forceinline__ void store_items(floatX* __restrict__ dst, long long items,
                                                             const Items<W>& r) {
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        const long long i = item_start<W>(k);
        if (i >= items * W) continue;
        if constexpr (W == PackX::N) {
            PackX p;
#pragma unroll
            for (int e = 0; e < W; e++) p.v[e] = from_f32<floatX>(r.v[k][e]);
            store_pack(dst + i, p);
        } else {
            dst[i] = from_f32<floatX>(r.v[k][0]);
        }
    }
}

template <int W> __device__ __forceinline__ void forward_items(const floatX* __restrict__ x, floatX* __restrict__ out,
                                                               long long items) {
    Items<W> r;
    load_items<W>(x, items, r);
#pragma unroll
    for (int k = 0; k < ITEMS; k++)
#pragma unroll
        for (int e = 0; e < W; e++) r.v[k][e] = gelu_tanh(r.v[k][e]);
    store_items<W>(out, items, r);
}

template <int W> __device__ __forceinline__ void backward_items(const floatX* __restrict__ x,
                                                                const floatX* __restrict__ dout,
                                                                floatX* __restrict__ dx, long long items) {
    Items<W> xs, ds;
    load_items<W>(x, items, xs);
    load_items<W>(dout, items, ds);
#pragma unroll
    for (int k = 0; k < ITEMS; k++)
#pragma unroll
        for (int e = 0; e < W; e++) xs.v[k][e] = gelu_tanh_backward(xs.v[k][e], ds.v[k][e]);
    store_items<W>(dx, items, xs);
}

// grid cdiv(items, ITEMS * blockDim.x), items = n / PackX::N if vec else n
extern "C" __global__ void gelu_forward(const floatX* __restrict__ x, floatX* __restrict__ out, long long n, int vec) {
    if (vec) {
        forward_items<PackX::N>(x, out, n / PackX::N);
        const long long i = n / PackX::N * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = from_f32<floatX>(gelu_tanh(to_f32(x[i])));  // the tail after the packs
    } else {
        forward_items<1>(x, out, n);
    }
}

extern "C" __global__ void gelu_backward(const floatX* __restrict__ x, const floatX* __restrict__ dout,
                                         floatX* __restrict__ dx, long long n, int vec) {
    if (vec) {
        backward_items<PackX::N>(x, dout, dx, n / PackX::N);
        const long long i = n / PackX::N * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) dx[i] = from_f32<floatX>(gelu_tanh_backward(to_f32(x[i]), to_f32(dout[i])));
    } else {
        backward_items<1>(x, dout, dx, n);
    }
}
