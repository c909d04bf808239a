// adamw.cu: one AdamW step over a flat parameter buffer, in place (one variant, "fused").
//
// With t = *step >= 1, the bias corrections computed here on the device in float32:
//     bc1 = 1 / (1 - beta1^t),  bc2 = 1 / (1 - beta2^t)
//     scale = grad_scale * min(1, max_norm / sqrt(*grad_sumsq))   (clipping: has_sumsq and max_norm > 0)
//     g = grad * scale;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//     param -= lr * (m bc1 / (sqrt(v bc2) + eps) + weight_decay * param)
//     param_copy = param rounded to copyT                          (has_copy: the 16-bit working copy)
// If sqrt(*grad_sumsq) is not finite (has_sumsq), nothing is written: the step is skipped.
//
// lr, step and grad_sumsq are read through pointers, so a captured CUDA graph replays with the
// values the core writes into those (1,) float32 arrays before each replay; the host launcher
// puts plain Python numbers into a small array of its own. Defines: paramT (param, grad, m, v) and
// copyT (param_copy). Each element is read once and written once: the minimum traffic.
//
// Layout: each thread updates CHUNK = 8 elements, one block CHUNK x blockDim.x, no grid-stride
// loop. With `vec` (every pointer 16-byte aligned) a thread's 8 elements are consecutive and move
// as 16-byte vectors: 2 float4 of each float32 array, 1 pack of 8 of each 16-bit one, all loads
// issued before any math (up to 8 x 16 bytes in flight a thread). The first version moved one
// element per load in a grid-stride loop: 2-byte loads at bf16, 45% of the copy bandwidth. The last
// n % 8 elements, and every element where `vec` = 0, go one element per load (the 8 of a thread
// then blockDim.x apart, so that a warp's loads stay contiguous).
#include "common.cuh"

#define CHUNK 8  // elements a thread updates

struct Hyper {  // what every element's update needs, computed once per thread
    float scale, lr, bc1, bc2, beta1, beta2, eps, weight_decay;
};

__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, const Hyper& h) {
    g *= h.scale;
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    p -= h.lr * (m * h.bc1 / (sqrtf(v * h.bc2) + h.eps) + h.weight_decay * p);
}

// CHUNK consecutive elements at src (16-byte aligned) as float32, by 16-byte vectors
template <typename T> __device__ __forceinline__ void load_chunk(const T* __restrict__ src, float (&dst)[CHUNK]) {
    constexpr int N = Pack<T>::N;
#pragma unroll
    for (int q = 0; q < CHUNK / N; q++) {
        const Pack<T> pk = load_pack(src + q * N);
#pragma unroll
        for (int e = 0; e < N; e++) dst[q * N + e] = to_f32(pk.v[e]);
    }
}

template <typename T> __device__ __forceinline__ void store_chunk(T* __restrict__ dst, const float (&src)[CHUNK]) {
    constexpr int N = Pack<T>::N;
#pragma unroll
    for (int q = 0; q < CHUNK / N; q++) {
        Pack<T> pk;
#pragma unroll
        for (int e = 0; e < N; e++) pk.v[e] = from_f32<T>(src[q * N + e]);
        store_pack(dst + q * N, pk);
    }
}

// element i alone (the tail, and the scalar path)
__device__ __forceinline__ void update_element(paramT* __restrict__ param, const paramT* __restrict__ grad,
                                               paramT* __restrict__ m, paramT* __restrict__ v,
                                               copyT* __restrict__ param_copy, long long i, int has_copy,
                                               const Hyper& h) {
    float p = to_f32(param[i]), mi = to_f32(m[i]), vi = to_f32(v[i]);
    adamw_one(p, to_f32(grad[i]), mi, vi, h);
    m[i] = from_f32<paramT>(mi);
    v[i] = from_f32<paramT>(vi);
    param[i] = from_f32<paramT>(p);
    if (has_copy) param_copy[i] = from_f32<copyT>(p);
}

// grid cdiv(n, CHUNK * blockDim.x)
extern "C" __global__ void adamw_update(paramT* __restrict__ param, const paramT* __restrict__ grad,
                                        paramT* __restrict__ m, paramT* __restrict__ v, copyT* __restrict__ param_copy,
                                        const float* __restrict__ lr_ptr, const float* __restrict__ step_ptr,
                                        const float* __restrict__ grad_sumsq, long long n, float beta1, float beta2,
                                        float eps, float weight_decay, float grad_scale, float max_norm,
                                        int has_copy, int has_sumsq, int vec) {
    Hyper h;
    h.scale = grad_scale;
    if (has_sumsq) {
        const float norm = sqrtf(*grad_sumsq);
        if (!isfinite(norm)) return;  // a bad step: param, m, v, param_copy untouched
        if (max_norm > 0.0f) h.scale *= fminf(1.0f, max_norm / norm);
    }
    const float t = *step_ptr;
    h.lr = *lr_ptr;
    h.bc1 = 1.0f / (1.0f - powf(beta1, t));
    h.bc2 = 1.0f / (1.0f - powf(beta2, t));
    h.beta1 = beta1;
    h.beta2 = beta2;
    h.eps = eps;
    h.weight_decay = weight_decay;
    const long long block_start = (long long)blockIdx.x * CHUNK * blockDim.x;
    if (vec) {
        const long long i = block_start + (long long)threadIdx.x * CHUNK;  // this thread's 8 consecutive elements
        if (i + CHUNK <= n) {
            float p[CHUNK], g[CHUNK], mi[CHUNK], vi[CHUNK];
            load_chunk(param + i, p);
            load_chunk(grad + i, g);
            load_chunk(m + i, mi);
            load_chunk(v + i, vi);
#pragma unroll
            for (int e = 0; e < CHUNK; e++) adamw_one(p[e], g[e], mi[e], vi[e], h);
            store_chunk(m + i, mi);
            store_chunk(v + i, vi);
            store_chunk(param + i, p);
            if (has_copy) store_chunk(param_copy + i, p);
        } else {
            for (long long j = i; j < n; j++) update_element(param, grad, m, v, param_copy, j, has_copy, h);
        }
    } else {
#pragma unroll
        for (int k = 0; k < CHUNK; k++) {
            const long long i = block_start + (long long)k * blockDim.x + threadIdx.x;
            if (i < n) update_element(param, grad, m, v, param_copy, i, has_copy, h);
        }
    }
}
