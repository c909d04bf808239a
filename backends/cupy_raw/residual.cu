// residual.cu: the skip connection out = a + b (one variant, "fused"), and the copy its backward
// uses when the caller hands it gradient buffers (da = db = dout).
//
// Memory-bound, written like gelu.cu: a grid-stride loop of 16-byte packs (vec = 1 when every
// pointer is 16-byte aligned), the sum taken in float32 and rounded once to floatX (a define);
// the partial last pack (or everything, vec = 0) element by element.
#include "common.cuh"

typedef Pack<floatX> PackX;

extern "C" __global__ void residual_forward(const floatX* __restrict__ a, const floatX* __restrict__ b,
                                            floatX* __restrict__ out, long long n, int vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long packs = vec ? n / PackX::N : 0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += stride) {
        PackX pa = load_pack(a + p * PackX::N), pb = load_pack(b + p * PackX::N), res;
#pragma unroll
        for (int k = 0; k < PackX::N; k++) res.v[k] = from_f32<floatX>(to_f32(pa.v[k]) + to_f32(pb.v[k]));
        store_pack(out + p * PackX::N, res);
    }
    for (long long i = packs * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = from_f32<floatX>(to_f32(a[i]) + to_f32(b[i]));
}

extern "C" __global__ void residual_copy(const floatX* __restrict__ src, floatX* __restrict__ dst,
                                         long long n, int vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long packs = vec ? n / PackX::N : 0;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += stride)
        store_pack(dst + p * PackX::N, load_pack(src + p * PackX::N));
    for (long long i = packs * PackX::N + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}
