// gelu.cu: GPT-2's tanh-approximate GELU, forward and backward, elementwise (one variant, "fused").
//
//   out = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),        u = sqrt(2/pi) (x + 0.044715 x^3)
//   dx  = dout * (s + 2 x s (1 - s) du/dx),             s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
// (1 + tanh u) / 2 = sigmoid(2u) and 1 - tanh(u)^2 = 4 s (1 - s): one exp per element, no tanh.
// The math runs in float32 whatever the storage type floatX (a define: float, __half or
// __nv_bfloat16). Memory-bound: each thread takes one 16-byte pack (8 bf16/fp16 or 4 floats) per
// step of a grid-stride loop, so every load and store is a 16-byte vector; `vec` = 0 (a pointer
// not 16-byte aligned) falls back to one element at a time. The last partial pack is done element
// by element.
#include "common.cuh"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_CUBE 0.044715f

__device__ __forceinline__ float gelu_sigmoid(float x) {  // s = sigmoid(2u)
    const float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));  // expf: within 2 ulp (__expf drifts to ~100 ulp at |arg| ~ 87)
}

__device__ __forceinline__ float gelu_forward_one(float x) { return x * gelu_sigmoid(x); }

__device__ __forceinline__ float gelu_backward_one(float x, float dout) {
    const float s = gelu_sigmoid(x);
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return dout * (s + 2.0f * x * s * (1.0f - s) * du);
}

typedef Pack<floatX> PackX;

extern "C" __global__ void gelu_forward(const floatX* __restrict__ x, floatX* __restrict__ out,
                                        long long n, int vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long packs = vec ? n / PackX::N : 0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += stride) {
        PackX in = load_pack(x + p * PackX::N), res;
#pragma unroll
        for (int k = 0; k < PackX::N; k++) res.v[k] = from_f32<floatX>(gelu_forward_one(to_f32(in.v[k])));
        store_pack(out + p * PackX::N, res);
    }
    for (long long i = packs * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = from_f32<floatX>(gelu_forward_one(to_f32(x[i])));
}

extern "C" __global__ void gelu_backward(const floatX* __restrict__ x, const floatX* __restrict__ dout,
                                         floatX* __restrict__ dx, long long n, int vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long packs = vec ? n / PackX::N : 0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += stride) {
        PackX xs = load_pack(x + p * PackX::N), ds = load_pack(dout + p * PackX::N), res;
#pragma unroll
        for (int k = 0; k < PackX::N; k++)
            res.v[k] = from_f32<floatX>(gelu_backward_one(to_f32(xs.v[k]), to_f32(ds.v[k])));
        store_pack(dx + p * PackX::N, res);
    }
    for (long long i = packs * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = from_f32<floatX>(gelu_backward_one(to_f32(x[i]), to_f32(dout[i])));
}
