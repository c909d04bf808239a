// crossentropy_onepass.cu: the loss and dlogits of each row from one read of its logits, one block
// per row (one variant, "staged"); the math is crossentropy.cu's:
//
//   lse = log sum_{v < n_valid} exp(z_v)   loss = lse - z[target]  (0 where target = -1)
//   dz_v = dloss (exp(z_v - lse) - [v == target])  for v < n_valid; 0 in padded columns, ignored rows
//
// with dloss, the gradient of the step's loss with respect to this row's loss, given ahead.
//
// Walk 1 reads the row from memory (16-byte packs where vec = 1, UNROLL of them at a time), keeps each
// thread's running max and sum (a pack at a time: pack_update) and, with staged = 1, copies the row into shared memory (100 KB for GPT-2's
// 50304 bf16 logits: two blocks an SM). The block merges its threads' (m, s) into lse in a fixed order.
// Walk 2 computes dz from the copy and writes it: each thread reads back the very packs it wrote, so
// the reductions' barriers are all the synchronisation it needs. The logits cross the memory bus once
// and dlogits once: crossentropy.cu's forward and backward read the row twice. With staged = 0 (a row
// too large for shared memory) walk 2 reads the row from memory again.
// A target outside [-1, n_valid) gives NaN (loss and gradient row), as in crossentropy.cu.
#include "common.cuh"

typedef Pack<floatX> PackX;
constexpr float LOG2E = 1.4426950408889634f;
constexpr int UNROLL = 4;  // packs a thread loads before it uses the first: more bytes in flight

// (m, s) meet a pack of values z at once: its max first, then one exp per value and one to rescale s
// (9 exps for 8 values, against crossentropy.cu's 8 with two selects each; fewer instructions here,
// where at 4.3 TB/s an SM has ~32 issue slots per bf16 element for both walks together)
template <int N> __device__ __forceinline__ void pack_update(float& m, float& s, const float (&z)[N]) {
    float top = z[0];
#pragma unroll
    for (int k = 1; k < N; k++) top = fmaxf(top, z[k]);
    const float m_new = fmaxf(m, top);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) sum += exp2f((z[k] - m_new) * LOG2E);
    s = s * exp2f((m - m_new) * LOG2E) + sum;
    m = m_new;
}

// grid N, block 512 threads (crossentropy_onepass.py's THREADS), dynamic shared memory V * sizeof(floatX)
// when staged. Two blocks an SM, so that one's walk 2 overlaps the other's walk 1: their two 100 KB
// rows fit in shared memory and __launch_bounds__ holds the registers to 64 a thread (one block of
// 1024 threads at 55 registers left each SM one row at a time: 4.76 ms at 65536 rows, 66% of copy)
extern "C" __global__ void __launch_bounds__(512, 2) crossentropy_onepass(const floatX* __restrict__ logits, const int* __restrict__ targets,
                                                const float* __restrict__ dlosses, float* __restrict__ losses,
                                                floatX* __restrict__ dlogits, int V, int n_valid, int vec,
                                                int staged) {
    extern __shared__ __align__(16) unsigned char row_smem[];
    __shared__ float scratch[32];
    floatX* copy = reinterpret_cast<floatX*>(row_smem);
    const long long row = blockIdx.x;
    const floatX* z = logits + row * V;
    floatX* dz = dlogits + row * V;
    const int packs = vec ? V / PackX::N : 0;
    const int whole = vec ? n_valid / PackX::N : 0;  // packs wholly below n_valid

    // walk 1: (m, s) per thread over the first n_valid logits, the row copied as it goes; UNROLL
    // packs loaded at a time
    float m = -3.0e38f, s = 0.0f;  // m finite, so that z - m is never -inf - (-inf)
    for (int p0 = threadIdx.x; p0 < packs; p0 += UNROLL * blockDim.x) {
        PackX pk[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int p = p0 + u * blockDim.x;
            if (p < packs) pk[u] = staged ? load_pack_stream(z + p * PackX::N) : load_pack(z + p * PackX::N);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int p = p0 + u * blockDim.x;
            if (p >= packs) break;
            if (staged) store_pack(copy + p * PackX::N, pk[u]);
            if (p < whole) {
                float x[PackX::N];
#pragma unroll
                for (int k = 0; k < PackX::N; k++) x[k] = to_f32(pk[u].v[k]);
                pack_update(m, s, x);
            } else {  // the pack across n_valid (and the padding past it)
#pragma unroll
                for (int k = 0; k < PackX::N; k++)
                    if (p * PackX::N + k < n_valid) online_update(m, s, to_f32(pk[u].v[k]));
            }
        }
    }
    for (int v = packs * PackX::N + threadIdx.x; v < V; v += blockDim.x) {
        const floatX x = z[v];
        if (staged) copy[v] = x;
        if (v < n_valid) online_update(m, s, to_f32(x));
    }
    const float M = block_max(m, scratch);
    const float lse = M + logf(block_sum(s * __expf(m - M), scratch));
    const int target = targets[row];
    const bool known = target < n_valid;  // a target past n_valid: NaN, never a read outside the row
    if (threadIdx.x == 0)
        losses[row] = target < 0 ? 0.0f : known ? lse - to_f32(z[target]) : __int_as_float(0x7fc00000);
    const float dloss = target < 0 ? 0.0f : known ? dlosses[row] : __int_as_float(0x7fc00000);

    // walk 2: dz = dloss exp(z - lse) from the copy (or the row again), every column written; the
    // target's -dloss and the zeros past n_valid only in the pack that holds them
    const floatX* src = staged ? copy : z;
    const float lse2 = lse * LOG2E;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int v0 = p * PackX::N;
        const PackX pk = load_pack(src + v0);
        float d[PackX::N];
#pragma unroll
        for (int k = 0; k < PackX::N; k++) d[k] = dloss * exp2f(fmaf(to_f32(pk.v[k]), LOG2E, -lse2));
        if ((unsigned)(target - v0) < (unsigned)PackX::N) {
#pragma unroll
            for (int k = 0; k < PackX::N; k++) d[k] -= v0 + k == target ? dloss : 0.0f;
        }
        if (v0 + PackX::N > n_valid) {
#pragma unroll
            for (int k = 0; k < PackX::N; k++) d[k] = v0 + k < n_valid ? d[k] : 0.0f;
        }
        PackX out;
#pragma unroll
        for (int k = 0; k < PackX::N; k++) out.v[k] = from_f32<floatX>(d[k]);
        store_pack(dz + v0, out);
    }
    for (int v = packs * PackX::N + threadIdx.x; v < V; v += blockDim.x) {
        const float d = v < n_valid ? dloss * (__expf(to_f32(src[v]) - lse) - (v == target ? 1.0f : 0.0f)) : 0.0f;
        dz[v] = from_f32<floatX>(d);
    }
}
