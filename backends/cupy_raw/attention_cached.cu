// attention_cached.cu: causal attention of Tn new queries over Tk >= Tn cached keys, for generation
// with a KV cache (one variant, "simple"; forward only).
//
//   query i (at absolute position t0 + i, t0 = L_b - Tn) of head h, row b of L_b positions
//   (L_b = lengths[b] with HAS_LENGTHS, else Tk):
//   y = softmax_s(q . k_s / sqrt(HS), s <= t0 + i) . v           (keys at s >= L_b never read)
//
// As attention.cu's simple variant: one block per (query, head, batch), the scores in shared memory,
// an exact softmax in float32. The arrays are views as the cache hands them over: q a slice of the
// qkv projection (row stride 3C), k and v the first Tk rows of (B, maxT, C) caches; the launcher
// passes each one's batch and row strides in elements (the last axis must be contiguous). y is
// (B, Tn, C) contiguous. floatX and HAS_LENGTHS (0 or 1: a (B,) int32 lengths array) are defines.
#include "common.cuh"

// grid (Tn, NH, B), block 128, dynamic shared (HS + Tk) floats
extern "C" __global__ void attention_cached_forward(const floatX* __restrict__ q, const floatX* __restrict__ k,
                                                    const floatX* __restrict__ v, floatX* __restrict__ y,
                                                    const int* __restrict__ lengths, int Tn, int Tk, int C, int NH, long long q_batch,
                                                    long long q_row, long long k_batch, long long k_row,
                                                    long long v_batch, long long v_row, float scale) {
    extern __shared__ float smem[];
    __shared__ float scratch[32];
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
#if HAS_LENGTHS
    const int last = lengths[b] - Tn + i;  // the last key this query sees
#else
    const int last = Tk - Tn + i;
#endif
    float* qs = smem;               // (HS)
    float* p = smem + HS;           // (last + 1)
    const floatX* qrow = q + b * q_batch + i * q_row + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) qs[d] = to_f32(qrow[d]);
    __syncthreads();
    float mx = -POS_INF_F;
    for (int s = threadIdx.x; s <= last; s += blockDim.x) {
        const floatX* krow = k + b * k_batch + s * k_row + h * HS;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += qs[d] * to_f32(krow[d]);
        p[s] = dot * scale;
        mx = fmaxf(mx, p[s]);
    }
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int s = threadIdx.x; s <= last; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = block_sum(sum, scratch);  // its barriers also publish every p[s]
    const float inv = 1.0f / sum;
    const floatX* vh = v + b * v_batch + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s <= last; s++) acc += p[s] * to_f32(vh[s * v_row + d]);
        y[((long long)b * Tn + i) * C + h * HS + d] = from_f32<floatX>(acc * inv);
    }
}
