// embedding.cu: token + position embedding, forward and backward (one variant, "gather").
//
//   out[n, c] = wte[tokens[n], c] + wpe[n % T, c]                         n = b*T + t < N = B*T
//   dwpe[t, c] += sum_b dout[b*T + t, c]         dwte[v, c] += sum_{n: tokens[n] = v} dout[n, c]
//
// Forward: a grid-stride loop of 16-byte packs (vec = 1: C a multiple of a pack, pointers aligned).
//
// Backward: rows are read and written in pieces of 8 consecutive columns (one or two 16-byte packs
// when VEC: C a multiple of 8, every pointer aligned; else element by element). VEC is a define, not
// an argument as in the forward: the element-by-element path would cost the kernels registers (and
// so warps resident) even where it is never taken.
//
// dwpe: one thread per (t, piece), summing over b in order.
// dwte: a scatter-add (many positions may hold one token). Float atomics would make the sums depend
// on the order threads arrive in, and a sort (CUB/thrust) cannot go into a captured CUDA graph from
// CuPy, so every sum is taken in increasing position order, found as follows:
//   embedding_count     count[tokens[n]] += 1 (integer atomics: exact; the lanes of a warp that
//                       hold one token add once, so a token at 40% of the positions is not 40% of
//                       the atomics on one address)
//   embedding_plan      a scan of count in order of v (embedding_plan_groups sums each group of
//                       4,096 tokens first): offsets (where each token's bucket starts), and three
//                       lists, in order of v: the light tokens (1 to LIGHT_MAX positions), the
//                       heavy ones (more), and the heavy ones' slices of at most SLICE_ROWS positions
//   embedding_bucket    bucket[offsets[v] + cursor[v]++] = n  (order within a bucket arbitrary)
//   embedding_dwte      one warp per light token, all C columns (3 pieces a lane, 768 columns a
//                       pass): lane i holds the i-th position of the bucket, its rank among the
//                       bucket's positions is counted with 31 shuffles, the positions are placed by
//                       rank, and dwte[v] += dout[n] over them in that order
//   embedding_order     one block per heavy token: its bucket rewritten in position order, by ranks
//                       (a thread a position, counting the bucket's smaller positions) for up to
//                       256 positions, else by walking all N positions (an ordered compaction: each
//                       thread counts its positions' hits, a block-wide scan says where they go)
//   embedding_dwte_heavy one block per slice: its 8 warps sum 1/8 of the slice's positions each,
//                       the partials added in warp order; a token of one slice adds the result to
//                       dwte, else it goes to `scratch` and the token's last slice to finish (a
//                       ticket) adds the token's slices to dwte in slice order, the same way
// Each step's order is fixed by the tokens alone, so the result is bitwise repeatable. A warp per
// token (not a block, and not 3 blocks of 256 columns) because the cost is each token's chain of
// dependent loads (its list entry, bucket, then rows), not bytes; slices because one warp, or one
// block, summing the 12,000 positions of a space token (40% of the GPT-2 tokens of Python source)
// is a chain that long.
// floatX (wte, wpe, out, dout) and gradT (dwte, dwpe: float under mixed precision) are defines.
// The lists are int arrays of 4 ints an entry, read and written as Quad<int>.
#include "common.cuh"

typedef Pack<floatX> PackX;

#define PIECE 8                    // columns a thread carries (dwpe)
#define STRIP 3                    // pieces a lane carries (dwte): a warp's pass is STRIP_COLUMNS
#define STRIP_COLUMNS (STRIP * 32 * PIECE)
#define LIGHT_MAX 32               // positions a token may have for embedding_dwte's one-warp path
#define LIGHT_WARPS 8              // embedding_dwte: tokens a block
#define SLICE_ROWS 128             // positions a slice of a heavy token holds at most
#define HEAVY_WARPS 8              // embedding_dwte_heavy: warps sharing one slice
#define PLAN_THREADS 1024          // embedding_plan: threads (4 tokens each a pass)
#define ORDER_THREADS 1024         // embedding_order: threads (ORDER_PER positions each a pass)
#define ORDER_PER 16
#define RANK_MAX 256               // embedding_order ranks a bucket of up to this many positions (L^2
                                   // compares: 1,024 would cost more than a walk of 16,384 ids), else walks
#define DWPE_AHEAD 4               // embedding_dwpe: rows in flight a thread
#define HEAVY_AHEAD 4              // embedding_dwte_heavy: rows of dout in flight a warp (of the
                                   // float scratch, half as many)
// VEC and LIGHT_AHEAD are the launcher's defines: VEC as above; LIGHT_AHEAD the rows embedding_dwte
// has in flight a warp (each costs a lane ~28 registers, so it is traded against warps resident)

// 8 columns of a row from column c, as floats (columns at or past C read as 0); FROM_L2: by L2 only
// (common.cuh), for rows other blocks wrote during this kernel
template <bool FROM_L2 = false, typename T>
__device__ __forceinline__ void load_piece(float out[PIECE], const T* row, int c, int C, bool vec) {
    if (vec) {
#pragma unroll
        for (int k = 0; k < PIECE; k += Pack<T>::N) {
            const Pack<T> p = FROM_L2 ? load_pack_by<CACHE_GLOBAL>(row + c + k) : load_pack(row + c + k);
#pragma unroll
            for (int j = 0; j < Pack<T>::N; j++) out[k + j] = to_f32(p.v[j]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < PIECE; k++) out[k] = c + k < C ? to_f32(FROM_L2 ? load_l2(row + c + k) : row[c + k]) : 0.0f;
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

// A lane's strip of a row in one pass: pieces at columns pass + 256 j + 8 lane, j < STRIP (each j
// a warp-wide 256 consecutive columns); the pieces at or past C are zeros and never stored.
struct Strip {
    float v[STRIP][PIECE];
};

template <bool FROM_L2 = false, typename T>
__device__ __forceinline__ void load_strip(Strip& s, const T* row, int pass, int lane, int C, bool vec) {
#pragma unroll
    for (int j = 0; j < STRIP; j++) {
        const int c = pass + j * 32 * PIECE + lane * PIECE;
        if (c < C) {
            load_piece<FROM_L2>(s.v[j], row, c, C, vec);
        } else {
#pragma unroll
            for (int k = 0; k < PIECE; k++) s.v[j][k] = 0.0f;
        }
    }
}

template <typename T> __device__ __forceinline__ void store_strip(T* row, int pass, int lane, int C, bool vec, const Strip& s) {
#pragma unroll
    for (int j = 0; j < STRIP; j++) {
        const int c = pass + j * 32 * PIECE + lane * PIECE;
        if (c < C) store_piece(row, c, C, vec, s.v[j]);
    }
}

// acc += src[rows[0]], ..., src[rows[k - 1]] (rows of C elements; k <= AHEAD), in that order. With
// vec, all k rows are loaded before any is added, and held as loaded (a bf16 piece is one 16-byte
// pack: 4 registers, not 8 floats); else element by element, a row at a time. FROM_L2: as load_piece.
template <int AHEAD, bool FROM_L2 = false, typename T>
__device__ __forceinline__ void add_rows(Strip& acc, const T* __restrict__ src, const int rows[AHEAD], int k,
                                         int pass, int lane, int C, bool vec) {
    constexpr int N = Pack<T>::N, PACKS = PIECE / N;  // packs a piece
    if (vec) {
        Pack<T> raw[AHEAD][STRIP][PACKS];
#pragma unroll
        for (int r = 0; r < AHEAD; r++)
#pragma unroll
            for (int j = 0; j < STRIP; j++) {
                const int c = pass + j * 32 * PIECE + lane * PIECE;
                if (r < k && c < C)
#pragma unroll
                    for (int q = 0; q < PACKS; q++) {
                        const T* at = src + (long long)rows[r] * C + c + q * N;
                        raw[r][j][q] = FROM_L2 ? load_pack_by<CACHE_GLOBAL>(at) : load_pack(at);
                    }
            }
#pragma unroll
        for (int r = 0; r < AHEAD; r++)
#pragma unroll
            for (int j = 0; j < STRIP; j++)
                if (r < k && pass + j * 32 * PIECE + lane * PIECE < C)
#pragma unroll
                    for (int q = 0; q < PACKS; q++)
#pragma unroll
                        for (int e = 0; e < N; e++) acc.v[j][q * N + e] += to_f32(raw[r][j][q].v[e]);
    } else {
        for (int r = 0; r < k; r++) {
            Strip row;
            load_strip<FROM_L2>(row, src + (long long)rows[r] * C, pass, lane, C, false);
#pragma unroll
            for (int j = 0; j < STRIP; j++)
#pragma unroll
                for (int e = 0; e < PIECE; e++) acc.v[j][e] += row.v[j][e];
        }
    }
}

// acc += src[index(lo)], ..., src[index(hi - 1)] in that order, AHEAD rows loaded at a time, where
// index(i) = list[i], or i where list is null
template <int AHEAD, bool FROM_L2 = false, typename T>
__device__ __forceinline__ void add_listed_rows(Strip& acc, const T* __restrict__ src, const int* list, int lo,
                                                int hi, int pass, int lane, int C, bool vec) {
#pragma unroll 1  // AHEAD rows in flight is the design: more would cost registers (occupancy)
    for (int i = lo; i < hi; i += AHEAD) {
        int rows[AHEAD];
#pragma unroll
        for (int r = 0; r < AHEAD; r++) rows[r] = list ? list[min(i + r, hi - 1)] : min(i + r, hi - 1);
        add_rows<AHEAD, FROM_L2>(acc, src, rows, min(AHEAD, hi - i), pass, lane, C, vec);
    }
}

// The block's sum, in order, of rows index(lo), ..., index(hi - 1) of src (as add_listed_rows), for
// this pass's columns: warp w sums the w-th of HEAVY_WARPS consecutive runs of the rows, and
// partial[w] holds its sum when this returns; block_sum(partial, i) adds them in warp order.
template <int AHEAD, bool FROM_L2, typename T>
__device__ __forceinline__ void warp_sums(float (*partial)[STRIP_COLUMNS], const T* __restrict__ src, const int* list,
                                          int lo, int hi, int pass, int C, bool vec) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int span = (hi - lo + HEAVY_WARPS - 1) / HEAVY_WARPS;
    const int my_lo = min(hi, lo + warp * span), my_hi = min(hi, my_lo + span);
    Strip acc;
#pragma unroll
    for (int j = 0; j < STRIP; j++)
#pragma unroll
        for (int e = 0; e < PIECE; e++) acc.v[j][e] = 0.0f;
    add_listed_rows<AHEAD, FROM_L2>(acc, src, list, my_lo, my_hi, pass, lane, C, vec);
#pragma unroll
    for (int j = 0; j < STRIP; j++)
#pragma unroll
        for (int e = 0; e < PIECE; e++) partial[warp][j * 32 * PIECE + lane * PIECE + e] = acc.v[j][e];
    __syncthreads();
}

__device__ __forceinline__ float block_sum(const float (*partial)[STRIP_COLUMNS], int i) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < HEAVY_WARPS; w++) sum += partial[w][i];
    return sum;
}

// The exclusive prefix of each of x's K counters over the block's threads (in thread order), and
// their totals over the block. warp_totals: 32 x K ints of shared memory, free again on return.
// Every thread of the block calls it.
template <int K>
__device__ __forceinline__ void block_exclusive_scan(const int (&x)[K], int (&excl)[K], int (&total)[K],
                                                     int (*warp_totals)[K]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int incl[K];  // inclusive within the warp
#pragma unroll
    for (int q = 0; q < K; q++) incl[q] = x[q];
    for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
        for (int q = 0; q < K; q++) {
            const int up = __shfl_up_sync(0xffffffffu, incl[q], d);
            if (lane >= d) incl[q] += up;
        }
    }
    if (lane == 31)
#pragma unroll
        for (int q = 0; q < K; q++) warp_totals[warp][q] = incl[q];
    __syncthreads();
    if (warp == 0) {  // inclusive over the warps
        int w[K];
#pragma unroll
        for (int q = 0; q < K; q++) w[q] = lane < warps ? warp_totals[lane][q] : 0;
        for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
            for (int q = 0; q < K; q++) {
                const int up = __shfl_up_sync(0xffffffffu, w[q], d);
                if (lane >= d) w[q] += up;
            }
        }
#pragma unroll
        for (int q = 0; q < K; q++) warp_totals[lane][q] = w[q];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < K; q++) {
        excl[q] = incl[q] - x[q] + (warp ? warp_totals[warp - 1][q] : 0);
        total[q] = warp_totals[warps - 1][q];
    }
    __syncthreads();  // warp_totals may be rewritten by the next call
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


// grid cdiv(T * cdiv(C, PIECE), 256), block 256: thread (t, piece) adds dout[b*T + t] for b in order,
// DWPE_AHEAD rows loaded (as packs) before they are added
extern "C" __global__ void __launch_bounds__(256) embedding_dwpe(const floatX* __restrict__ dout, gradT* __restrict__ dwpe,
                                                                 int B, int T, int C) {
    constexpr bool vec = VEC;
    constexpr int PACKS = PIECE / PackX::N;
    const int pieces = (C + PIECE - 1) / PIECE;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * pieces) return;
    const int t = (int)(i / pieces), c = (int)(i % pieces) * PIECE;
    float acc[PIECE];
    load_piece(acc, dwpe + (long long)t * C, c, C, vec);
    for (int b = 0; b < B; b += DWPE_AHEAD) {
        if (vec) {
            PackX raw[DWPE_AHEAD][PACKS];
#pragma unroll
            for (int r = 0; r < DWPE_AHEAD; r++)
                if (b + r < B)
#pragma unroll
                    for (int q = 0; q < PACKS; q++) raw[r][q] = load_pack(dout + ((long long)(b + r) * T + t) * C + c + q * PackX::N);
#pragma unroll
            for (int r = 0; r < DWPE_AHEAD; r++)
                if (b + r < B)
#pragma unroll
                    for (int q = 0; q < PACKS; q++)
#pragma unroll
                        for (int e = 0; e < PackX::N; e++) acc[q * PackX::N + e] += to_f32(raw[r][q].v[e]);
        } else {
            for (int r = 0; r < DWPE_AHEAD && b + r < B; r++) {
                float row[PIECE];
                load_piece(row, dout + ((long long)(b + r) * T + t) * C, c, C, false);
#pragma unroll
                for (int e = 0; e < PIECE; e++) acc[e] += row[e];
            }
        }
    }
    store_piece(dwpe + (long long)t * C, c, C, vec, acc);
}

// grid cdiv(N, 256), block 256; count zeroed by the caller. Lanes holding one token add once.
extern "C" __global__ void embedding_count(const int* __restrict__ tokens, int* __restrict__ count, int N, int V) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    const int tok = n < N && tokens[n] >= 0 && tokens[n] < V ? tokens[n] : -1;  // bad ids: no gradient
    const unsigned peers = __match_any_sync(0xffffffffu, tok);
    if (tok >= 0 && lane == __ffs(peers) - 1) atomicAdd(count + tok, __popc(peers));
}

// The four counters of embedding_plan for 4 consecutive tokens held by L positions each: positions,
// light tokens, heavy tokens, slices.
__device__ __forceinline__ void plan_counts(const Quad<int>& L, int (&c)[4]) {
#pragma unroll
    for (int q = 0; q < 4; q++) c[q] = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int big = L.v[k] > LIGHT_MAX;
        c[0] += L.v[k];
        c[1] += L.v[k] > 0 && !big;
        c[2] += big;
        c[3] += big ? (L.v[k] + SLICE_ROWS - 1) / SLICE_ROWS : 0;
    }
}

// count holds Vp entries (a multiple of 4; those past V are 0). Group g: the 4 * PLAN_THREADS
// tokens from 4 * PLAN_THREADS * g, thread i's 4 from 4i within it.
__device__ __forceinline__ Quad<int> group_counts(const int* __restrict__ count, int Vp) {
    const int v0 = (blockIdx.x * PLAN_THREADS + threadIdx.x) * 4;
    return v0 < Vp ? *reinterpret_cast<const Quad<int>*>(count + v0) : Quad<int>{{0, 0, 0, 0}};
}

// grid G = cdiv(Vp, 4 * PLAN_THREADS), block PLAN_THREADS: groups[g] = group g's four counters
extern "C" __global__ void __launch_bounds__(PLAN_THREADS) embedding_plan_groups(
        const int* __restrict__ count, int* __restrict__ group_ints, int Vp) {
    __shared__ int warp_totals[32][4];
    int mine[4], excl[4], total[4];
    plan_counts(group_counts(count, Vp), mine);
    block_exclusive_scan<4>(mine, excl, total, warp_totals);
    if (threadIdx.x == 0) reinterpret_cast<Quad<int>*>(group_ints)[blockIdx.x] = Quad<int>{{total[0], total[1], total[2], total[3]}};
}

// grid G, block PLAN_THREADS, after embedding_plan_groups. In order of v (group g starts from the
// sums of the groups before it):
//   offsets[v] = sum_{u < v} count[u]
//   light[l] = {v, offsets[v], count[v]}             for tokens at 1 to LIGHT_MAX positions
//   heavy[h] = {v, offsets[v], count[v], first slice} for tokens at more
//   slices[s] = {h, lo, hi}: heavy token h's positions lo to hi of its bucket, SLICE_ROWS at most
//   totals = {light tokens, heavy tokens, slices}    (by the last group)
extern "C" __global__ void __launch_bounds__(PLAN_THREADS) embedding_plan(
        const int* __restrict__ count, const int* __restrict__ group_ints, int* __restrict__ offsets,
        int* __restrict__ light_ints, int* __restrict__ heavy_ints, int* __restrict__ slice_ints,
        int* __restrict__ totals, int Vp) {
    __shared__ int warp_totals[32][4];
    const Quad<int>* groups = reinterpret_cast<const Quad<int>*>(group_ints);
    Quad<int>* light = reinterpret_cast<Quad<int>*>(light_ints);  // the lists' entries: 4 ints each
    Quad<int>* heavy = reinterpret_cast<Quad<int>*>(heavy_ints);
    Quad<int>* slices = reinterpret_cast<Quad<int>*>(slice_ints);
    int before[4] = {0, 0, 0, 0};  // positions, light, heavy, slices of the groups before this one
    for (int g = 0; g < (int)blockIdx.x; g++)
#pragma unroll
        for (int q = 0; q < 4; q++) before[q] += groups[g].v[q];
    const Quad<int> L = group_counts(count, Vp);
    int mine[4], at[4], total[4];
    plan_counts(L, mine);
    block_exclusive_scan<4>(mine, at, total, warp_totals);
#pragma unroll
    for (int q = 0; q < 4; q++) at[q] += before[q];
    const int v0 = (blockIdx.x * PLAN_THREADS + threadIdx.x) * 4;
    if (v0 < Vp) {
        Quad<int> off;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int v = v0 + k, n = L.v[k];
            off.v[k] = at[0];
            if (n > LIGHT_MAX) {
                heavy[at[2]] = Quad<int>{{v, at[0], n, at[3]}};
                for (int lo = 0; lo < n; lo += SLICE_ROWS) slices[at[3]++] = Quad<int>{{at[2], lo, min(n, lo + SLICE_ROWS), 0}};
                at[2]++;
            } else if (n > 0) {
                light[at[1]++] = Quad<int>{{v, at[0], n, 0}};
            }
            at[0] += n;
        }
        *reinterpret_cast<Quad<int>*>(offsets + v0) = off;
    }
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        totals[0] = before[1] + total[1];
        totals[1] = before[2] + total[2];
        totals[2] = before[3] + total[3];
    }
}

// grid cdiv(N, 256), block 256; cursor zeroed by the caller. Lanes holding one token take their
// places with one atomic.
extern "C" __global__ void embedding_bucket(const int* __restrict__ tokens, const int* __restrict__ offsets,
                                            int* __restrict__ cursor, int* __restrict__ bucket, int N, int V) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    const int tok = n < N && tokens[n] >= 0 && tokens[n] < V ? tokens[n] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, tok);
    const int leader = __ffs(peers) - 1;
    int first = 0;
    if (tok >= 0 && lane == leader) first = atomicAdd(cursor + tok, __popc(peers));
    first = __shfl_sync(0xffffffffu, first, leader);
    if (tok >= 0) bucket[offsets[tok] + first + __popc(peers & ((1u << lane) - 1))] = n;
}

// grid cdiv(light_cap, LIGHT_WARPS), block 32 * LIGHT_WARPS: warp w takes the light token
// blockIdx.x * LIGHT_WARPS + w, if there is one
extern "C" __global__ void __launch_bounds__(32 * LIGHT_WARPS) embedding_dwte(
        const int* __restrict__ light_ints, const int* __restrict__ totals, const int* __restrict__ bucket,
        const floatX* __restrict__ dout, gradT* __restrict__ dwte, int C) {
    constexpr bool vec = VEC;
    __shared__ int ordered[LIGHT_WARPS][LIGHT_MAX];
    const Quad<int>* light = reinterpret_cast<const Quad<int>*>(light_ints);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int task = blockIdx.x * LIGHT_WARPS + warp;
    if (task >= totals[0]) return;  // whole warps leave together (the kernel has no block barrier)
    const Quad<int> t = light[task];
    const int v = t.v[0], L = t.v[2];
    const int n = lane < L ? bucket[t.v[1] + lane] : 0x7fffffff;
    int rank = 0;  // how many of the bucket's positions come before mine
#pragma unroll
    for (int m = 1; m < 32; m++) rank += __shfl_xor_sync(0xffffffffu, n, m) < n;
    if (lane < L) ordered[warp][rank] = n;
    __syncwarp();
    for (int pass = 0; pass < C; pass += STRIP_COLUMNS) {
        Strip acc;
        load_strip(acc, dwte + (long long)v * C, pass, lane, C, vec);
        add_listed_rows<LIGHT_AHEAD>(acc, dout, ordered[warp], 0, L, pass, lane, C, vec);
        store_strip(dwte + (long long)v * C, pass, lane, C, vec, acc);
    }
}

// grid <= heavy_cap, block ORDER_THREADS: block x rewrites the buckets of heavy tokens x, x + grid,
// ... in position order: a bucket of at most RANK_MAX positions by their ranks (O(L^2) compares
// over the block, no walk of all N), a larger one by walking the positions: a pass takes
// ORDER_PER * ORDER_THREADS of them, thread t the ORDER_PER from ORDER_PER t; it counts its hits,
// and the block's exclusive scan of the counts is where they go.
extern "C" __global__ void __launch_bounds__(ORDER_THREADS) embedding_order(
        const int* __restrict__ tokens, const int* __restrict__ heavy_ints, const int* __restrict__ totals,
        int* __restrict__ bucket, int N) {
    __shared__ int warp_totals[32][1];
    __shared__ int held[RANK_MAX];
    const Quad<int>* heavy = reinterpret_cast<const Quad<int>*>(heavy_ints);
    const int per_pass = ORDER_PER * ORDER_THREADS;
    for (int h = blockIdx.x; h < totals[1]; h += gridDim.x) {  // the same h for the whole block
        const int v = heavy[h].v[0], L = heavy[h].v[2];
        int* ordered = bucket + heavy[h].v[1];
        if (L <= RANK_MAX) {  // few enough to rank: thread i's position goes after the bucket's smaller ones
            const int n = threadIdx.x < L ? ordered[threadIdx.x] : 0;
            __syncthreads();  // held is free (the previous token's ranks are all taken)
            if (threadIdx.x < L) held[threadIdx.x] = n;
            __syncthreads();
            if (threadIdx.x < L) {
                int rank = 0;
                for (int i = 0; i < L; i++) rank += held[i] < n;
                ordered[rank] = n;
            }
            continue;
        }
        int placed = 0;  // hits of the passes before this one
        for (int n0 = 0; n0 < N; n0 += per_pass) {
            const int first = n0 + ORDER_PER * threadIdx.x;
            bool hit[ORDER_PER];
            int mine[1] = {0}, at[1], total[1];
#pragma unroll
            for (int k = 0; k < ORDER_PER; k++) {
                hit[k] = first + k < N && tokens[first + k] == v;
                mine[0] += hit[k];
            }
            block_exclusive_scan<1>(mine, at, total, warp_totals);
            at[0] += placed;
#pragma unroll
            for (int k = 0; k < ORDER_PER; k++)
                if (hit[k]) ordered[at[0]++] = first + k;
            placed += total[0];
        }
    }
}

// grid <= slice_cap, block 32 * HEAVY_WARPS: block x takes slices x, x + grid, ... of the heavy
// tokens (buckets in position order by now); scratch holds slice_cap rows of C floats, tickets
// heavy_cap counters zeroed by the caller
extern "C" __global__ void __launch_bounds__(32 * HEAVY_WARPS) embedding_dwte_heavy(
        const int* __restrict__ heavy_ints, const int* __restrict__ slice_ints, const int* __restrict__ totals,
        const int* __restrict__ bucket, const floatX* __restrict__ dout, gradT* __restrict__ dwte,
        float* __restrict__ scratch, int* __restrict__ tickets, int C) {
    constexpr bool vec = VEC;
    __shared__ float partial[HEAVY_WARPS][STRIP_COLUMNS];
    __shared__ int last;
    const Quad<int>* heavy = reinterpret_cast<const Quad<int>*>(heavy_ints);
    const Quad<int>* slices = reinterpret_cast<const Quad<int>*>(slice_ints);
    for (int s = blockIdx.x; s < totals[2]; s += gridDim.x) {  // the same s for the whole block
        const Quad<int> sl = slices[s], tok = heavy[sl.v[0]];
        const int v = tok.v[0], n_slices = (tok.v[2] + SLICE_ROWS - 1) / SLICE_ROWS;
        gradT* row = dwte + (long long)v * C;
        for (int pass = 0; pass < C; pass += STRIP_COLUMNS) {
            warp_sums<HEAVY_AHEAD, false>(partial, dout, bucket + tok.v[1], sl.v[1], sl.v[2], pass, C, vec);
            for (int i = threadIdx.x; i < STRIP_COLUMNS && pass + i < C; i += blockDim.x) {
                if (n_slices == 1) {
                    row[pass + i] = from_f32<gradT>(to_f32(row[pass + i]) + block_sum(partial, i));
                } else {
                    scratch[(long long)s * C + pass + i] = block_sum(partial, i);
                }
            }
            __syncthreads();  // partial is rewritten by the next pass
        }
        if (n_slices == 1) continue;
        __threadfence();  // this slice's scratch row is visible to every block before its ticket counts
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(tickets + sl.v[0], 1) == n_slices - 1;
        __syncthreads();
        if (last) {  // every slice of the token is in scratch: dwte[v] += their sum, in slice order
            __threadfence();
            for (int pass = 0; pass < C; pass += STRIP_COLUMNS) {
                warp_sums<HEAVY_AHEAD / 2, true>(partial, scratch, nullptr, tok.v[3], tok.v[3] + n_slices, pass, C, vec);
                for (int i = threadIdx.x; i < STRIP_COLUMNS && pass + i < C; i += blockDim.x)
                    row[pass + i] = from_f32<gradT>(to_f32(row[pass + i]) + block_sum(partial, i));
                __syncthreads();
            }
        }
        __syncthreads();  // `last` is rewritten by the next slice
    }
}
