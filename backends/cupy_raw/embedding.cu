// embedding.cu: token + position embedding, forward and backward (one variant, "gather").
//
//   out[n, c] = wte[tokens[n], c] + wpe[n % T, c]                         n = b*T + t < N = B*T
//   dwpe[t, c] += sum_b dout[b*T + t, c]         dwte[v, c] += sum_{n: tokens[n] = v} dout[n, c]
//
// Forward: a grid-stride loop of 16-byte packs (vec = 1: C a multiple of a pack, pointers aligned).
//
// Backward: every kernel reads and writes rows in pieces of 8 consecutive columns (one or two
// 16-byte packs when `vec`: C a multiple of 8, every pointer aligned; else element by element).
//
// dwpe: one thread per (t, piece), summing over b in order.
// dwte: a scatter-add (many positions may hold one token). Float atomics would make the sums depend
// on the order threads arrive in, and a sort (CUB/thrust) cannot go into a captured CUDA graph from
// CuPy, so every sum is taken in increasing position order, found as follows:
//   embedding_count     count[tokens[n]] += 1                       (integer atomics: exact)
//   embedding_offsets   offsets = exclusive prefix sum of count     (one block)
//   embedding_bucket    bucket[offsets[v] + cursor[v]++] = n        (order within a bucket arbitrary)
//   embedding_dwte      one warp per (token v, 256 columns), for the tokens held by at most 32
//                       positions (in GPT-2 training, nearly all of them): lane i holds the i-th
//                       position of the bucket, its rank among the bucket's positions is counted
//                       with 31 shuffles, the positions are placed by rank, and dwte[v] += dout[n]
//                       over them in that order, four rows loaded before they are added. A token
//                       held by more positions is appended to a list (its order arbitrary: each
//                       token is summed alone) for
//   embedding_order     one block per listed token: its bucket rewritten in position order by
//                       walking all N positions (an ordered compaction: each thread counts its 8
//                       positions' hits, a block-wide scan of the counts gives where they go), then
//   embedding_dwte_heavy one block of 32 warps per (listed token, 256 columns): warp w sums its
//                       thirty-second of the ordered positions into its own partial, and the
//                       partials are added in warp order. No sort, however frequent the token (a
//                       space is ~40% of the GPT-2 tokens of Python source, "the" ~4% of English).
// Each step's order is fixed by the tokens alone, so the result is bitwise repeatable. A warp is the
// unit because a block per token spent its time on 150,000 launches of dependent loads (v's count,
// offset, bucket, then the rows) for buckets of one or two positions.
// floatX (wte, wpe, out, dout) and gradT (dwte, dwpe: float under mixed precision) are defines.
#include "common.cuh"

typedef Pack<floatX> PackX;

#define PIECE 8                    // columns a thread carries
#define COLUMNS (32 * PIECE)       // columns a warp carries: blockIdx.y picks which
#define LIGHT_MAX 32               // positions a token may have for embedding_dwte's one-warp path
#define LIGHT_WARPS 8              // embedding_dwte: tokens a block
#define HEAVY_WARPS 32             // embedding_dwte_heavy: warps sharing one token's positions
#define ORDER_THREADS 1024         // embedding_order: threads a block, 8 positions each a pass
#define ROWS_AHEAD 4               // rows loaded before any is added

// 8 columns of a row from column c, as floats (columns at or past C read as 0)
template <typename T> __device__ __forceinline__ void load_piece(float out[PIECE], const T* row, int c, int C, bool vec) {
    if (vec) {
#pragma unroll
        for (int k = 0; k < PIECE; k += Pack<T>::N) {
            const Pack<T> p = load_pack(row + c + k);
#pragma unroll
            for (int j = 0; j < Pack<T>::N; j++) out[k + j] = to_f32(p.v[j]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < PIECE; k++) out[k] = c + k < C ? to_f32(row[c + k]) : 0.0f;
    }
}

template <typename T> __device__ __forceinline__ void store_piece(T* row, int c, int C, bool vec, const float v[PIECE]) {
    if (vec) {
#pragma unroll
        for (int k = 0; k < PIECE; k += Pack<T>::N) {
            Pack<T> p;
#pragma unroll
            for (int j = 0; j < Pack<T>::N; j++) p.v[j] = from_f32<T>(v[k + j]);
            store_pack(row + c + k, p);
        }
    } else {
#pragma unroll
        for (int k = 0; k < PIECE; k++)
            if (c + k < C) row[c + k] = from_f32<T>(v[k]);
    }
}

// acc += dout[rows[0]], ..., dout[rows[k - 1]] (k <= ROWS_AHEAD), in that order; all k loads first
__device__ __forceinline__ void add_rows(float acc[PIECE], const floatX* __restrict__ dout, const int rows[ROWS_AHEAD],
                                         int k, int c, int C, bool vec) {
    float piece[ROWS_AHEAD][PIECE];
#pragma unroll
    for (int r = 0; r < ROWS_AHEAD; r++)
        if (r < k) load_piece(piece[r], dout + (long long)rows[r] * C, c, C, vec);
#pragma unroll
    for (int r = 0; r < ROWS_AHEAD; r++)
        if (r < k)
#pragma unroll
            for (int j = 0; j < PIECE; j++) acc[j] += piece[r][j];
}

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


// grid cdiv(T * cdiv(C, PIECE), 256), block 256: thread (t, piece) adds dout[b*T + t] for b in order
extern "C" __global__ void __launch_bounds__(256, 4) embedding_dwpe(const floatX* __restrict__ dout, gradT* __restrict__ dwpe,
                                          int B, int T, int C, int vec) {
    const int pieces = (C + PIECE - 1) / PIECE;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * pieces) return;
    const int t = (int)(i / pieces), c = (int)(i % pieces) * PIECE;
    float acc[PIECE];
    load_piece(acc, dwpe + (long long)t * C, c, C, vec);
    for (int b = 0; b < B; b += ROWS_AHEAD) {
        int rows[ROWS_AHEAD];
#pragma unroll
        for (int r = 0; r < ROWS_AHEAD; r++) rows[r] = (b + r) * T + t;
        add_rows(acc, dout, rows, min(ROWS_AHEAD, B - b), c, C, vec);
    }
    store_piece(dwpe + (long long)t * C, c, C, vec, acc);
}

// grid cdiv(N, 256), block 256; count zeroed by the caller
extern "C" __global__ void embedding_count(const int* __restrict__ tokens, int* __restrict__ count, int N, int V) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N && tokens[n] >= 0 && tokens[n] < V) atomicAdd(count + tokens[n], 1);  // bad ids: no gradient
}

// grid 1, block 1024: offsets[v] = sum_{u < v} count[u], for v < Vp (count and offsets hold Vp, a
// multiple of 4, entries; count's past V are 0). Thread i scans its own contiguous segment of count,
// four entries a load (the loads of a segment are independent, so they are in flight together);
// the segment totals are scanned across the block (warp shuffles, then warps).
extern "C" __global__ void embedding_offsets(const int* __restrict__ count, int* __restrict__ offsets, int Vp) {
    __shared__ int warp_totals[32];
    const int per = ((Vp + blockDim.x - 1) / blockDim.x + 3) / 4 * 4;
    const int lo = min(Vp, (int)threadIdx.x * per), hi = min(Vp, lo + per);
    int total = 0;
#pragma unroll 4
    for (int v = lo; v < hi; v += 4) {
        const Quad<int> q = *reinterpret_cast<const Quad<int>*>(count + v);
        total += q.v[0] + q.v[1] + q.v[2] + q.v[3];
    }
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
#pragma unroll 4
    for (int v = lo; v < hi; v += 4) {
        const Quad<int> q = *reinterpret_cast<const Quad<int>*>(count + v);
        Quad<int> o;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            o.v[k] = running;
            running += q.v[k];
        }
        *reinterpret_cast<Quad<int>*>(offsets + v) = o;
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

// grid (cdiv(V, LIGHT_WARPS), cdiv(C, COLUMNS)), block 32 * LIGHT_WARPS: warp w takes token
// blockIdx.x * LIGHT_WARPS + w and columns from blockIdx.y * COLUMNS; heavy_count zeroed by the caller
extern "C" __global__ void __launch_bounds__(32 * LIGHT_WARPS, 4) embedding_dwte(const int* __restrict__ count, const int* __restrict__ offsets,
                                          const int* __restrict__ bucket, const floatX* __restrict__ dout,
                                          gradT* __restrict__ dwte, int* __restrict__ heavy,
                                          int* __restrict__ heavy_count, int V, int C, int vec) {
    __shared__ int ordered[LIGHT_WARPS][LIGHT_MAX];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int v = blockIdx.x * LIGHT_WARPS + warp;
    if (v >= V) return;  // whole warps leave together (the kernel has no block barrier)
    const int L = count[v];
    if (L == 0) return;
    if (L > LIGHT_MAX) {
        if (blockIdx.y == 0 && lane == 0) heavy[atomicAdd(heavy_count, 1)] = v;
        return;
    }
    const int c = blockIdx.y * COLUMNS + lane * PIECE;
    float acc[PIECE];
    if (c < C) load_piece(acc, dwte + (long long)v * C, c, C, vec);
    const int n = lane < L ? bucket[offsets[v] + lane] : 0x7fffffff;
    int rank = 0;  // how many of the bucket's positions come before mine
#pragma unroll
    for (int m = 1; m < 32; m++) rank += __shfl_xor_sync(0xffffffffu, n, m) < n;
    if (lane < L) ordered[warp][rank] = n;
    __syncwarp();
    if (c >= C) return;
    for (int i = 0; i < L; i += ROWS_AHEAD) {
        int rows[ROWS_AHEAD];
#pragma unroll
        for (int r = 0; r < ROWS_AHEAD; r++) rows[r] = ordered[warp][min(i + r, L - 1)];
        add_rows(acc, dout, rows, min(ROWS_AHEAD, L - i), c, C, vec);
    }
    store_piece(dwte + (long long)v * C, c, C, vec, acc);
}

// grid heavy_cap, block ORDER_THREADS: block x rewrites the x-th listed token's bucket (if there is
// one) in position order. Each pass takes 8 * ORDER_THREADS positions, thread t the 8 from
// 8t: it counts its hits, the block's exclusive scan of the counts is where its hits go.
extern "C" __global__ void __launch_bounds__(ORDER_THREADS) embedding_order(
        const int* __restrict__ tokens, const int* __restrict__ heavy, const int* __restrict__ heavy_count,
        const int* __restrict__ offsets, int* __restrict__ bucket, int N) {
    __shared__ int warp_totals[32];
    if ((int)blockIdx.x >= *heavy_count) return;  // the whole block leaves together
    const int v = heavy[blockIdx.x];
    int* ordered = bucket + offsets[v];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int placed = 0;  // hits of the passes before this one
    for (int n0 = 0; n0 < N; n0 += 8 * ORDER_THREADS) {
        const int first = n0 + 8 * threadIdx.x;
        bool hit[8];
        int mine = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            hit[k] = first + k < N && tokens[first + k] == v;
            mine += hit[k];
        }
        int incl = mine;  // inclusive scan of the counts: within the warp, then across warps
        for (int d = 1; d < 32; d <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += up;
        }
        if (lane == 31) warp_totals[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            int w = warp_totals[lane];  // ORDER_THREADS / 32 == 32 warps
            for (int d = 1; d < 32; d <<= 1) {
                const int up = __shfl_up_sync(0xffffffffu, w, d);
                if (lane >= d) w += up;
            }
            warp_totals[lane] = w;
        }
        __syncthreads();
        int at = placed + incl - mine + (warp ? warp_totals[warp - 1] : 0);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (hit[k]) ordered[at++] = first + k;
        placed += warp_totals[31];
        __syncthreads();  // warp_totals is rewritten by the next pass
    }
}

// grid (heavy_cap, cdiv(C, COLUMNS)), block 32 * HEAVY_WARPS: block x takes the x-th listed token
// (if there is one), whose bucket embedding_order has put in position order; warp w sums the w-th
// of HEAVY_WARPS consecutive slices of it
extern "C" __global__ void __launch_bounds__(32 * HEAVY_WARPS) embedding_dwte_heavy(const int* __restrict__ count, const int* __restrict__ offsets,
                                                const int* __restrict__ bucket, const int* __restrict__ heavy,
                                                const int* __restrict__ heavy_count, const floatX* __restrict__ dout,
                                                gradT* __restrict__ dwte, int C, int vec) {
    __shared__ float partial[HEAVY_WARPS][COLUMNS];
    if ((int)blockIdx.x >= *heavy_count) return;  // the whole block leaves together
    const int v = heavy[blockIdx.x], L = count[v];
    const int* ordered = bucket + offsets[v];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c = blockIdx.y * COLUMNS + lane * PIECE;
    const int span = (L + HEAVY_WARPS - 1) / HEAVY_WARPS;
    const int lo = min(L, warp * span), hi = min(L, lo + span);
    float acc[PIECE];
#pragma unroll
    for (int j = 0; j < PIECE; j++) acc[j] = 0.0f;
    if (c < C)
        for (int i = lo; i < hi; i += ROWS_AHEAD) {
            int rows[ROWS_AHEAD];
#pragma unroll
            for (int r = 0; r < ROWS_AHEAD; r++) rows[r] = ordered[min(i + r, hi - 1)];
            add_rows(acc, dout, rows, min(ROWS_AHEAD, hi - i), c, C, vec);
        }
#pragma unroll
    for (int j = 0; j < PIECE; j++) partial[warp][lane * PIECE + j] = acc[j];
    __syncthreads();
    const int col = blockIdx.y * COLUMNS + threadIdx.x;
    if (threadIdx.x < COLUMNS && col < C) {
        float s = to_f32(dwte[(long long)v * C + col]);
        for (int w = 0; w < HEAVY_WARPS; w++) s += partial[w][threadIdx.x];
        dwte[(long long)v * C + col] = from_f32<gradT>(s);
    }
}
