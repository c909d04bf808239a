// sumsq.cu: the sum of squares of a whole buffer (the gradient norm's square), in float32, in a
// fixed reduction order (one variant, "fixed-order").
//
//   out[0] = sum_i float(x[i])^2
//
// sumsq_partial: G blocks (G chosen from n alone, so the order does not depend on the GPU); thread
// j of block b sums x[b*THREADS + j + k*G*THREADS] over k, then the block sums its threads
// (block_sum: a fixed order) into partial[b]. sumsq_finish: one block sums the G partials the same
// way. Bitwise repeatable. floatX is a define.
#include "common.cuh"

extern "C" __global__ void sumsq_partial(const floatX* __restrict__ x, float* __restrict__ partial, long long n) {
    __shared__ float scratch[32];
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float xi = to_f32(x[i]);
        acc += xi * xi;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// grid 1, block THREADS
extern "C" __global__ void sumsq_finish(const float* __restrict__ partial, float* __restrict__ out, int G) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < G; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[0] = acc;
}
