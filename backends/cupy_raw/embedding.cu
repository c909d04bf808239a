// embedding.cu: token + position embedding, forward and backward (one variant, "gather").
//
//   out[n, c] = wte[tokens[n], c] + wpe[n % T, c]                         n = b*T + t < N = B*T
//   dwpe[t, c] += sum_b dout[b*T + t, c]         dwte[v, c] += sum_{n: tokens[n] = v} dout[n, c]
//
// Forward: a grid-stride loop of 16-byte packs (vec = 1: C a multiple of a pack, pointers aligned).
//
// Backward, dwpe: one thread per (t, c), summing over b in order.
// Backward, dwte: a scatter-add (many positions may hold one token). Float atomics would make the
// sums depend on the order threads arrive in, and a sort (CUB/thrust) cannot go into a captured
// CUDA graph from CuPy, so the positions are bucketed by token with integer atomics and each bucket
// is then summed in increasing position order, which makes the result independent of the order the
// buckets were filled in:
//   embedding_count     count[tokens[n]] += 1                       (integer atomics: exact)
//   embedding_offsets   offsets = exclusive prefix sum of count     (one block)
//   embedding_bucket    bucket[offsets[v] + cursor[v]++] = n        (order within a bucket arbitrary)
//   embedding_dwte      block (v, column block): its bucket's positions sorted in shared memory
//                       (bitonic, up to SORT_CAP of them), then dwte[v, c] += dout[n, c] over
//                       them in that order; a bucket of more than SORT_CAP positions (a very
//                       frequent token) is walked in position order straight from `tokens` instead.
// floatX (wte, wpe, out, dout) and gradT (dwte, dwpe: float under mixed precision) are defines.
#include "common.cuh"

typedef Pack<floatX> PackX;

#define SORT_CAP 2048
#define DWTE_THREADS 256

// grid-stride over N*C (in packs when vec)
extern "C" __global__ void embedding_forward(const int* __restrict__ tokens, const floatX* __restrict__ wte,
                                             const floatX* __restrict__ wpe, floatX* __restrict__ out,
                                             int N, int T, int C, int V, int vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const int per = vec ? PackX::N : 1;
    const long long items = (long long)N * (C / per);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        const long long n = i / (C / per);
        const int c = (int)(i % (C / per)) * per;
        const long long tok = tokens[n];
        const floatX* a = wte + tok * C + c;
        const floatX* b = wpe + (n % T) * C + c;
        if (tok < 0 || tok >= V) {  // a bad id (checked on the host only for NumPy input): NaN, not a wild read
            for (int k = 0; k < per; k++) out[n * C + c + k] = from_f32<floatX>(__int_as_float(0x7fc00000));
        } else if (vec) {
            const PackX pa = load_pack(a), pb = load_pack(b);
            PackX r;
#pragma unroll
            for (int k = 0; k < PackX::N; k++) r.v[k] = from_f32<floatX>(to_f32(pa.v[k]) + to_f32(pb.v[k]));
            store_pack(out + n * C + c, r);
        } else {
            out[n * C + c] = from_f32<floatX>(to_f32(*a) + to_f32(*b));
        }
    }
}

// grid cdiv(T*C, 256), block 256
extern "C" __global__ void embedding_dwpe(const floatX* __restrict__ dout, gradT* __restrict__ dwpe,
                                          int B, int T, int C) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // t*C + c
    if (i >= (long long)T * C) return;
    float acc = to_f32(dwpe[i]);
    for (int b = 0; b < B; b++) acc += to_f32(dout[(long long)b * T * C + i]);
    dwpe[i] = from_f32<gradT>(acc);
}

// grid cdiv(N, 256), block 256; count zeroed by the caller
extern "C" __global__ void embedding_count(const int* __restrict__ tokens, int* __restrict__ count, int N, int V) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && tokens[n] >= 0 && tokens[n] < V) atomicAdd(count + tokens[n], 1);  // bad ids: no gradient
}

// grid 1, block 1024: offsets[v] = sum_{u < v} count[u]. Thread i scans its own contiguous
// segment of count; the segment totals are scanned across the block (warp shuffles, then warps).
extern "C" __global__ void embedding_offsets(const int* __restrict__ count, int* __restrict__ offsets, int V) {
    __shared__ int warp_totals[32];
    const int per = (V + blockDim.x - 1) / blockDim.x;
    const int lo = min(V, (int)threadIdx.x * per), hi = min(V, lo + per);
    int total = 0;
    for (int v = lo; v < hi; v++) total += count[v];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int incl = total;  // inclusive scan of the segment totals within the warp
    for (int d = 1; d < 32; d <<= 1) {
        const int up = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += up;
    }
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = lane < blockDim.x / 32 ? warp_totals[lane] : 0;
        for (int d = 1; d < 32; d <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += up;
        }
        warp_totals[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    int running = incl - total + (warp ? warp_totals[warp - 1] : 0);  // exclusive start of my segment
    for (int v = lo; v < hi; v++) {
        offsets[v] = running;
        running += count[v];
    }
}

// grid cdiv(N, 256), block 256; cursor zeroed by the caller
extern "C" __global__ void embedding_bucket(const int* __restrict__ tokens, const int* __restrict__ offsets,
                                            int* __restrict__ cursor, int* __restrict__ bucket, int N, int V) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && tokens[n] >= 0 && tokens[n] < V) {
        const int tok = tokens[n];
        bucket[offsets[tok] + atomicAdd(cursor + tok, 1)] = n;
    }
}

// grid (V, cdiv(C, DWTE_THREADS)), block DWTE_THREADS
extern "C" __global__ void embedding_dwte(const int* __restrict__ tokens, const int* __restrict__ count,
                                          const int* __restrict__ offsets, const int* __restrict__ bucket,
                                          const floatX* __restrict__ dout, gradT* __restrict__ dwte,
                                          int N, int C) {
    __shared__ int pos[SORT_CAP];
    const int v = blockIdx.x;
    const int L = count[v];
    if (L == 0) return;  // the whole block leaves together: no barrier is skipped by some threads only
    const int c = blockIdx.y * DWTE_THREADS + threadIdx.x;
    const bool mine = c < C;
    float acc = mine ? to_f32(dwte[(long long)v * C + c]) : 0.0f;
    if (L <= SORT_CAP) {
        int size = 1;
        while (size < L) size <<= 1;
        for (int i = threadIdx.x; i < size; i += DWTE_THREADS) pos[i] = i < L ? bucket[offsets[v] + i] : 0x7fffffff;
        __syncthreads();
        for (int k = 2; k <= size; k <<= 1) {         // bitonic sort, ascending
            for (int j = k >> 1; j > 0; j >>= 1) {
                for (int i = threadIdx.x; i < size; i += DWTE_THREADS) {
                    const int partner = i ^ j;
                    if (partner > i) {
                        const bool up = (i & k) == 0;
                        const int a = pos[i], b = pos[partner];
                        if ((a > b) == up) {
                            pos[i] = b;
                            pos[partner] = a;
                        }
                    }
                }
                __syncthreads();
            }
        }
        if (mine)
            for (int i = 0; i < L; i++) acc += to_f32(dout[(long long)pos[i] * C + c]);
    } else {  // a very frequent token: walk the positions in order, a tile of tokens at a time
        for (int base = 0; base < N; base += SORT_CAP) {
            const int tile = min(SORT_CAP, N - base);
            __syncthreads();  // the previous tile is no longer read
            for (int i = threadIdx.x; i < tile; i += DWTE_THREADS) pos[i] = tokens[base + i];
            __syncthreads();
            if (mine)
                for (int i = 0; i < tile; i++)
                    if (pos[i] == v) acc += to_f32(dout[(long long)(base + i) * C + c]);
        }
    }
    if (mine) dwte[(long long)v * C + c] = from_f32<gradT>(acc);
}
