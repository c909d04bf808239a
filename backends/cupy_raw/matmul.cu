// matmul.cu: the GEMMs of the cupy_raw matmul variants (launched by backends/cupy_raw/matmul.py).
//
// Every product of matmul's forward and backward is one GEMM
//
//     C[i, j] (+)= sum_k A(i, k) * B(j, k)          0 <= i < rows, 0 <= j < cols, 0 <= k < depth
//
// on operands stored row-major with a row stride (lda, ldb) in one of two "majors":
//     K-major    A(i, k) = a[i * lda + k]       each row of A is contiguous along k
//     MN-major   A(i, k) = a[k * lda + i]       A is stored transposed
// so that no product copies or transposes anything in memory:
//     forward  y  (N,M)  = x (N,K) @ W.T    A = x (K-major),               B(j, k) = W[j, k] (K-major)
//     dx       dx (N,K)  = dy (N,M) @ W     A = dy (K-major),              B(j, k) = W[k, j] (MN-major)
//     dW       dW (M,K) += dy.T @ x         A(i, k) = dy[k, i] (MN-major), B(j, k) = x[k, j] (MN-major)
//
// Kernel groups. A module is compiled with exactly one group's define set (and floatX, the storage type
// of A, B and the bias: float, __half or __nv_bfloat16), so it holds only the kernels it launches:
//
//   GEMM_SIMT    gemm_simt     CUDA cores, float32 FMA: a 64 x 64 tile of C per block of 256 threads,
//                              16 of k at a time in shared memory, 4 x 4 results per thread. The float32
//                              path (IEEE products, as the float32 contract asks) and the readable start.
//   GEMM_MMA     gemm_mma      what gemm_simt adds tensor cores to: mma.sync.m16n8k16 (bf16/fp16 in,
//                              float32 accumulators), MMA_BM x MMA_BN x 64 tiles in a MMA_STAGES-deep
//                              ring of shared memory filled by cp.async (16-byte copies that bypass the
//                              registers and overlap the math; zero-filled past the edges), read into
//                              fragments by ldmatrix (.trans for MN-major operands). Any shape: with
//                              ALIGNED 0 an element-wise loader fills the same tiles.
//   GEMM_WGMMA   gemm_wgmma    what Hopper adds: the tiles come by TMA (cp.async.bulk.tensor from tensor
//                              maps the host encodes, one instruction per tile, zero-filled past the
//                              edges) into the same swizzled layout; one producer warp keeps a
//                              WG_STAGES-deep ring full, synchronised by mbarriers (full: the bytes
//                              arrived; empty: both consumers are done with a slot), while two consumer
//                              warpgroups each multiply 64 x WG_BN of the tile with wgmma.mma_async
//                              straight from shared memory. Needs sm_90a, 16-byte-aligned rows, floatX 16-bit.
//   GEMM_REDUCE  splitk_finish    the ordered sum of split-K's float32 slices (+ bias, + the old C)
//                colsum_partial   bias gradient, pass 1: float32 column sums of row groups
//                colsum_finish    pass 2: the groups summed in order and added to db
//                Fixed summation orders, no atomics: every result is bitwise repeatable (so is
//                gemm_wgmma's FLAG_SERIAL, split-K without splitk_finish: below).
//
// Shared-memory tiles of gemm_mma and gemm_wgmma: matmul_layout.cuh (128-byte swizzled rows).
//
// Epilogue (every GEMM): gemm_mma and gemm_wgmma stage the float32 accumulators in shared memory and
// write them row by row, 4 columns per thread (gemm_wgmma 32 columns at a time, in a buffer of its
// own beside the ring, which is busy with the next tile by then; or, built with WG_STORE_COLS, it
// rounds them into an image there that TMA writes out: below); gemm_simt writes straight from its
// registers; all apply, in order: + bias[j]
// (FLAG_BIAS), the pre-activation stored to `pre` (FLAG_PRE), GELU (FLAG_GELU), + the old C
// (FLAG_ACCUMULATE), rounded to C's type (floatX, or float with FLAG_OUT_F32: mixed precision's float32
// parameter gradients). With FLAG_PARTIAL the raw sum goes to its k slice of the (slices, rows,
// cols) float32 split-K buffer instead. FLAG_VEC: cols % 4 == 0 and c, bias, pre 16-byte aligned.
// FLAG_DGELU (nothing else with it; one k slice): the GELU's backward, C = gelu'(pre) * sum, with pre
// read (the GELU's input, (rows, cols) like C): the MLP projection's dx written as d(c_fc's output),
// so that neither d(GELU output) nor a pass of gelu's backward over it is ever made. The arithmetic is
// the composition's: the sum rounded to floatX as the plain dx would store it, then gelu.cu's
// backward of that (common.cuh's gelu_tanh_backward), so the result is bitwise matmul then gelu.
// FLAG_RESIDUAL (with FLAG_BIAS or alone; one k slice): the residual add after a projection, C = residual +
// (sum + bias), with the residual stream read through the same pointer (`pre`: an (rows, cols) array of C's
// dtype): matmul_residual's forward, and the MLP's projection in mlp. The arithmetic is the
// composition's: the product rounded to floatX as matmul would store it, then added to the residual
// in float32 and rounded once, as residual.cu adds, so the result is bitwise matmul then residual.
// FLAG_SERIAL (gemm_wgmma with WG_STORE_F32, FLAG_ACCUMULATE, more than one k slice): each k slice is
// added to the float32 C by the copy engine's reduce-add, in slice order: slice s of a 64-row share of
// C waits until that share's counter in `chain` reads s, and sets it to s + 1 once its additions have
// completed (chain_wait, chain_release); the last slice sets it back to 0, so the counters the host
// zeroed once are zero again for the next call. Work items are numbered slice-major,
// so a slice's predecessor has the lower number: a persistent grid (every block resident) always has
// it running or done, and the wait chains end at slice 0. C = ((C + s0) + s1) + ...
// FLAG_ROWSUM (gemm_wgmma, A MN-major): the blocks of tile column 0 also sum A's rows over their k slice, one
// more wgmma per step (A @ ones), into rowsum[slice, i] (float32): dW's A is dy^T, so these are the
// bias gradient's column sums of dy, with no second pass over dy (colsum_finish adds the slices).
// gemm_wgmma built with WG_STORE_COLS > 0 (the host builds it so where C is floatX, whole,
// TMA-describable and nothing but the bias, GELU and pre with them is asked) writes C (and pre)
// through tensor maps by the copy engine instead of the threads' own stores (wgmma_store_epilogue),
// and has no other epilogue; built with WG_STORE_DGELU too, it is FLAG_DGELU's (the prefetch of pre
// into the image: PreFetch below), with WG_STORE_RESIDUAL FLAG_RESIDUAL's (the same prefetch, of the
// residual stream).
#include "common.cuh"
#include "tensor_core.cuh"
#include "matmul_layout.cuh"

#define FLAG_BIAS 1
#define FLAG_ACCUMULATE 2
#define FLAG_GELU 4
#define FLAG_PRE 8
#define FLAG_OUT_F32 16
#define FLAG_PARTIAL 32
#define FLAG_VEC 64
#define FLAG_ROWSUM 128
#define FLAG_DGELU 256
#define FLAG_SERIAL 512
#define FLAG_RESIDUAL 1024

// ---- the epilogue --------------------------------------------------------------------------------
struct Out {
    void* c;            // C: floatX or float (FLAG_OUT_F32), or the float32 split-K slices (FLAG_PARTIAL)
    const floatX* bias;      // (cols) with FLAG_BIAS
    floatX* pre;             // (rows, cols): written with FLAG_PRE; read with FLAG_DGELU (the GELU's input) or
                             // FLAG_RESIDUAL (the residual stream)
    int rows, cols, flags;
};

// The flags an epilogue function obeys: o.flags, read at run time (F = FLAGS_RUNTIME, the default),
// or a set F fixed at compile time, so that the branches of every other flag fold away. gemm_wgmma's
// epilogue is unrolled (its accumulators are registers, indexed by constants only): with the flags
// read at run time (b51b176) that was every flag's code 64 times over per tile, ~300 KB of branchy
// SASS, far past the instruction cache. It dispatches once per tile to a copy compiled for the flag
// set at hand instead (wgmma_epilogue).
#define FLAGS_RUNTIME (-1)
template <int F> __device__ __forceinline__ int epilogue_flags(const Out& o) { return F == FLAGS_RUNTIME ? o.flags : F; }

// C[i, j] from the accumulated sum v (everything but FLAG_PARTIAL's raw store).
template <int F = FLAGS_RUNTIME>
__device__ __forceinline__ float finish_value(const Out& o, size_t at, int j, float v) {
    const int flags = epilogue_flags<F>(o);
    if (flags & FLAG_BIAS) v += to_f32(o.bias[j]);
    if (flags & FLAG_PRE) {  // stored, and activated as stored (the composition's arithmetic)
        o.pre[at] = from_f32<floatX>(v);
        v = to_f32(o.pre[at]);
    }
    if (flags & FLAG_GELU) v = gelu_tanh(v);
    if (flags & FLAG_DGELU) v = gelu_tanh_backward(to_f32(o.pre[at]), to_f32(from_f32<floatX>(v)));
    if (flags & FLAG_RESIDUAL) v = to_f32(o.pre[at]) + to_f32(from_f32<floatX>(v));  // the product as stored
    return v;
}

template <int F = FLAGS_RUNTIME>
__device__ __forceinline__ void finish_one(const Out& o, int i, int j, int split, float v) {
    const int flags = epilogue_flags<F>(o);
    const size_t at = (size_t)i * o.cols + j;
    if (flags & FLAG_PARTIAL) {
        static_cast<float*>(o.c)[(size_t)split * o.rows * o.cols + at] = v;
        return;
    }
    v = finish_value<F>(o, at, j, v);
    if (flags & FLAG_OUT_F32) {
        float* c = static_cast<float*>(o.c);
        c[at] = (flags & FLAG_ACCUMULATE) ? c[at] + v : v;
    } else {
        floatX* c = static_cast<floatX*>(o.c);
        c[at] = from_f32<floatX>((flags & FLAG_ACCUMULATE) ? to_f32(c[at]) + v : v);
    }
}

// C[i, j..j+3] from v[0..3]; one vector load/store each where FLAG_VEC allows, else element by element.
__device__ __forceinline__ void finish_four(const Out& o, int i, int j, int split, const float (&v)[4]) {
    if (!(o.flags & FLAG_VEC) || j + 3 >= o.cols) {
        for (int e = 0; e < 4 && j + e < o.cols; ++e) finish_one(o, i, j + e, split, v[e]);
        return;
    }
    const size_t at = (size_t)i * o.cols + j;
    if (o.flags & FLAG_PARTIAL) {
        float* p = static_cast<float*>(o.c) + (size_t)split * o.rows * o.cols + at;
        *reinterpret_cast<Quad<float>*>(p) = Quad<float>{{v[0], v[1], v[2], v[3]}};
        return;
    }
    float w[4];
    Quad<floatX> b, pre, read_in;  // read_in: the GELU's input (FLAG_DGELU) or the residual (FLAG_RESIDUAL)
    if (o.flags & FLAG_BIAS) b = *reinterpret_cast<const Quad<floatX>*>(o.bias + j);
    if (o.flags & (FLAG_DGELU | FLAG_RESIDUAL)) read_in = *reinterpret_cast<const Quad<floatX>*>(o.pre + at);
    for (int e = 0; e < 4; ++e) {
        w[e] = v[e] + ((o.flags & FLAG_BIAS) ? to_f32(b.v[e]) : 0.0f);
        pre.v[e] = from_f32<floatX>(w[e]);
        if (o.flags & FLAG_PRE) w[e] = to_f32(pre.v[e]);  // activated as stored
        if (o.flags & FLAG_GELU) w[e] = gelu_tanh(w[e]);
        if (o.flags & FLAG_DGELU) w[e] = gelu_tanh_backward(to_f32(read_in.v[e]), to_f32(pre.v[e]));  // of dx as stored
        if (o.flags & FLAG_RESIDUAL) w[e] = to_f32(read_in.v[e]) + to_f32(pre.v[e]);  // of the product as stored
    }
    if (o.flags & FLAG_PRE) *reinterpret_cast<Quad<floatX>*>(o.pre + at) = pre;
    if (o.flags & FLAG_OUT_F32) {
        Quad<float>* c = reinterpret_cast<Quad<float>*>(static_cast<float*>(o.c) + at);
        Quad<float> r;
        if (o.flags & FLAG_ACCUMULATE) r = *c;
        for (int e = 0; e < 4; ++e) r.v[e] = (o.flags & FLAG_ACCUMULATE) ? r.v[e] + w[e] : w[e];
        *c = r;
    } else {
        Quad<floatX>* c = reinterpret_cast<Quad<floatX>*>(static_cast<floatX*>(o.c) + at);
        Quad<floatX> r;
        if (o.flags & FLAG_ACCUMULATE) r = *c;
        for (int e = 0; e < 4; ++e)
            r.v[e] = from_f32<floatX>((o.flags & FLAG_ACCUMULATE) ? to_f32(r.v[e]) + w[e] : w[e]);
        *c = r;
    }
}

// The staged tile (BM x BN floats, row stride BN + 8: the padding keeps the fragment stores free of
// bank conflicts) written out by THREADS threads, 4 consecutive columns each per step (coalesced).
template <int BM, int BN, int THREADS>
__device__ __forceinline__ void epilogue_tile(const float* stage, int tid, int row0, int col0, int split,
                                              const Out& o) {
    constexpr int LDS = BN + 8, PER_ROW = BN / 4;
    static_assert(BN % 4 == 0, "the epilogue writes 4 columns at a time");
    for (int q = tid; q < BM * PER_ROW; q += THREADS) {
        const int r = q / PER_ROW, c4 = (q % PER_ROW) * 4;
        const int i = row0 + r, j = col0 + c4;
        if (i >= o.rows || j >= o.cols) continue;
        const Quad<float> s = *reinterpret_cast<const Quad<float>*>(stage + r * LDS + c4);
        const float v[4] = {s.v[0], s.v[1], s.v[2], s.v[3]};
        finish_four(o, i, j, split, v);
    }
}

// =================================================================================================
#ifdef GEMM_SIMT
// A 64 x 64 tile of C per block, k in steps of 16 through shared memory (float32, transposed so
// that each thread reads 4 consecutive rows / columns), 4 x 4 results per thread: thread (ty, tx)
// owns rows 4ty..4ty+3 and columns 4tx..4tx+3 of the tile. Majors are arguments here (a_kmajor,
// b_kmajor): one module serves every product. Each 64-deep block of k is summed apart, then added
// to the running sum (blocked summation): the running sum then takes depth / 64 roundings instead of
// depth. A sequential float32 sum over depth K errs by about K u |terms| (u = 2^-24); at lm_head's dx
// (K = 50304) that was 4.5e-5 of the product's rms at worst on the H200, past the float32 gradient
// bound (2e-5 rms + 5e-5 |ref|), where cuBLASLt's 4.4e-6 passed; blocks of 64 bring it to about 4e-6
// (a NumPy model of both sums at that depth: 2.6e-5 and 3.6e-6 over 2048 results).
#define SIMT_TILE 64
#define SIMT_K 16
#define SIMT_BLOCK_K 64
static_assert(SIMT_BLOCK_K % SIMT_K == 0, "whole shared-memory steps of k per summed block");

extern "C" __global__ void __launch_bounds__(256)
gemm_simt(const floatX* __restrict__ a, const floatX* __restrict__ b, void* c, const floatX* bias, floatX* pre, int rows, int cols,
          int depth, int lda, int ldb, int a_kmajor, int b_kmajor, int k_split, int group_m, int flags) {
    __shared__ float as[SIMT_K][SIMT_TILE + 4];  // as[k][i]
    __shared__ float bs[SIMT_K][SIMT_TILE + 4];  // bs[k][j]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int tiles_m = (rows + SIMT_TILE - 1) / SIMT_TILE, tiles_n = (cols + SIMT_TILE - 1) / SIMT_TILE;
    int tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, group_m, tm, tn);
    const int row0 = tm * SIMT_TILE, col0 = tn * SIMT_TILE, split = blockIdx.y;
    const int k_lo = split * k_split, k_hi = min(depth, k_lo + k_split);

    float acc[4][4] = {};
    for (int k_block = k_lo; k_block < k_hi; k_block += SIMT_BLOCK_K) {
        float part[4][4] = {};  // this 64-deep block's sum
        for (int k0 = k_block; k0 < min(k_hi, k_block + SIMT_BLOCK_K); k0 += SIMT_K) {
            for (int e = tid; e < SIMT_K * SIMT_TILE; e += 256) {
                // consecutive threads take consecutive elements of global memory: along k (K-major) or along i / j
                const int ka = a_kmajor ? e % SIMT_K : e / SIMT_TILE, ia = a_kmajor ? e / SIMT_K : e % SIMT_TILE;
                const int kb = b_kmajor ? e % SIMT_K : e / SIMT_TILE, jb = b_kmajor ? e / SIMT_K : e % SIMT_TILE;
                const int i = row0 + ia, j = col0 + jb, k = k0 + ka, kj = k0 + kb;
                as[ka][ia] = (i < rows && k < k_hi)
                                 ? to_f32(a[a_kmajor ? (size_t)i * lda + k : (size_t)k * lda + i]) : 0.0f;
                bs[kb][jb] = (j < cols && kj < k_hi)
                                 ? to_f32(b[b_kmajor ? (size_t)j * ldb + kj : (size_t)kj * ldb + j]) : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < SIMT_K; ++kk) {
                float av[4], bv[4];
                for (int x = 0; x < 4; ++x) av[x] = as[kk][ty * 4 + x];
                for (int y = 0; y < 4; ++y) bv[y] = bs[kk][tx * 4 + y];
                for (int x = 0; x < 4; ++x)
                    for (int y = 0; y < 4; ++y) part[x][y] = fmaf(av[x], bv[y], part[x][y]);
            }
            __syncthreads();
        }
        for (int x = 0; x < 4; ++x)
            for (int y = 0; y < 4; ++y) acc[x][y] += part[x][y];
    }
    const Out o{c, bias, pre, rows, cols, flags};
    for (int x = 0; x < 4; ++x)
        for (int y = 0; y < 4; ++y) {
            const int i = row0 + ty * 4 + x, j = col0 + tx * 4 + y;
            if (i < rows && j < cols) finish_one(o, i, j, split, acc[x][y]);
        }
}
#endif  // GEMM_SIMT

// =================================================================================================
#ifdef GEMM_MMA
// Defines: A_KMAJOR, B_KMAJOR (0/1), MMA_BM, MMA_BN (tile of C), MMA_WARPS_M x MMA_WARPS_N warps
// (each owns an (MMA_BM / MMA_WARPS_M) x (MMA_BN / MMA_WARPS_N) piece of the tile), MMA_STAGES (ring
// depth), MMA_CTAS (blocks per SM the registers are budgeted for), ALIGNED (1: every row of A and B
// starts 16-byte aligned and the contiguous extents are multiples of 8, so cp.async copies whole
// 16-byte chunks; 0: element-wise loads).
#define MMA_THREADS (MMA_WARPS_M * MMA_WARPS_N * 32)
constexpr int MMA_WM = MMA_BM / MMA_WARPS_M, MMA_WN = MMA_BN / MMA_WARPS_N;
constexpr int MMA_MT = MMA_WM / 16, MMA_NT = MMA_WN / 8;  // m16 and n8 tiles per warp
constexpr int MMA_A_BYTES = MMA_BM * TILE_ROW_BYTES, MMA_B_BYTES = MMA_BN * TILE_ROW_BYTES;
static_assert(MMA_WM % 16 == 0 && MMA_WN % 16 == 0, "a warp's piece is whole m16 tiles and pairs of n8 tiles");
static_assert(MMA_BM % 64 == 0 && MMA_BN % 64 == 0, "MN-major tiles are whole 64-wide panels");
static_assert(MMA_STAGES >= 2, "a ring of at least two tiles");
static_assert(sizeof(floatX) == 2, "gemm_mma multiplies 16-bit operands");

// One BMN x 64 tile of an operand (rows mn0.., k from k0, nothing at or past mn_end / k_end) into `tile`.
template <bool KMAJOR, int BMN>
__device__ __forceinline__ void load_tile(unsigned char* tile, const floatX* __restrict__ g, int ld, int mn0, int mn_end,
                                          int k0, int k_end, int tid) {
    constexpr int CHUNKS = BMN * TILE_K / 8;
    static_assert(CHUNKS % MMA_THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int it = 0; it < CHUNKS / MMA_THREADS; ++it) {
        int mn, k;
        chunk_origin(KMAJOR, BMN, tid + it * MMA_THREADS, mn, k);
        unsigned char* dst = tile + tile_offset(KMAJOR, mn, k);
        const int gm = mn0 + mn, gk = k0 + k;
#if ALIGNED
        const bool inside = gm < mn_end && gk < k_end;
        const floatX* src = inside ? g + (KMAJOR ? (size_t)gm * ld + gk : (size_t)gk * ld + gm) : g;
        cp_async16(dst, src, inside);
#else
        Pack<floatX> p;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int em = KMAJOR ? gm : gm + e, ek = KMAJOR ? gk + e : gk;
            p.v[e] = (em < mn_end && ek < k_end) ? g[KMAJOR ? (size_t)em * ld + ek : (size_t)ek * ld + em]
                                                 : from_f32<floatX>(0.0f);
        }
        store_pack(reinterpret_cast<floatX*>(dst), p);
#endif
    }
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS, MMA_CTAS)
gemm_mma(const floatX* __restrict__ a, const floatX* __restrict__ b, void* c, const floatX* bias, floatX* pre, int rows, int cols,
         int depth, int lda, int ldb, int k_split, int group_m, int flags) {
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* a_ring = smem;
    unsigned char* b_ring = smem + MMA_STAGES * MMA_A_BYTES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / MMA_WARPS_N, wn = warp % MMA_WARPS_N;
    const int tiles_m = (rows + MMA_BM - 1) / MMA_BM, tiles_n = (cols + MMA_BN - 1) / MMA_BN;
    int tm, tn;
    tile_of(blockIdx.x, tiles_m, tiles_n, group_m, tm, tn);
    const int row0 = tm * MMA_BM, col0 = tn * MMA_BN, split = blockIdx.y;
    const int k_lo = split * k_split, k_hi = min(depth, k_lo + k_split);
    const int nk = (k_hi - k_lo + TILE_K - 1) / TILE_K;

    float acc[MMA_MT][MMA_NT][4];
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][nt][r] = 0.0f;

    // the ring: tiles 0 .. STAGES-2 in flight before the first multiply; one commit group per tile
    // (empty past the end) so that "all but STAGES-2 groups done" always means "tile kb is here"
    for (int s = 0; s < MMA_STAGES - 1; ++s) {
        if (s < nk) {
            load_tile<A_KMAJOR, MMA_BM>(a_ring + s * MMA_A_BYTES, a, lda, row0, rows, k_lo + s * TILE_K, k_hi, tid);
            load_tile<B_KMAJOR, MMA_BN>(b_ring + s * MMA_B_BYTES, b, ldb, col0, cols, k_lo + s * TILE_K, k_hi, tid);
        }
        cp_async_commit();
    }
    for (int kb = 0; kb < nk; ++kb) {
        cp_async_wait<MMA_STAGES - 2>();
        __syncthreads();  // tile kb visible to all; every warp done with tile kb-1, whose slot is refilled now
        const int next = kb + MMA_STAGES - 1;
        if (next < nk) {
            const int s = next % MMA_STAGES;
            load_tile<A_KMAJOR, MMA_BM>(a_ring + s * MMA_A_BYTES, a, lda, row0, rows, k_lo + next * TILE_K, k_hi, tid);
            load_tile<B_KMAJOR, MMA_BN>(b_ring + s * MMA_B_BYTES, b, ldb, col0, cols, k_lo + next * TILE_K, k_hi, tid);
        }
        cp_async_commit();

        const int s = kb % MMA_STAGES;
        const unsigned char* a_tile = a_ring + s * MMA_A_BYTES;
        const unsigned char* b_tile = b_ring + s * MMA_B_BYTES;
#pragma unroll
        for (int kk = 0; kk < TILE_K / 16; ++kk) {
            unsigned af[MMA_MT][4], bfr[MMA_NT][2];
#pragma unroll
            for (int mt = 0; mt < MMA_MT; ++mt) {
                int mn, k;
                ldsm_a_coords(A_KMAJOR, lane, wm * MMA_WM + mt * 16, kk * 16, mn, k);
                ldsm_x4<!A_KMAJOR>(af[mt], a_tile + tile_offset(A_KMAJOR, mn, k));
            }
#pragma unroll
            for (int np = 0; np < MMA_NT / 2; ++np) {
                int mn, k;
                unsigned r[4];
                ldsm_b_coords(B_KMAJOR, lane, wn * MMA_WN + np * 16, kk * 16, mn, k);
                ldsm_x4<!B_KMAJOR>(r, b_tile + tile_offset(B_KMAJOR, mn, k));
                bfr[2 * np][0] = r[0];
                bfr[2 * np][1] = r[1];
                bfr[2 * np + 1][0] = r[2];
                bfr[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < MMA_NT; ++nt) mma_16816(acc[mt][nt], af[mt], bfr[nt]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: stage the accumulators in it

    float* stage = reinterpret_cast<float*>(smem);
    constexpr int LDS = MMA_BN + 8;
#pragma unroll
    for (int mt = 0; mt < MMA_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < MMA_NT; ++nt)
#pragma unroll
            for (int reg = 0; reg < 4; reg += 2) {
                int r, cc;
                mma_acc_coords(lane, reg, r, cc);
                r += wm * MMA_WM + mt * 16;
                cc += wn * MMA_WN + nt * 8;
                *reinterpret_cast<Duo<float>*>(stage + r * LDS + cc) = Duo<float>{{acc[mt][nt][reg], acc[mt][nt][reg + 1]}};
            }
    __syncthreads();
    const Out o{c, bias, pre, rows, cols, flags};
    epilogue_tile<MMA_BM, MMA_BN, MMA_THREADS>(stage, tid, row0, col0, split, o);
}
#endif  // GEMM_MMA

// =================================================================================================
#ifdef GEMM_WGMMA
#include "wgmma.cuh"
#include "tma.cuh"
// Defines: A_KMAJOR, B_KMAJOR (0/1), WG_BN (128 or 256: columns of the tile of C), WG_BM (its rows),
// WG_STAGES (ring depth), WG_CTAS (blocks per SM the registers are budgeted for), WG_PINGPONG (the
// schedule, below), WG_STORE_COLS (0, or the columns of C a warpgroup stages per TMA store pass:
// 64, 128 or 256; 32 too for float32; below), WG_STORE_F32 (1: those stores are float32, dW's),
// WG_STORE_PRE (1: they are matmul_gelu's forward, pre and gelu(pre), with the bias), WG_STORE_DGELU
// (1: they are FLAG_DGELU's dx, pre prefetched into the image: PreFetch), WG_STORE_RESIDUAL (1: they
// are FLAG_RESIDUAL's C, the residual stream prefetched into the image the same way), WG_STORE_BUFFERS
// (1, or 2: the image cut into two buffers of WG_STORE_COLS / 2 columns filled in turn, so that a
// pass need not wait for the copy engine to have read the pass before it; below), WG_CLUSTER (1, or
// 2: blocks in clusters of two, below), WG_BIAS_SMEM (1: the TMA-store epilogue reads the bias from
// shared memory, below).
// Block: warps 0-3 and 4-7 are the two consumer warpgroups, warp 8 the producer.
//
// Work items are (tile of C, k slice) pairs, numbered slice-major; block b takes items b,
// b + gridDim.x, ... (the host launches one block per item, or a persistent grid of a few per SM).
// The ring runs on across a block's items: while the consumers write one tile out, the producer is
// already loading the next one's first k-blocks. Two schedules share everything else:
//
//   cooperative (WG_PINGPONG 0, WG_BM 128): both warpgroups work on every item, rows 0-63 and 64-127
//       of its tile, and release each slot together (256 arrivals). While they write a tile out the
//       tensor cores idle: at K = 768 (fc forward) 12.4 us per tile wave against 8.4 with the stores
//       skipped (reports/cupy_raw-h200/, wgmma-c53bb3f).
//   pingpong (WG_PINGPONG 1, WG_BM 64 or 128): each warpgroup owns alternate items of the block
//       (warpgroup n % 2 takes the block's n-th item), a whole WG_BM x WG_BN tile, WG_BM / 64 m64
//       blocks of wgmma per k step (WG_MH: 128 accumulators a thread at 64 x 256 or 128 x 128,
//       as the cooperative 64 x 256 share has). The producer fills the ring for both in item order;
//       each warpgroup steps its ring position over the other's items without touching them, and
//       a slot is released by the 128 threads that read it. Two named barriers make the warpgroups
//       take turns at the tensor cores in item order (WG_TURN_BAR: a warpgroup waits for its turn,
//       runs its main loop, then hands the turn on with a non-blocking bar.arrive before its
//       epilogue), so one warpgroup's epilogue runs while the other multiplies, and the ring is
//       consumed in the order it is filled. The cost: the same multiplies read more operand bytes
//       per result (64 x 256: 40 KB a k step for 16384 results, against 48 KB for 32768 together).
//       Chosen over a TMA-store epilogue because that would only hide the global stores: the
//       accumulators' shared-memory staging, the bias and GELU would still stall both warpgroups.
//       Measured (H200, 16384 rows, reports/cupy_raw-h200/pingpong-61e6ab8): the overlap works (fc
//       forward 6.4 us a half-wave) but the smaller tiles lose more: 0.74-0.87x cuBLASLt against the
//       cooperative 0.76-0.96x at every plain product, so cooperative is theirs. The GELU epilogues
//       (WG_STORE_PRE, WG_STORE_DGELU) are heavier than the tiles' cost: there pingpong is the
//       product's (fc's pre + GELU 0.73x against 0.68x, fc_proj's dx * gelu' 0.71x against 0.62x,
//       reports/train-h200/9a4640e/cupy_gemm/probe.txt).
//
// Clusters (WG_CLUSTER 2, with the TMA-store epilogue, either schedule; matmul.py's `cluster`): the grid's
// blocks pair up (__cluster_dims__), and a pair's items are two tiles of C one above the other (tile
// rows 2 r' and 2 r' + 1, one each), which read the same B tile at every k step. Each block's producer
// loads its own A tile and half of B's, which the copy engine writes into both blocks' rings
// (cp.async.bulk.tensor's .multicast::cluster), so a block's L2 reads a k step fall from 48 KB to 32
// at 128 x 256 tiles. The price is coupling: a slot is refilled in both blocks at once, so its empty
// barrier counts both blocks' consumers (each warp arrives at each block's, release_slot), and the
// blocks walk their items in step; a cluster barrier at the start (every mbarrier initialised before a
// copy or arrival from the other block lands) and at the end (no block leaves while the other may
// still write into it). cuBLASLt's Hopper kernels run in clusters of two the same way (the lm_head
// forward in the PyTorch reference's step: 192 x 192 tiles, 2 x 1 clusters). In the pingpong schedule
// the blocks' warpgroups of one parity take a pair's item together (each block's n-th item is the
// pair's), so a slot's readers are one warpgroup of each block, and a block's L2 reads a k step fall
// from 40 KB to 24 at 64 x 256 tiles: the traffic that pingpong's smaller tiles cost (above).
//
// The epilogue (wgmma_epilogue). wgmma leaves each thread 2 columns x 2 rows of every 8-column group
// (wgmma_acc_coords): stored from there, a warp instruction writes 8 rows x 16 bytes (bf16 pairs),
// and each thread loads a bias pair per store. At 7ce4f9f on the H200 (16384 rows, bf16, probe
// bench/tune/cupy_raw_wgmma_probe.py, reports/cupy_raw-h200/) that cost more than the main loop: fc
// forward (K = 768, 128 x 256 tiles, bias) ran at 344 TFLOP/s (0.51x cuBLASLt), 761 with the stores
// skipped, 463 without the bias; 18.7 us per tile wave with the stores, 8.5 without; and nothing
// overlaps it (one block per SM, both consumers on the same tile). So, for every FLAG_VEC flag set
// (all the GPT-2 products), each consumer warpgroup stages its 64 rows 32 columns at a time through
// a float32 buffer of its own (64 x 40: 8 floats of padding keep the pair stores at 2 wavefronts,
// the minimum), then reads it back as rows: 8 threads per row, 4 consecutive columns each, so a
// warp writes 4 whole 64-byte (bf16) or 128-byte (float32) row segments with 8- or 16-byte stores,
// each thread loading its 4 bias values once per pass and the old C (FLAG_ACCUMULATE) for its 4
// rows before any of its stores. The arithmetic is finish_one's, in the same order (same rounding).
// The two warpgroups synchronise separately (named barriers 1 and 2, 128 threads each), so one may
// already be multiplying the next tile while the other still writes. Without FLAG_VEC (unaligned,
// ragged widths: tests) the same staging, then element by element with the flags read at run time.
//
// The TMA-store epilogue (modules with WG_STORE_COLS > 0: every GPT-2 product). The staged epilogue
// above keeps both warpgroups away from the tensor cores while its stores drain (12.4 us a tile wave
// at fc's forward against 8.4 without them, wgmma-c53bb3f). Here each warpgroup rounds its
// accumulators (+ bias, GELU: the same arithmetic in the same order) straight into a shared-memory
// image of WG_STORE_COLS columns of its 64 rows, laid out as boxes of 64 rows x 128 bytes (64
// 16-bit columns) in the 128-byte swizzle (box row y, 16-byte chunk q at chunk q ^ (y % 8): a
// warp's 4-byte writes then fall in 32 different banks), fences them for the async proxy, and one
// thread hands the boxes to the copy engine (cp.async.bulk.tensor stores through C's tensor map,
// which also clips the tile at C's edges) and goes on: the next tile's multiplies start while the
// copy engine writes this one out. Before a warpgroup writes its image again, that thread waits
// until the copy engine has read it (tma_store_wait_read), then a barrier. WG_STORE_COLS < WG_BN
// stages the tile in several passes, the later ones waiting for the earlier ones' reads: less
// shared memory (room for a deeper ring), less overlap. WG_STORE_BUFFERS 2 cuts the same shared
// memory into two buffers of half as many columns, filled in turn: a pass waits only for the pass
// before the last (wait_group.read 1), so that one buffer is filled while the copy engine reads the
// other (not yet timed on the H200; bench/tune/cupy_raw_wgmma_probe.py's `store_double`). Such a
// module has this epilogue alone: with the staged one beside it (for the flag sets it cannot take)
// ptxas spilled at WG_BN 256.
// WG_STORE_F32 (dW, its float32 results): the image holds floats (boxes of 32 columns) and goes out
// either as the item's k slice of the split-K buffer (a plane of C's 3-D map) or, for a whole
// product, added to the float32 gradient by the copy engine's reduce-add (cp.reduce.async.bulk:
// old + sum, one rounding per element, the arithmetic of the staged FLAG_ACCUMULATE path), so that
// the gradient is never read by the threads. Measured on the H200 (reports/cupy_raw-h200/
// gemm-253b27c, gemm-f6bc69c): the depth-768 forwards from 0.76-0.78x cuBLASLt to 0.90-0.93x, every
// dx 0.96-1.03x, dW (with 128 x 256 tiles) 0.97-1.18x.
//
// Shared memory (dynamic, the base rounded up to 1024 bytes for the swizzle): WG_STAGES A tiles
// (128 x 64), WG_STAGES B tiles (WG_BN x 64), a tile of ones (8 x 64, FLAG_ROWSUM's B), the two
// warpgroups' epilogue buffers (WG_STAGE_BYTES each: the staged epilogue's WG_EPI_BYTES, or the TMA
// store's image of 64 x WG_STORE_COLS 16-bit or float32 values where that is larger), then the
// full[] and empty[] mbarriers, and with WG_STORE_PREFETCH each warpgroup's prefetch mbarrier
// (matmul.py's wgmma_shared_bytes: 219200 bytes at WG_BN 256, 4 stages, 231488 with the TMA store's
// two 16 KB images; the SM has 232448).
#define WG_CONSUMERS 2
#define WG_THREADS (WG_CONSUMERS * 128 + 32)
#define WG_MH (WG_PINGPONG ? WG_BM / 64 : 1)   // m64 blocks of the tile a consumer warpgroup multiplies
#ifndef WG_CLUSTER
#define WG_CLUSTER 1
#endif
// WG_BIAS_SMEM 1: each consumer thread loads one pair of the tile's bias before its main loop (the load's
// latency under the multiplies) and, before the epilogue, puts it into the warpgroup's 512 bytes of the
// tile of ones (FLAG_ROWSUM's, which a product with a bias never has); the TMA-store epilogue then
// reads the bias there instead of issuing a global load per 8-column group and row pair (in the
// pingpong GELU forward, ncu's stall samples put 5% on that load: reports/train-h100/12814eb).
#ifndef WG_BIAS_SMEM
#define WG_BIAS_SMEM 0
#endif
#ifndef WG_STORE_RESIDUAL
#define WG_STORE_RESIDUAL 0
#endif
#define WG_STORE_PREFETCH (WG_STORE_DGELU || WG_STORE_RESIDUAL)  // the epilogue's input prefetched into the image
static_assert(!WG_BIAS_SMEM || (WG_STORE_COLS > 0 && WG_BN * 2 <= 512), "the bias in shared memory: the TMA-store "
              "epilogue's, 512 bytes a warpgroup");
// arrivals that release a ring slot: every thread that reads it, or in a cluster one a consumer warp
// of each block (release_slot)
#define WG_SLOT_WARPGROUPS (WG_PINGPONG ? 1 : WG_CONSUMERS)  // the warpgroups that read each slot
#define WG_SLOT_READERS (WG_CLUSTER > 1 ? WG_CLUSTER * WG_SLOT_WARPGROUPS * 4 : WG_SLOT_WARPGROUPS * 128)
#define WG_TURN_BAR 3  // pingpong: named barriers 3 (warpgroup 0's turn) and 4 (warpgroup 1's); 1, 2: the epilogues'
constexpr int WG_A_BYTES = WG_BM * TILE_ROW_BYTES, WG_B_BYTES = WG_BN * TILE_ROW_BYTES;
constexpr int WG_RING_BYTES = WG_STAGES * (WG_A_BYTES + WG_B_BYTES);
constexpr int WG_EPI_COLS = 32;                       // columns of C a warpgroup stages per pass
constexpr int WG_EPI_LDS = WG_EPI_COLS + 8;           // floats per staged row (padded)
constexpr int WG_EPI_BYTES = 64 * WG_EPI_LDS * 4;     // one warpgroup's buffer: 10 KB
constexpr int WG_STORE_BYTES = 64 * WG_STORE_COLS * (WG_STORE_F32 ? 4 : 2);  // a warpgroup's TMA-store image (0: none)
constexpr int WG_STAGE_BYTES = WG_STORE_BYTES > WG_EPI_BYTES ? WG_STORE_BYTES : WG_EPI_BYTES;
#if WG_STORE_COLS > 0
constexpr int WG_BOX_BYTES = 64 * 128;                // one box of the image: 64 rows of 128 bytes
static_assert(WG_BN % WG_STORE_COLS == 0 && (WG_STORE_COLS / WG_STORE_BUFFERS) % (WG_STORE_F32 ? 32 : 64) == 0,
              "TMA-store passes of whole boxes (64 16-bit or 32 float32 columns) that divide the tile");
#endif
static_assert(WG_BN % WG_EPI_COLS == 0 && WG_EPI_COLS % 8 == 0, "whole 8-column groups per pass");
static_assert(WG_BN == 128 || WG_BN == 256, "wgmma tiles of 64 x 128 or 64 x 256 per consumer");
static_assert(sizeof(floatX) == 2, "gemm_wgmma multiplies 16-bit operands");
static_assert(WG_PINGPONG ? (WG_BM == 64 || WG_BM == 128) : WG_BM == 64 * WG_CONSUMERS,
              "cooperative: 64 rows per consumer warpgroup; pingpong: one or two m64 blocks per warpgroup");
static_assert(WG_CLUSTER == 1 || (WG_CLUSTER == 2 && WG_STORE_COLS > 0),
              "clusters of two blocks, with the TMA-store epilogue (it clips the tile rows past C that a "
              "cluster's second block may take)");
#if WG_CLUSTER > 1
#define EMU_CLUSTER_X WG_CLUSTER  // (the emulator's launchers: the cluster's blocks run together)
#define WG_CLUSTER_DIMS __cluster_dims__(WG_CLUSTER, 1, 1)
#else
#define WG_CLUSTER_DIMS
#endif

#ifdef CUPY_RAW_EMULATOR
// wgmma on the CPU: each thread computes its own accumulators at issue, register reg holding (row,
// col) of wgmma_acc_coords, the operands read from shared memory by wgmma.cuh's emu_wgmma_operand;
// fence / commit / wait have nothing to wait for (the mbarriers and TMA: tma.cuh)
__device__ __forceinline__ void wgmma_tile(float (&d)[WG_BN / 2], unsigned long long da, unsigned long long db) {
    const int t = threadIdx.x & 127;
    for (int reg = 0; reg < WG_BN / 2; ++reg) {
        int row, col;
        wgmma_acc_coords(t, reg, row, col);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k)
            sum += emu_wgmma_operand(da, A_KMAJOR, row, k) * emu_wgmma_operand(db, B_KMAJOR, col, k);
        d[reg] += sum;
    }
}
// the row sums of A (m64n8k16 against a tile of ones): the same per-thread formula at N = 8
__device__ __forceinline__ void wgmma_rowsum(float (&d)[4], unsigned long long da, unsigned long long ones) {
    const int t = threadIdx.x & 127;
    for (int reg = 0; reg < 4; ++reg) {
        int row, col;
        wgmma_acc_coords(t, reg, row, col);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += emu_wgmma_operand(da, A_KMAJOR, row, k) * emu_wgmma_operand(ones, true, col, k);
        d[reg] += sum;
    }
}
// bar.sync id, count: a barrier over `count` threads (whole warps) of the block; here a counter and a
// generation per id, each arriving thread yielding to the others until the last one arrives.
// bar.arrive id, count: one arrival counted the same way, without waiting.
struct EmuNamedBarriers {
    int arrived[16], generation[16];
};
__device__ __forceinline__ EmuNamedBarriers& emu_named_barriers() {  // the running block's (of its cluster)
    static thread_local EmuNamedBarriers bars[16];
    return bars[emu::block_rank];
}
// one arrival at barrier id; true when it completes the barrier's current generation (g: that generation)
__device__ __forceinline__ bool emu_named_arrival(int id, int count, int& g) {
    EmuNamedBarriers& b = emu_named_barriers();
    emu::progress++;
    g = b.generation[id];
    if (++b.arrived[id] < count) return false;
    b.arrived[id] = 0;
    b.generation[id]++;
    return true;
}
__device__ __forceinline__ void named_arrive(int id, int count) {
    int g;
    emu_named_arrival(id, count, g);
}
__device__ __forceinline__ void named_barrier(int id, int count) {
    int g;
    if (emu_named_arrival(id, count, g)) return;
    for (emu::Spin spin; emu_named_barriers().generation[id] == g;) {
        if (spin.stalled()) {
            EMU_FAIL("matmul.cu (emulated): thread %d of block %d waits forever at named barrier %d", (int)threadIdx.x,
                     (int)blockIdx.x, id);
        }
        emu::yield_to_scheduler();
    }
}
// split-K in order (FLAG_SERIAL; the GPU's, below, has the protocol): the emulator runs one block after
// another, so a slice's predecessor has run unless the grid gave one block several items (the launcher
// gives each its own here): a wait that never ends is reported
__device__ __forceinline__ void chain_wait(const int* counter, int value) {
    for (emu::Spin spin; __atomic_load_n(counter, __ATOMIC_ACQUIRE) != value;) {
        if (spin.stalled()) {
            EMU_FAIL("matmul.cu (emulated): block %d waits forever for k slice %d of its share of C (split-K in order)",
                     (int)blockIdx.x, value);
        }
        emu::yield_to_scheduler();
    }
}
__device__ __forceinline__ void chain_release(int* counter, int value) {
    emu::progress++;
    __atomic_store_n(counter, value, __ATOMIC_RELEASE);
}
#else
#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_REGS_0_63                                                                                    \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                            \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                  \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS_64_127                                                                                  \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                  \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                  \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "      \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d (64 x WG_BN per warpgroup, float32) += A (64 x 16, descriptor da) @ B (16 x WG_BN, descriptor db);
// the transpose flags say the operand is MN-major.
__device__ __forceinline__ void wgmma_tile(float (&d)[WG_BN / 2], unsigned long long da, unsigned long long db) {
    constexpr int TA = A_KMAJOR ? 0 : 1, TB = B_KMAJOR ? 0 : 1;
#if WG_BN == 128
#define WGMMA_ASM(AB)                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB "." AB " {" WG_REGS_0_63 "}, "       \
                 "%64, %65, p, 1, 1, %67, %68;\n}\n"                                                    \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56) \
                 : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
#else
#define WGMMA_ASM(AB)                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB "." AB " {" WG_REGS_0_63 ", "        \
                 WG_REGS_64_127 "}, %128, %129, p, 1, 1, %131, %132;\n}\n"                              \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56), \
                   WG_D8(64), WG_D8(72), WG_D8(80), WG_D8(88), WG_D8(96), WG_D8(104), WG_D8(112), WG_D8(120) \
                 : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
#endif
    if constexpr (T_IS_BF16) WGMMA_ASM("bf16");
    else WGMMA_ASM("f16");
#undef WGMMA_ASM
}

// d (64 x 8) += A (64 x 16) @ ones (16 x 8, K-major): every column of d gets A's row sums
__device__ __forceinline__ void wgmma_rowsum(float (&d)[4], unsigned long long da, unsigned long long ones) {
    constexpr int TA = A_KMAJOR ? 0 : 1;
#define WGMMA_ROWSUM_ASM(AB)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32." AB "." AB " {%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                       \
                 : "l"(da), "l"(ones), "r"(1), "n"(TA))
    if constexpr (T_IS_BF16) WGMMA_ROWSUM_ASM("bf16");
    else WGMMA_ROWSUM_ASM("f16");
#undef WGMMA_ROWSUM_ASM
}
// bar.sync id, count: a barrier over `count` threads (whole warps) of the block (id 0 is __syncthreads'),
// which also orders their shared-memory accesses
__device__ __forceinline__ void named_barrier(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// bar.arrive id, count: this warp's arrival at the barrier, without waiting for the others
__device__ __forceinline__ void named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// split-K in order (FLAG_SERIAL): k slice s of a 64-row share of C adds itself in (the copy engine's
// reduce-add) once the share's counter reads s (chain_wait, acquire), and sets it to s + 1 (the last
// slice: to 0) once those additions are done (tma_store_wait_all, then chain_release). The fences order the copy engine's
// accesses (the async proxy) with the counter's (the generic one) on either side.
__device__ __forceinline__ void chain_wait(const int* counter, int value) {
    int seen;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
        if (seen == value) break;
        __nanosleep(64);
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void chain_release(int* counter, int value) {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}
#endif  // CUPY_RAW_EMULATOR


// One BMN x 64 tile of an operand. K-major maps have boxes of 64 k x BMN rows (one load); MN-major
// maps boxes of 64 mn x 64 k (one load per 64-wide panel).
template <bool KMAJOR, int BMN>
__device__ __forceinline__ void tma_tile(const TmaDescriptor* map, unsigned dst, int mn0, int k0, unsigned bar) {
    if (KMAJOR) {
        tma_load_2d(dst, map, k0, mn0, bar);
    } else {
#pragma unroll
        for (int p = 0; p < BMN / 64; ++p) tma_load_2d(dst + p * PANEL_BYTES, map, mn0 + 64 * p, k0, bar);
    }
}

#if WG_CLUSTER > 1
// The same tile in a cluster of WG_CLUSTER blocks that all multiply it (tiles of C in one column): this
// block loads its share (the rank-th 1 / WG_CLUSTER of the tile's mn rows: one box of BMN / WG_CLUSTER
// rows K-major, as matmul.py's map is cut for a cluster, or that share of the 64-wide panels
// MN-major) and the copy engine writes it into every block of the cluster at the same offset,
// completing the bytes at each block's barrier of that offset. Each block's full barrier so expects the
// whole tile, its own share and the others'.
template <bool KMAJOR, int BMN>
__device__ __forceinline__ void tma_tile_multicast(const TmaDescriptor* map, unsigned dst, int mn0, int k0, unsigned bar,
                                                   int rank) {
    constexpr int SHARE = BMN / WG_CLUSTER;
    constexpr unsigned short EVERY_BLOCK = (1u << WG_CLUSTER) - 1;
    static_assert(SHARE % 64 == 0, "a cluster's shares of a tile: whole 64-row panels");
    if (KMAJOR) {
        tma_load_2d_multicast(dst + rank * SHARE * TILE_ROW_BYTES, map, k0, mn0 + rank * SHARE, bar, EVERY_BLOCK);
    } else {
#pragma unroll
        for (int p = rank * SHARE / 64; p < (rank + 1) * SHARE / 64; ++p)
            tma_load_2d_multicast(dst + p * PANEL_BYTES, map, mn0 + 64 * p, k0, bar, EVERY_BLOCK);
    }
}
#endif

// A consumer thread is done reading ring slot `bar` (its wgmma waited for). Alone, every reading
// thread arrives; in a cluster the slot is refilled in every block at once (tma_tile_multicast), so its
// empty barrier in each block must count the readers of all of them: each consumer warp arrives once
// at each block's barrier (lane r at rank r's), after all its lanes are done.
__device__ __forceinline__ void release_slot(unsigned bar) {
#if WG_CLUSTER > 1
    __syncwarp();
    const int lane = threadIdx.x & 31;
    if (lane < WG_CLUSTER) mbar_arrive_cluster(bar, lane);
#else
    mbar_arrive(bar);
#endif
}

// C[i, j..j+3] (F has FLAG_VEC: j % 4 == 0, all four columns inside C) from the float32 sums v, the
// bias b and the old C `old` (as floats, read ahead by the caller): finish_one's arithmetic, in its order.
template <int F>
__device__ __forceinline__ void finish_quad(const Out& o, int i, int j, int split, const Quad<float>& v,
                                            const float (&b)[4], const float (&old)[4]) {
    const size_t at = (size_t)i * o.cols + j;
    if (F & FLAG_PARTIAL) {
        *reinterpret_cast<Quad<float>*>(static_cast<float*>(o.c) + (size_t)split * o.rows * o.cols + at) = v;
        return;
    }
    float w[4];
    Quad<floatX> pre, read_in;  // read_in: the GELU's input (FLAG_DGELU) or the residual (FLAG_RESIDUAL)
    if (F & (FLAG_DGELU | FLAG_RESIDUAL)) read_in = *reinterpret_cast<const Quad<floatX>*>(o.pre + at);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        w[e] = v.v[e] + ((F & FLAG_BIAS) ? b[e] : 0.0f);
        pre.v[e] = from_f32<floatX>(w[e]);
        if (F & FLAG_PRE) w[e] = to_f32(pre.v[e]);  // activated as stored
        if (F & FLAG_GELU) w[e] = gelu_tanh(w[e]);
        if (F & FLAG_DGELU) w[e] = gelu_tanh_backward(to_f32(read_in.v[e]), to_f32(pre.v[e]));  // of dx as stored
        if (F & FLAG_RESIDUAL) w[e] = to_f32(read_in.v[e]) + to_f32(pre.v[e]);  // of the product as stored
    }
    if (F & FLAG_PRE) *reinterpret_cast<Quad<floatX>*>(o.pre + at) = pre;
    if (F & FLAG_OUT_F32) {
        Quad<float> r;
#pragma unroll
        for (int e = 0; e < 4; ++e) r.v[e] = (F & FLAG_ACCUMULATE) ? w[e] + old[e] : w[e];
        *reinterpret_cast<Quad<float>*>(static_cast<float*>(o.c) + at) = r;
    } else {
        Quad<floatX> r;
#pragma unroll
        for (int e = 0; e < 4; ++e) r.v[e] = from_f32<floatX>((F & FLAG_ACCUMULATE) ? old[e] + w[e] : w[e]);
        *reinterpret_cast<Quad<floatX>*>(static_cast<floatX*>(o.c) + at) = r;
    }
}

// The epilogue of one warpgroup's 64 rows (see the section's header): per pass, 32 columns of the
// accumulators into `stage` (64 x WG_EPI_LDS floats) as wgmma holds them (per 8-column group g,
// columns 8 g + cc, + 1 of rows r and r + 8: wgmma_acc_coords), then read back by rows: thread t
// takes rows t / 8 + 16 p (p < 4), columns 4 (t % 8) .. + 3 of the pass, as one quad (FLAG_VEC:
// finish_quad) or element by element (finish_one: unaligned, ragged; FLAGS_RUNTIME). `bar`: the
// warpgroup's named barrier; i_wg, j_tile: its first row and the tile's first column in C.
template <int F>
__device__ __forceinline__ void wgmma_epilogue(const Out& o, const float (&acc)[WG_BN / 2], float* stage, int bar,
                                                   int t, int i_wg, int j_tile, int split) {
    int r, cc;
    wgmma_acc_coords(t, 0, r, cc);            // written: rows r, r + 8; columns 8 g + cc, + 1
    const int rr = t / 8, c4 = 4 * (t % 8);   // read: rows rr + 16 p; columns c4 .. c4 + 3
#pragma unroll
    for (int pass = 0; pass < WG_BN / WG_EPI_COLS; ++pass) {
        named_barrier(bar, 128);  // the previous pass's (or tile's) reads of `stage` are done
#pragma unroll
        for (int g = 0; g < WG_EPI_COLS / 8; ++g) {
            const int j = pass * (WG_EPI_COLS / 8) + g;  // the 8-column group of the tile
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<Duo<float>*>(stage + (r + 8 * h) * WG_EPI_LDS + 8 * g + cc) =
                    Duo<float>{{acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]}};
        }
        named_barrier(bar, 128);  // the pass is staged
        // (the pass's column through a zero the compiler cannot see through: else it computes every
        // pass's addresses ahead, and with 112 accumulators still live they spill)
        const int jc = j_tile + pass * WG_EPI_COLS + c4 + opaque_zero();
        if (jc >= o.cols) continue;
        if (F == FLAGS_RUNTIME || !(F & FLAG_VEC)) {  // element by element, each inside C or not
#pragma unroll 1
            for (int q = 0; q < 16; ++q) {  // (not unrolled: the rare path kept small)
                const int p = q / 4, e = q % 4, i = i_wg + rr + 16 * p;
                if (i < o.rows && jc + e < o.cols) finish_one<F>(o, i, jc + e, split, stage[(rr + 16 * p) * WG_EPI_LDS + c4 + e]);
            }
            continue;
        }
        // FLAG_VEC: cols % 4 == 0, so the 4 columns are all inside
        float b[4] = {0.0f, 0.0f, 0.0f, 0.0f}, old[4][4] = {};
        if (F & FLAG_BIAS) {  // once per pass, not per store
            const Quad<floatX> q = *reinterpret_cast<const Quad<floatX>*>(o.bias + jc);
#pragma unroll
            for (int e = 0; e < 4; ++e) b[e] = to_f32(q.v[e]);
        }
        if (F & FLAG_ACCUMULATE) {  // the old C of all 4 rows first: 4 loads in flight, not one at a time
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int i = i_wg + rr + 16 * p;
                if (i >= o.rows) break;
                const size_t at = (size_t)i * o.cols + jc;
                if (F & FLAG_OUT_F32) {
                    const Quad<float> q = *reinterpret_cast<const Quad<float>*>(static_cast<const float*>(o.c) + at);
#pragma unroll
                    for (int e = 0; e < 4; ++e) old[p][e] = q.v[e];
                } else {
                    const Quad<floatX> q = *reinterpret_cast<const Quad<floatX>*>(static_cast<const floatX*>(o.c) + at);
#pragma unroll
                    for (int e = 0; e < 4; ++e) old[p][e] = to_f32(q.v[e]);
                }
            }
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int i = i_wg + rr + 16 * p;
            if (i >= o.rows) break;
            const Quad<float> v = *reinterpret_cast<const Quad<float>*>(stage + (rr + 16 * p) * WG_EPI_LDS + c4);
            finish_quad<F>(o, i, jc, split, v, b, old[p]);
        }
    }
}

// matmul_gelu's forward (WG_STORE_PRE): the GELU of a tile's last TMA-store pass, left by the epilogue
// to the warpgroup's next main loop. There the tensor cores multiply the next tile while the threads
// turn the image (pre, its store issued) into gelu(pre) in place, a few 16-byte pieces a k-block
// (GELU_PIECES a thread each step, after that k-block's multiplies are issued), where the epilogue
// kept the tensor cores idle for the whole GELU (exp2 and a division an element, the SFU's 16 a
// cycle: ~2.3 us a 128 x 256 tile). Step 0 first waits for the copy engine to have read pre out of
// the image; the last step stores gelu(pre) through C's map at (column j, row i). A main loop
// shorter than GELU_STEPS k-blocks, and the block's last tile, finish the steps after it.
// Measured on the H200 (reports/train-h200/d3f0fff, c_fc at 16384 rows): 14.1 us a tile wave against
// 10.4 for the plain GEMM, so the main loop does not hide the GELU, it only hides it a little better
// than the epilogue did (two passes, the second's GELU deferred: 14.6); in the step the fused forward
// takes 701-713 us a layer against 517 + 213 for the GEMM and gelu's pass (dbeb0bd). This is the
// cooperative schedule's; in the pingpong schedule (the product's configuration since 9a4640e) nothing
// is deferred: the epilogue stores pre, then gelu(pre) from the same image, while the other
// warpgroup's tile multiplies (13.0 us for the same two half-waves, 9a4640e's probe).
struct DeferredGelu {
    int step;  // the next step; GELU_STEPS: nothing deferred
    int i, j;  // C's first row and column of the image
};
#if WG_STORE_PRE
static_assert(WG_STORE_COLS > 0 && WG_MH == 1, "pre and gelu(pre): the TMA-store epilogue of 64-row shares");
constexpr int GELU_PIECES = 2;                                           // 16-byte pieces a thread a step
constexpr int GELU_STEPS = 64 * WG_STORE_COLS * 2 / 16 / 128 / GELU_PIECES;  // 4 (128 columns) or 8 (256)

__device__ __forceinline__ void deferred_gelu_step(DeferredGelu& d, unsigned char* image, const TmaDescriptor* map,
                                                   int bar, int t) {
    if (d.step == 0) {  // pre's store has read the image
        if (t == 0) tma_store_wait_read<0>();
        named_barrier(bar, 128);
    }
    Pack<floatX>* const pieces = reinterpret_cast<Pack<floatX>*>(image);
#pragma unroll
    for (int p = 0; p < GELU_PIECES; ++p) {
        Pack<floatX>& piece = pieces[(d.step * GELU_PIECES + p) * 128 + t];
        Pack<floatX> v = piece;
#pragma unroll
        for (int e = 0; e < Pack<floatX>::N; ++e) v.v[e] = from_f32<floatX>(gelu_tanh(to_f32(v.v[e])));
        piece = v;
    }
    if (++d.step == GELU_STEPS) {
        WG_FENCE_PROXY_ASYNC();   // this thread's writes, visible to the copy engine
        named_barrier(bar, 128);  // everyone's
        if (t == 0) {
#pragma unroll
            for (int b = 0; b < WG_STORE_COLS / 64; ++b) tma_store_3d(map, smem_u32(image + b * WG_BOX_BYTES), d.j + 64 * b, d.i, 0);
            tma_store_commit();
        }
    }
}
#else
constexpr int GELU_STEPS = 0;
#endif

// The MLP projection's dx with the GELU's backward (WG_STORE_DGELU, FLAG_DGELU): the epilogue needs
// pre at every element it writes, and finds it in the image it writes into. (The residual add,
// WG_STORE_RESIDUAL with FLAG_RESIDUAL, reads the residual stream the same way: below, "pre" is
// whichever of the two the kernel's pre pointer and tensor map hold.) Thread 0 of each consumer
// warpgroup loads the warpgroup's 64 x WG_BN share of pre there (through pre's tensor map, the
// boxes C's store will use, completing on the warpgroup's own mbarrier) as soon as the tile's first
// k-block is multiplying (in the cooperative schedule its middle one: consume_item says why) and the
// copy engine has read the last tile's image out; the epilogue waits for that phase (long complete by
// then: the main loop is ~12 k-blocks at GPT-2's depth 768), turns
// each pair of pre into the pair of results in place, and stores the image through C's map. So
// pre is read once, by the copy engine, under the multiplies, and the whole share goes in one pass
// (WG_STORE_COLS = WG_BN: nothing of the tile waits for a store between passes).
struct PreFetch {
    unsigned bar;  // the warpgroup's mbarrier: one phase a tile
    int tiles;     // tiles fetched so far (the phase the epilogue waits for: its parity)
    int i, j;      // the first row and column of the share in pre (and C)
    int rows, cols;  // pre's (and C's)
};
#if WG_STORE_PREFETCH
static_assert(WG_STORE_COLS == WG_BN && WG_STORE_BUFFERS == 1 && WG_MH == 1 && !WG_STORE_F32 && !WG_STORE_PRE &&
              !(WG_STORE_DGELU && WG_STORE_RESIDUAL),
              "dx with gelu', or C with the residual: the TMA-store epilogue, a warpgroup's whole 64-row share in "
              "one 16-bit image");
// (Boxes wholly outside pre, a ragged last tile's, are not asked for: their elements are never stored.)
__device__ __forceinline__ void prefetch_pre(const PreFetch& f, unsigned char* image, const TmaDescriptor* pre_map, int t) {
    if (t != 0) return;
    tma_store_wait_read<0>();  // the copy engine is done reading the last tile's image
    const int boxes = f.i < f.rows ? min(WG_BN / 64, (f.cols - f.j + 63) / 64) : 0;
    mbar_expect_tx(f.bar, boxes * WG_BOX_BYTES);  // (no boxes: the arrival alone completes the phase)
    for (int b = 0; b < boxes; ++b) tma_load_3d(smem_u32(image + b * WG_BOX_BYTES), pre_map, f.j + 64 * b, f.i, 0, f.bar);
}
#endif

#if WG_STORE_COLS > 0
// Thread (r, cc)'s pair of 8-column group g, row r + 8 h, in a pass's image at row_at (its row r): box
// g / BOX_GROUPS, the pair's bytes in its box row, in their 16-byte chunk XOR the row (the 128-byte
// swizzle). The epilogue's reads of the image's input (pre, the residual) go through it; its stores
// spell the same address out (as the timed modules' PTX has it).
template <typename OutT>
__device__ __forceinline__ const Duo<OutT>* image_pair(const unsigned char* row_at, int g, int h, int r, int cc) {
    constexpr int BOX_GROUPS = 128 / sizeof(OutT) / 8;
    const int byte = ((g % BOX_GROUPS) * 8 + cc) * (int)sizeof(OutT), chunk = byte >> 4;
    return reinterpret_cast<const Duo<OutT>*>(row_at + (g / BOX_GROUPS) * WG_BOX_BYTES + 8 * h * 128 +
                                              ((chunk ^ ((r + 8 * h) % 8)) << 4) + (byte & 15));
}

// The TMA-store epilogue of one warpgroup's 64 rows (see the section's header): per pass, WG_STORE_COLS
// columns rounded to OutT (floatX, or float with WG_STORE_F32) into the image at `image` (shared
// memory; boxes of 64 rows x 128 bytes one after another), then written by thread 0 through C's
// tensor map at (column j_tile + the pass's first, row i_wg, plane): stored, or added to C
// (`reduce`: dW's float32 accumulation, old + sum, one rounding as finish_quad's). F: FLAG_BIAS,
// FLAG_GELU, FLAG_PRE with both, FLAG_DGELU alone, FLAG_RESIDUAL with or without FLAG_BIAS (float32
// images take none). With FLAG_PRE each pass fills the image
// with pre = sum + bias, stored through pre's map, then (once the copy engine has read that) with
// gelu(pre) of pre rounded to floatX (the composition's arithmetic: bitwise what gelu.cu makes of the
// stored pre), through C's; the last pass leaves its gelu(pre) to the next main loop (`deferred`,
// DeferredGelu below), so that the tile's last image waits for nothing. bias: the whole bias (global
// memory), or with WG_BIAS_SMEM the warpgroup's copy of the tile's (shared memory, from column j_tile).
// Thread t holds, of every 8-column group g, columns 8 g + cc, + 1 of rows r and r + 8
// (wgmma_acc_coords: registers 4 g + 2 h, + 1 for row r + 8 h).
template <int F, typename OutT>
__device__ __forceinline__ void wgmma_store_epilogue(float (&acc)[WG_BN / 2], const floatX* bias,
                                                     const TmaDescriptor* map, const TmaDescriptor* pre_map,
                                                     unsigned char* image, int bar, int t,
                                                     int i_wg, int j_tile, int cols, int plane, bool reduce,
                                                     DeferredGelu& deferred, PreFetch& prefetch,
                                                     int* chain, int split, int chain_next) {
    int r, cc;
    wgmma_acc_coords(t, 0, r, cc);
    constexpr int BOX_COLS = 128 / sizeof(OutT);   // columns of a 128-byte box row: 64 (16-bit), 32 (float)
    constexpr int BOX_GROUPS = BOX_COLS / 8;       // 8-column groups a box row holds
    constexpr int FILL_COLS = WG_STORE_COLS / WG_STORE_BUFFERS;   // columns a pass fills into one buffer
    constexpr int FILL_BYTES = 64 * FILL_COLS * (int)sizeof(OutT);
    constexpr int GROUPS = FILL_COLS / 8;          // 8-column groups a pass
    constexpr int IMAGES = (F & FLAG_PRE) ? 2 : 1;
    constexpr int PASSES = WG_BN / FILL_COLS;
    static_assert(WG_STORE_BUFFERS == 1 || (PASSES * IMAGES) % 2 == 0,
                  "two buffers: an even number of fills a tile, so that the next tile's first takes the other one");
    static_assert(!(F & FLAG_PRE) || WG_STORE_BUFFERS == 1 || WG_PINGPONG,
                  "pre and gelu(pre) in the cooperative schedule: one buffer (the deferred GELU's)");
#pragma unroll
    for (int pass = 0; pass < PASSES; ++pass)
#pragma unroll
    for (int image_of = 2 - IMAGES; image_of < 2; ++image_of) {  // 0: pre, 1: C
        const bool activate = (F & FLAG_GELU) && image_of == 1;
        unsigned char* const image_at = image + ((pass * IMAGES + image_of - (2 - IMAGES)) % WG_STORE_BUFFERS) * FILL_BYTES;
        const int j_pass = j_tile + pass * FILL_COLS;
        // the image holds pre: gelu(pre) later, under the next main loop (pingpong: here, while the
        // other warpgroup multiplies)
        if ((F & FLAG_PRE) && activate && pass == PASSES - 1 && !WG_PINGPONG) {
            deferred = DeferredGelu{0, i_wg, j_pass};
            break;
        }
        if (F & (FLAG_DGELU | FLAG_RESIDUAL)) {  // pre (or the residual) is in the image (its read-out waited
                                                  // for when the load was issued)
            mbar_wait(prefetch.bar, prefetch.tiles++ & 1);
        } else {
            // the copy engine has read this buffer's last stores (with two buffers, the other's newest
            // group may still be reading)
            if (t == 0) tma_store_wait_read<WG_STORE_BUFFERS - 1>();
            named_barrier(bar, 128);
        }
        // (this thread's row of the image through a zero the compiler cannot see through: else it
        // computes every pass's addresses ahead while the accumulators are live, and spills)
        const int zero = opaque_zero();
        unsigned char* const row_at = image_at + r * 128 + zero;
        const floatX* const bias_at = bias + (WG_BIAS_SMEM ? pass * FILL_COLS : j_pass) + cc + zero;
        // FLAG_DGELU, FLAG_RESIDUAL: the image's pairs (pre, or the residual) read READ_AHEAD groups ahead of
        // the group they feed. Read where they are used, each read waits behind the store before it (the
        // compiler cannot tell the two addresses apart): a shared-memory latency a pair, the likely part of
        // what the residual GEMMs lost on an H100 in that form (0.67x / 0.77x cuBLASLt against the plain
        // forward's 0.97x, reports/train-h100/4df7f1a; this form is untimed: the probe's read_inline is the
        // old one). Ahead, the next groups' reads are in flight while this one computes and stores.
        // (No pair is read after its own store: each is read once, before its group is computed.)
        constexpr bool READS = (F & (FLAG_DGELU | FLAG_RESIDUAL)) != 0;
        constexpr int READ_AHEAD = 2;
        Duo<OutT> read_in[READ_AHEAD + 1][2];  // a ring of groups' pairs, rows r and r + 8 (registers: unrolled)
        if (READS)
#pragma unroll
            for (int g = 0; g < READ_AHEAD && g < GROUPS; ++g)
#pragma unroll
                for (int h = 0; h < 2; ++h) read_in[g][h] = *image_pair<OutT>(row_at, g, h, r, cc);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            if (READS && g + READ_AHEAD < GROUPS)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    read_in[(g + READ_AHEAD) % (READ_AHEAD + 1)][h] = *image_pair<OutT>(row_at, g + READ_AHEAD, h, r, cc);
            const int q = pass * GROUPS + g;      // the 8-column group of the tile
            const int j = j_pass + 8 * g + cc;    // this thread's first column of it in C
            // gelu(pre)'s fill reads pre as stored from acc, where pre's fill left it: no bias, no rounding
            const bool pre_in_acc = (F & FLAG_PRE) && activate;
            float b0 = 0.0f, b1 = 0.0f;
            if ((F & FLAG_BIAS) && !pre_in_acc && j < cols) {    // (cols % 4 == 0: j + 1 is inside too)
                const Duo<floatX> pair = *reinterpret_cast<const Duo<floatX>*>(bias_at + 8 * g);
                b0 = to_f32(pair.v[0]);
                b1 = to_f32(pair.v[1]);
            }
            // box g / BOX_GROUPS; the pair's bytes in its box row, and their 16-byte chunk
            unsigned char* const box = row_at + (g / BOX_GROUPS) * WG_BOX_BYTES;
            const int byte = ((g % BOX_GROUPS) * 8 + cc) * (int)sizeof(OutT), chunk = byte >> 4;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int y = r + 8 * h;
                float v0 = acc[4 * q + 2 * h], v1 = acc[4 * q + 2 * h + 1];
                if (!pre_in_acc) {  // (not even + 0: it would turn pre's -0 into +0)
                    v0 += b0;
                    v1 += b1;
                }
                // (the pair's address spelled out here and at the store: held in one variable, it changed
                // the other modules' PTX, which the H200 has timed as they are)
                if (F & FLAG_DGELU) {  // of dx as stored, at pre's pair (finish_value's arithmetic)
                    const Duo<OutT> x = read_in[g % (READ_AHEAD + 1)][h];
                    v0 = gelu_tanh_backward(to_f32(x.v[0]), to_f32(from_f32<floatX>(v0)));
                    v1 = gelu_tanh_backward(to_f32(x.v[1]), to_f32(from_f32<floatX>(v1)));
                }
                if (F & FLAG_RESIDUAL) {  // the product as stored, added to the residual's pair (finish_value's)
                    const Duo<OutT> x = read_in[g % (READ_AHEAD + 1)][h];
                    v0 = to_f32(x.v[0]) + to_f32(from_f32<floatX>(v0));
                    v1 = to_f32(x.v[1]) + to_f32(from_f32<floatX>(v1));
                }
                if ((F & FLAG_PRE) && !activate) {  // pre's fill: pre as stored, for gelu(pre)'s
                    acc[4 * q + 2 * h] = to_f32(from_f32<floatX>(v0));
                    acc[4 * q + 2 * h + 1] = to_f32(from_f32<floatX>(v1));
                }
                if (activate) {
                    v0 = gelu_tanh(v0);
                    v1 = gelu_tanh(v1);
                }
                const Duo<OutT> out{{from_f32<OutT>(v0), from_f32<OutT>(v1)}};
                *reinterpret_cast<Duo<OutT>*>(box + 8 * h * 128 + ((chunk ^ (y % 8)) << 4) + (byte & 15)) = out;
            }
        }
        WG_FENCE_PROXY_ASYNC();   // this thread's writes, visible to the copy engine
        named_barrier(bar, 128);  // everyone's
        if (t == 0) {
#if WG_STORE_F32
            if (chain != nullptr && pass == 0) chain_wait(chain, split);  // the share's earlier slices added
#endif
#pragma unroll
            for (int b = 0; b < FILL_COLS / BOX_COLS; ++b) {
                const unsigned src = smem_u32(image_at + b * WG_BOX_BYTES);
                if (reduce) tma_reduce_add_3d(map, src, j_pass + BOX_COLS * b, i_wg, plane);
                else tma_store_3d(image_of == 0 ? pre_map : map, src, j_pass + BOX_COLS * b, i_wg, plane);
            }
            tma_store_commit();
#if WG_STORE_F32
            if (chain != nullptr && pass == PASSES - 1) {  // this slice's additions done: the next slice's turn
                tma_store_wait_all();                        // (or, after the last, the counter's 0 again)
                chain_release(chain, chain_next);
            }
#endif
        }
    }
}
#endif

// A consumer warpgroup's main loop over one work item's nk k-blocks of the ring: for each of its
// WG_MH m64 blocks h (rows a_row0 + 64 h of the slot's A tile), acc[h] += A @ B and, with SUMS,
// sums[h] += A @ ones (the row sums). hand_on (pingpong; 0: none): the named barrier to arrive at
// once the item's last multiplies are issued, so that the other warpgroup's queue behind them at the
// tensor cores while these drain. deferred (WG_STORE_PRE): the previous tile's GELU, a step after each
// k-block's multiplies are issued (image: this warpgroup's; map: C's; bar: its named barrier; t: its
// thread); prefetch (WG_STORE_PREFETCH): this tile's pre (or residual) into the image, once a k-block's
// multiplies are issued (the first, or in the cooperative schedule the middle one: below; pre_map: its
// tensor map). SUMS is a template parameter, not a test inside the
// loop: a run-time branch around wgmma_rowsum between wgmma_fence and wgmma_commit put a wgmma in a
// divergent path, and ptxas then serialised every wgmma of the kernel ("WG.AR in divergent path").
template <bool SUMS>
__device__ __forceinline__ void consume_item(float (&acc)[WG_MH][WG_BN / 2], float (&sums)[WG_MH][4], int nk, int& it,
                                             int a_row0, int hand_on,
                                             unsigned a_ring, unsigned b_ring, unsigned ones, unsigned full_bar,
                                             unsigned empty_bar, DeferredGelu& deferred, unsigned char* image,
                                             const TmaDescriptor* map, int bar, int t, const PreFetch& prefetch,
                                             const TmaDescriptor* pre_map) {
    for (int kb = 0; kb < nk; ++kb, ++it) {
        const int s = it % WG_STAGES;
        mbar_wait(full_bar + 8 * s, (it / WG_STAGES) & 1);
        const unsigned a_tile = a_ring + s * WG_A_BYTES, b_tile = b_ring + s * WG_B_BYTES;
        fence_accumulators(acc);
        fence_accumulators(sums);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < TILE_K / 16; ++kk) {
            const unsigned long long db = wgmma_operand_desc(B_KMAJOR, b_tile, 0, kk);
#pragma unroll
            for (int h = 0; h < WG_MH; ++h) {
                const unsigned long long da = wgmma_operand_desc(A_KMAJOR, a_tile, a_row0 + 64 * h, kk);
                wgmma_tile(acc[h], da, db);
                if constexpr (SUMS) wgmma_rowsum(sums[h], da, wgmma_operand_desc(true, ones, 0, kk));
            }
        }
        wgmma_commit();
        fence_accumulators(acc);
        fence_accumulators(sums);
#if WG_STORE_PRE
        if (deferred.step < GELU_STEPS) deferred_gelu_step(deferred, image, map, bar, t);  // under the multiplies
#endif
#if WG_STORE_PREFETCH
        // under the multiplies: in the pingpong schedule from the first k-block (this warpgroup's last store
        // was issued before the other's whole main loop, so it has long been read); in the cooperative one
        // halfway, since the last store was issued just now and prefetch_pre's wait for its read would
        // hold the warpgroup's next multiplies up
        if (kb == (WG_PINGPONG ? 0 : nk / 2)) prefetch_pre(prefetch, image, pre_map, t);
#endif
        if (kb > 0) {  // k-block kb-1's multiplies are done: hand its slot back to the producer
            wgmma_wait<1>();
            fence_accumulators(acc);
            fence_accumulators(sums);
            release_slot(empty_bar + 8 * ((it - 1) % WG_STAGES));
        }
    }
    if (hand_on) named_arrive(hand_on, 256);
    wgmma_wait<0>();
    fence_accumulators(acc);
    fence_accumulators(sums);
    if (nk > 0) release_slot(empty_bar + 8 * ((it - 1) % WG_STAGES));  // the last slot, for the next item
}

// Work item `work` (tile-major within a k slice): its tile of C (tm, tn), k slice, first k and k-blocks.
// In a cluster the items are the cluster's: WG_CLUSTER tiles of C one above the other (tile rows
// WG_CLUSTER tm' + rank, tm' over cluster_rows = cdiv(tiles_m, WG_CLUSTER), group_m / WG_CLUSTER of
// them walked together: as many tile rows as alone), which share their B tile; a last row past C
// (tiles_m odd) is multiplied on the zeros TMA loads there, and its stores are clipped.
struct WorkItem {
    int tm, tn, split, k_lo, nk;
};
__device__ __forceinline__ WorkItem work_item(int work, int cluster_rows, int tiles_n, int group_m, int depth,
                                              int k_split, int rank) {
    WorkItem w;
    const int tiles = cluster_rows * tiles_n;
    w.split = work / tiles;
    tile_of(work % tiles, cluster_rows, tiles_n, WG_CLUSTER > 1 ? max(1, group_m / WG_CLUSTER) : group_m, w.tm, w.tn);
    w.tm = w.tm * WG_CLUSTER + rank;
    w.k_lo = w.split * k_split;
    w.nk = (min(depth, w.k_lo + k_split) - w.k_lo + TILE_K - 1) / TILE_K;
    return w;
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_CTAS) WG_CLUSTER_DIMS
gemm_wgmma(const __grid_constant__ TmaDescriptor tma_a, const __grid_constant__ TmaDescriptor tma_b,
           const __grid_constant__ TmaDescriptor tma_c, const __grid_constant__ TmaDescriptor tma_pre, void* c,
           const floatX* bias, floatX* pre, int rows, int cols, int depth, void* rowsum, void* chain, int k_split,
           int group_m, int flags) {
    // tma_c: C's 3-D tensor map (boxes of 64 rows x 128 bytes, swizzled; dW's split-K slices its planes)
    // where WG_STORE_COLS > 0, else never read; tma_pre: pre's (or the residual's), as C's, read with
    // FLAG_PRE there (stored) or WG_STORE_PREFETCH (loaded) only
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned a_ring = base, b_ring = base + WG_STAGES * WG_A_BYTES, ones = base + WG_RING_BYTES;
    const unsigned epi = ones + 1024;  // + WG_STAGE_BYTES * consumer warpgroup (1024-aligned: the swizzle)
    const unsigned full_bar = epi + WG_CONSUMERS * WG_STAGE_BYTES, empty_bar = full_bar + 8 * WG_STAGES;  // + 8 * slot
    const unsigned pre_bar = empty_bar + 8 * WG_STAGES;  // WG_STORE_PREFETCH: + 8 * consumer warpgroup

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int tiles_m = (rows + WG_BM - 1) / WG_BM, tiles_n = (cols + WG_BN - 1) / WG_BN;
    const int cluster_rows = (tiles_m + WG_CLUSTER - 1) / WG_CLUSTER;
    const int slices = (depth + k_split - 1) / k_split;  // k_split: a multiple of 64
    const int items = cluster_rows * tiles_n * slices;
    // this block's items: first, first + stride, ... (a cluster's blocks take the same ones, each its row)
#if WG_CLUSTER > 1
    const int rank = (int)cluster_ctarank();
#else
    const int rank = 0;
#endif
    const int first = blockIdx.x / WG_CLUSTER, stride = gridDim.x / WG_CLUSTER;

    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);                        // the producer's expect_tx arrival
            mbar_init(empty_bar + 8 * s, WG_SLOT_READERS);         // every thread that reads the slot
        }
        if (WG_STORE_PREFETCH)
            for (int g = 0; g < WG_CONSUMERS; ++g) mbar_init(pre_bar + 8 * g, 1);  // the prefetch's expect_tx arrival
        MBAR_FENCE_INIT();
    }
    if ((flags & FLAG_ROWSUM) && tid < 256) {  // the tile of ones: 1024 bytes, 4 a thread
        const floatX one = from_f32<floatX>(1.0f);
        floatX* p = reinterpret_cast<floatX*>(smem_raw + (ones - smem_u32(smem_raw))) + 2 * tid;
        p[0] = one;
        p[1] = one;
        WG_FENCE_PROXY_ASYNC();
    }
    __syncthreads();
#if WG_CLUSTER > 1
    cluster_sync();  // every block's mbarriers initialised before any copy or arrival reaches them
#endif

    // ring position: k-blocks this block has moved through the ring so far (slot it % WG_STAGES,
    // pass it / WG_STAGES, whose parity the barriers' phases follow)
    int it = 0;
    if (warp == WG_CONSUMERS * 4) {  // the producer warp: one lane issues every copy
        if (lane == 0)
            for (int work = first; work < items; work += stride) {
                const WorkItem w = work_item(work, cluster_rows, tiles_n, group_m, depth, k_split, rank);
                for (int kb = 0; kb < w.nk; ++kb, ++it) {
                    const int s = it % WG_STAGES;
                    mbar_wait(empty_bar + 8 * s, ((it / WG_STAGES) & 1) ^ 1);  // slot free (first pass: at once)
                    mbar_expect_tx(full_bar + 8 * s, WG_A_BYTES + WG_B_BYTES);
                    const int k0 = w.k_lo + kb * TILE_K;
                    tma_tile<A_KMAJOR, WG_BM>(&tma_a, a_ring + s * WG_A_BYTES, w.tm * WG_BM, k0, full_bar + 8 * s);
#if WG_CLUSTER > 1
                    tma_tile_multicast<B_KMAJOR, WG_BN>(&tma_b, b_ring + s * WG_B_BYTES, w.tn * WG_BN, k0,
                                                        full_bar + 8 * s, rank);
#else
                    tma_tile<B_KMAJOR, WG_BN>(&tma_b, b_ring + s * WG_B_BYTES, w.tn * WG_BN, k0, full_bar + 8 * s);
#endif
                }
            }
#if WG_CLUSTER > 1
        cluster_sync();  // (the end of the kernel's: see there)
#endif
        return;
    }

    const int wg = warp >> 2, t = tid & 127;  // consumer warpgroup, thread in it
    const int a_row0 = WG_PINGPONG ? 0 : 64 * wg;  // its first row of each tile (and of the slot's A tile)
    float* const stage = reinterpret_cast<float*>(smem_raw + (epi + wg * WG_STAGE_BYTES - smem_u32(smem_raw)));
    float acc[WG_MH][WG_BN / 2], sums[WG_MH][4];
    unsigned char* const image = reinterpret_cast<unsigned char*>(stage);
    DeferredGelu deferred{GELU_STEPS, 0, 0};
    PreFetch prefetch{pre_bar + 8 * wg, 0, 0, 0, rows, cols};
    // pingpong: warpgroup 0 has the first turn (the block's item 0): warpgroup 1 arrives for it
    if (WG_PINGPONG && wg == 1 && first < items) named_arrive(WG_TURN_BAR, 256);
    for (int work = first, n = 0; work < items; work += stride, ++n) {
        const WorkItem w = work_item(work, cluster_rows, tiles_n, group_m, depth, k_split, rank);
        if (WG_PINGPONG && n % 2 != wg) {  // the other warpgroup's item: its k-blocks pass this one by
            it += w.nk;
            continue;
        }
        // the same for the whole block; only dW's modules (A MN-major: dy^T) carry the row sums
        const bool with_sums = !A_KMAJOR && (flags & FLAG_ROWSUM) && w.tn == 0;
#pragma unroll
        for (int h = 0; h < WG_MH; ++h) {
#pragma unroll
            for (int i = 0; i < WG_BN / 2; ++i) acc[h][i] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) sums[h][i] = 0.0f;
        }
        if (WG_PINGPONG) named_barrier(WG_TURN_BAR + wg, 256);  // this warpgroup's turn at the tensor cores
        // pingpong: the block's next item (the other warpgroup's) multiplies while this one writes out
        const int hand_on = WG_PINGPONG && work + stride < items ? WG_TURN_BAR + 1 - wg : 0;
        prefetch.i = w.tm * WG_BM + a_row0;  // (WG_STORE_PREFETCH: one m64 block a warpgroup)
        prefetch.j = w.tn * WG_BN;
#if WG_BIAS_SMEM
        // this thread's pair of the tile's bias, loaded now and put into shared memory after the main loop
        unsigned bias_pair = 0;
        const int j_bias = w.tn * WG_BN + 2 * t;  // (cols % 8 == 0 here: j_bias + 1 is inside too)
        if ((flags & FLAG_BIAS) && 2 * t < WG_BN && j_bias < cols) bias_pair = *reinterpret_cast<const unsigned*>(bias + j_bias);
#endif
        if (with_sums)
            consume_item<true>(acc, sums, w.nk, it, a_row0, hand_on, a_ring, b_ring, ones, full_bar, empty_bar,
                               deferred, image, &tma_c, 1 + wg, t, prefetch, &tma_pre);
        else
            consume_item<false>(acc, sums, w.nk, it, a_row0, hand_on, a_ring, b_ring, ones, full_bar, empty_bar,
                                deferred, image, &tma_c, 1 + wg, t, prefetch, &tma_pre);
#if WG_STORE_PRE
        while (deferred.step < GELU_STEPS) deferred_gelu_step(deferred, image, &tma_c, 1 + wg, t);  // (a short loop)
#endif

        // the epilogue, per m64 block h: rows i_wg .. i_wg + 63 of C, the tile's columns from j_tile
        const int j_tile = w.tn * WG_BN;
#if WG_BIAS_SMEM
        // (the last tile's epilogue read its copy before its last barrier; this one's reads come after
        // the first barrier of its own)
        floatX* const tile_bias = reinterpret_cast<floatX*>(smem_raw + (ones - smem_u32(smem_raw)) + 512 * wg);
        if ((flags & FLAG_BIAS) && 2 * t < WG_BN) *reinterpret_cast<unsigned*>(tile_bias + 2 * t) = bias_pair;
#define WG_EPILOGUE_BIAS tile_bias
#else
#define WG_EPILOGUE_BIAS bias
#endif
        int r, cc;  // this thread's first accumulator (wgmma_acc_coords)
        wgmma_acc_coords(t, 0, r, cc);
        // the pointers offset by a zero the compiler cannot see through, per tile: else it hoists
        // base + 16 j (64 of them, 64-bit) out of the work loop and spills them
        const int zero = opaque_zero();
#if WG_STORE_COLS == 0  // (the staged epilogue's view of C; the TMA store writes through tma_c)
        const Out o{static_cast<char*>(c) + zero, bias + zero, pre + zero, rows, cols, flags};
#endif
#pragma unroll
        for (int h = 0; h < WG_MH; ++h) {
            const int i_wg = w.tm * WG_BM + a_row0 + 64 * h, i0 = i_wg + r;
            if (with_sums && cc == 0) {  // column 0 of the row sums: registers 0 (row r) and 2 (row r + 8)
                float* out = static_cast<float*>(rowsum) + (size_t)w.split * rows;
                if (i0 < rows) out[i0] = sums[h][0];
                if (i0 + 8 < rows) out[i0 + 8] = sums[h][2];
            }
            // one copy of the epilogue per flag set the launchers use, flags folded at compile time
#if WG_STORE_COLS > 0
#define WG_STORE_EPILOGUE_CHAINED(F, OutT, plane, reduce, chain_at, split, chain_next)                    \
    wgmma_store_epilogue<F, OutT>(acc[h], WG_EPILOGUE_BIAS + zero, &tma_c, &tma_pre, image, 1 + wg, t, i_wg, j_tile, cols, plane, \
                                  reduce, deferred, prefetch, chain_at, split, chain_next)
#define WG_STORE_EPILOGUE(F, OutT, plane, reduce) WG_STORE_EPILOGUE_CHAINED(F, OutT, plane, reduce, nullptr, 0, 0)
#if WG_STORE_F32  // dW: its float32 k slice (FLAG_PARTIAL), or added to the float32 C (FLAG_ACCUMULATE),
                  // with FLAG_SERIAL each k slice in turn (its 64-row share's counter in chain)
            if (flags & FLAG_PARTIAL) WG_STORE_EPILOGUE(0, float, w.split, false);
            else if (flags & FLAG_SERIAL)
                WG_STORE_EPILOGUE_CHAINED(0, float, 0, true, static_cast<int*>(chain) + (size_t)(i_wg / 64) * tiles_n + w.tn,
                                          w.split, w.split + 1 == slices ? 0 : w.split + 1);
            else WG_STORE_EPILOGUE(0, float, 0, (flags & FLAG_ACCUMULATE) != 0);
#elif WG_STORE_PRE  // matmul_gelu's forward: pre and gelu(pre) (a module of its own: beside the
            WG_STORE_EPILOGUE(FLAG_BIAS | FLAG_GELU | FLAG_PRE, floatX, 0, false);  // others, ptxas spilled)
#elif WG_STORE_DGELU  // the MLP projection's dx times gelu'(pre), pre prefetched into the image
            WG_STORE_EPILOGUE(FLAG_DGELU, floatX, 0, false);
#elif WG_STORE_RESIDUAL  // a projection's output added to the residual stream, prefetched into the image
            if (flags & FLAG_BIAS) WG_STORE_EPILOGUE(FLAG_BIAS | FLAG_RESIDUAL, floatX, 0, false);
            else WG_STORE_EPILOGUE(FLAG_RESIDUAL, floatX, 0, false);
#else
            switch (flags & (FLAG_BIAS | FLAG_GELU)) {  // (the host allows nothing else here)
            case 0: WG_STORE_EPILOGUE(0, floatX, 0, false); break;                              // dx
            case FLAG_BIAS: WG_STORE_EPILOGUE(FLAG_BIAS, floatX, 0, false); break;              // forward
            default: WG_STORE_EPILOGUE(FLAG_BIAS | FLAG_GELU, floatX, 0, false);                // forward_gelu
            }
#endif
#undef WG_STORE_EPILOGUE
#undef WG_STORE_EPILOGUE_CHAINED
#undef WG_EPILOGUE_BIAS
#else
#define WG_EPILOGUE(F) wgmma_epilogue<F>(o, acc[h], stage, 1 + wg, t, i_wg, j_tile, w.split)
            switch (flags & ~FLAG_ROWSUM) {
            case FLAG_VEC: WG_EPILOGUE(FLAG_VEC); break;                                           // dx, no bias
            case FLAG_VEC | FLAG_BIAS: WG_EPILOGUE(FLAG_VEC | FLAG_BIAS); break;                   // forward
            case FLAG_VEC | FLAG_PARTIAL: WG_EPILOGUE(FLAG_VEC | FLAG_PARTIAL); break;             // split-K
            case FLAG_VEC | FLAG_ACCUMULATE: WG_EPILOGUE(FLAG_VEC | FLAG_ACCUMULATE); break;       // dW
            case FLAG_VEC | FLAG_ACCUMULATE | FLAG_OUT_F32:                                        // dW, float32
                WG_EPILOGUE(FLAG_VEC | FLAG_ACCUMULATE | FLAG_OUT_F32);
                break;
            case FLAG_VEC | FLAG_BIAS | FLAG_GELU: WG_EPILOGUE(FLAG_VEC | FLAG_BIAS | FLAG_GELU); break;  // forward_gelu
            case FLAG_VEC | FLAG_BIAS | FLAG_GELU | FLAG_PRE: WG_EPILOGUE(FLAG_VEC | FLAG_BIAS | FLAG_GELU | FLAG_PRE); break;
            case FLAG_VEC | FLAG_DGELU: WG_EPILOGUE(FLAG_VEC | FLAG_DGELU); break;                 // dx with gelu'
            default: WG_EPILOGUE(FLAGS_RUNTIME);  // everything else: unaligned, ragged (element by element)
            }
#undef WG_EPILOGUE
#endif
        }
    }
#if WG_STORE_PRE
    while (deferred.step < GELU_STEPS) deferred_gelu_step(deferred, image, &tma_c, 1 + wg, t);  // the last tile's
#endif
#if WG_STORE_COLS > 0
    // the copy engine may still read this warpgroup's image (its last tile): the block's shared memory
    // must outlive that
    if (t == 0) tma_store_wait_all();
#endif
#if WG_CLUSTER > 1
    // no block leaves while another may still arrive at its empty barriers or copy into its ring
    cluster_sync();
#endif
}
#endif  // GEMM_WGMMA

// =================================================================================================
#ifdef GEMM_REDUCE
// C (+)= sum_s partial[s] (+ bias), the slices added in order s = 0, 1, ...; grid-stride, 4 elements
// per step with FLAG_VEC (cols % 4 == 0), else 1. flags: FLAG_BIAS, FLAG_ACCUMULATE, FLAG_OUT_F32, FLAG_VEC.
extern "C" __global__ void splitk_finish(const float* __restrict__ partial, void* c, const floatX* bias, int rows,
                                         int cols, int splits, int flags) {
    const Out o{c, bias, nullptr, rows, cols, flags};
    const size_t n = (size_t)rows * cols;
    const size_t step = (size_t)gridDim.x * blockDim.x;
    if (flags & FLAG_VEC) {
        for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n / 4; q += step) {
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int s = 0; s < splits; ++s) {
                const Quad<float> p = reinterpret_cast<const Quad<float>*>(partial + (size_t)s * n)[q];
                for (int e = 0; e < 4; ++e) v[e] += p.v[e];
            }
            finish_four(o, (int)(4 * q / cols), (int)(4 * q % cols), 0, v);
        }
    } else {
        for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += step) {
            float v = 0.0f;
            for (int s = 0; s < splits; ++s) v += partial[(size_t)s * n + q];
            finish_one(o, (int)(q / cols), (int)(q % cols), 0, v);
        }
    }
}

// partial[g, j] = sum of x[r, j] over the rows r of group g (rows_per_group of them): a block of 8
// warps covers 64 columns (2 per lane, so a warp reads 128 contiguous bytes of a row); warp w takes
// rows w, w + 8, ... of the group; the 8 warp sums are added in order.
extern "C" __global__ void __launch_bounds__(256)
colsum_partial(const floatX* __restrict__ x, float* __restrict__ partial, int n, int m, int rows_per_group) {
    __shared__ float sums[8][64];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = blockIdx.x * 64 + 2 * lane, g = blockIdx.y;
    const int r_lo = g * rows_per_group, r_hi = min(n, r_lo + rows_per_group);
    float s0 = 0.0f, s1 = 0.0f;
    for (int r = r_lo + warp; r < r_hi; r += 8) {
        if (j < m) s0 += to_f32(x[(size_t)r * m + j]);
        if (j + 1 < m) s1 += to_f32(x[(size_t)r * m + j + 1]);
    }
    sums[warp][2 * lane] = s0;
    sums[warp][2 * lane + 1] = s1;
    __syncthreads();
    if (threadIdx.x < 64) {
        float s = 0.0f;
        for (int w = 0; w < 8; ++w) s += sums[w][threadIdx.x];
        const int jj = blockIdx.x * 64 + threadIdx.x;
        if (jj < m) partial[(size_t)g * m + jj] = s;
    }
}

// out[j] += sum over g of partial[g, j], in order; out is floatX or float (FLAG_OUT_F32).
extern "C" __global__ void colsum_finish(const float* __restrict__ partial, void* out, int groups, int m, int flags) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= m) return;
    float s = 0.0f;
    for (int g = 0; g < groups; ++g) s += partial[(size_t)g * m + j];
    if (flags & FLAG_OUT_F32) {
        static_cast<float*>(out)[j] += s;
    } else {
        floatX* o = static_cast<floatX*>(out);
        o[j] = from_f32<floatX>(to_f32(o[j]) + s);
    }
}
#endif  // GEMM_REDUCE
