// crossentropy_onepass.cu: the loss and dlogits of each row from one read of its logits, one block
// per row (one variant, "staged"); the math is crossentropy.cu's:
//
//   lse = log sum_{v < n_valid} exp(z_v)   loss = lse - z[target]  (0 where target = -1)
//   dz_v = dloss (exp(z_v - lse) - [v == target])  for v < n_valid; 0 in padded columns, ignored rows
//
// with dloss, the gradient of the step's loss with respect to this row's loss, given ahead.
//
// Walk 1 reads the row from memory (16-byte packs where vec = 1), keeps each thread's running max and
// sum (online_update) and, with staged = 1, copies the row into shared memory (100 KB for GPT-2's
// 50304 bf16 logits: two blocks an SM). The block merges its threads' (m, s) into lse in a fixed order.
// Walk 2 computes dz from the copy and writes it: each thread reads back the very packs it wrote, so
// the reductions' barriers are all the synchronisation it needs. The logits cross the memory bus once
// and dlogits once: crossentropy.cu's forward and backward read the row twice. With staged = 0 (a row
// too large for shared memory) walk 2 reads the row from memory again.
// A target outside [-1, n_valid) gives NaN (loss and gradient row), as in crossentropy.cu.
#include "common.cuh"

typedef Pack<floatX> PackX;

// grid N, block THREADS (a multiple of 32), dynamic shared memory V * sizeof(floatX) when staged
extern "C" __global__ void crossentropy_onepass(const floatX* __restrict__ logits, const int* __restrict__ targets,
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

    // walk 1: (m, s) per thread over the first n_valid logits, the row copied as it goes
    float m = -3.0e38f, s = 0.0f;  // m finite, so that z - m is never -inf - (-inf)
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int v0 = p * PackX::N;
        const PackX pk = staged ? load_pack_stream(z + v0) : load_pack(z + v0);  // staged: read once
        if (staged) store_pack(copy + v0, pk);
#pragma unroll
        for (int k = 0; k < PackX::N; k++)
            if (v0 + k < n_valid) online_update(m, s, to_f32(pk.v[k]));
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

    // walk 2: dz from the copy (or the row again), every column written
    const floatX* src = staged ? copy : z;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int v0 = p * PackX::N;
        const PackX pk = load_pack(src + v0);
        PackX out;
#pragma unroll
        for (int k = 0; k < PackX::N; k++) {
            const int v = v0 + k;
            const float d = dloss * (__expf(to_f32(pk.v[k]) - lse) - (v == target ? 1.0f : 0.0f));
            out.v[k] = from_f32<floatX>(v < n_valid ? d : 0.0f);
        }
        store_pack(dz + v0, out);
    }
    for (int v = packs * PackX::N + threadIdx.x; v < V; v += blockDim.x) {
        const float d = v < n_valid ? dloss * (__expf(to_f32(src[v]) - lse) - (v == target ? 1.0f : 0.0f)) : 0.0f;
        dz[v] = from_f32<floatX>(d);
    }
}
