// crossentropy.cu: softmax cross-entropy of the logits against the targets, forward and backward,
// one block per row (one variant, "online"); no probabilities are ever stored.
//
//   lse = log sum_{v < n_valid} exp(z_v)   loss = lse - z[target]  (0 where target = -1)
//   dz_v = dloss (exp(z_v - lse) - [v == target])  for v < n_valid; 0 in padded columns, ignored rows
//
// Forward: each thread walks its columns of the row (16-byte packs where vec = 1: V a multiple of a
// pack and the pointer aligned; the columns past the last whole pack below n_valid one by one) and
// keeps its own running max m and sum s of exp(z - m); a new z meets them with one exp:
//     e = exp(-|z - m|);   z > m: s = s e + 1, m = z   (the old sum rescaled to the new max)
//                          else:  s = s + e
// At the end the block merges its threads: M = max m, S = sum s exp(m - M) (block_max, block_sum:
// a fixed order, so bitwise repeatable); lse = M + log S is saved (N,) float32 for the backward.
// floatX is a define (the logits' type); the math is float32. A target outside [-1, n_valid) gives
// NaN (loss and gradient row), loudly, instead of reading outside the row.
#include "common.cuh"

typedef Pack<floatX> PackX;

// grid N, block THREADS (a multiple of 32)
extern "C" __global__ void crossentropy_forward(const floatX* __restrict__ logits, const int* __restrict__ targets,
                                                float* __restrict__ losses, float* __restrict__ lse_out,
                                                int V, int n_valid, int vec) {
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const floatX* z = logits + row * V;
    float m = -3.0e38f, s = 0.0f;  // m finite, so that z - m is never -inf - (-inf)
    const int whole = vec ? n_valid / PackX::N : 0;  // packs wholly below n_valid
    for (int p = threadIdx.x; p < whole; p += blockDim.x) {
        const PackX pk = load_pack(z + (long long)p * PackX::N);
#pragma unroll
        for (int k = 0; k < PackX::N; k++) online_update(m, s, to_f32(pk.v[k]));
    }
    for (int v = whole * PackX::N + threadIdx.x; v < n_valid; v += blockDim.x) online_update(m, s, to_f32(z[v]));
    const float M = block_max(m, scratch);
    const float S = block_sum(s * __expf(m - M), scratch);
    if (threadIdx.x == 0) {
        const float lse = M + logf(S);
        const int target = targets[row];
        // a target past n_valid (checked on the host only for NumPy input, to avoid a sync) is a NaN
        // loss, never a read outside the row
        losses[row] = target < 0 ? 0.0f : target < n_valid ? lse - to_f32(z[target]) : __int_as_float(0x7fc00000);
        lse_out[row] = lse;
    }
}

// grid N, block THREADS: every column of the row written (0 past n_valid and on ignored rows)
extern "C" __global__ void crossentropy_backward(const floatX* __restrict__ logits, const int* __restrict__ targets,
                                                 const float* __restrict__ lse, const float* __restrict__ dlosses,
                                                 floatX* __restrict__ dlogits, int V, int n_valid, int vec) {
    const long long row = blockIdx.x;
    const floatX* z = logits + row * V;
    floatX* dz = dlogits + row * V;
    const int target = targets[row];
    const float dloss = target < 0 ? 0.0f : target < n_valid ? dlosses[row] : __int_as_float(0x7fc00000);
    const float l = lse[row];
    const int packs = vec ? V / PackX::N : 0;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int v0 = p * PackX::N;
        const PackX pk = load_pack(z + v0);
        PackX out;
#pragma unroll
        for (int k = 0; k < PackX::N; k++) {
            const int v = v0 + k;
            const float d = dloss * (__expf(to_f32(pk.v[k]) - l) - (v == target ? 1.0f : 0.0f));
            out.v[k] = from_f32<floatX>(v < n_valid ? d : 0.0f);
        }
        store_pack(dz + v0, out);
    }
    for (int v = packs * PackX::N + threadIdx.x; v < V; v += blockDim.x) {
        const float d = v < n_valid ? dloss * (__expf(to_f32(z[v]) - l) - (v == target ? 1.0f : 0.0f)) : 0.0f;
        dz[v] = from_f32<floatX>(d);
    }
}
