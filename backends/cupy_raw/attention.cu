// attention.cu: GPT-2's causal multi-head self-attention from the fused qkv (B,T,3C) into y (B,T,C),
// forward and backward. Two variants, the readable one first:
//
//   simple   one block per (query row, head, batch), no tensor cores, all float32: the row's
//            scores in shared memory, an exact softmax (max, exp, sum), then y = P v. Backward in
//            two kernels that never write the same element twice (no atomics, bitwise repeatable):
//            one block per query row computes P and dP = dy v^T for its row, delta = sum P dP, and
//            dq; one block per key row recomputes its column of P and dS = P (dP - delta) from the
//            saved logsumexp and delta, and computes dk and dv.
//   flash    FlashAttention-2 on tensor cores (mma.sync.m16n8k16, bf16/fp16 in, float32
//            accumulation): a forward block of 4 warps takes 64 FWD_M_TILES queries (16 FWD_M_TILES
//            per warp: FWD_M_TILES = 2 at heads of up to 64, so each K or V fragment read from shared
//            memory feeds two multiplies; 1 above, where the accumulators need the registers); 64-key
//            tiles of K and V stream through two stages of shared memory by cp.async, tile j + 1's
//            copies in flight under tile j's math; fragments come by ldmatrix (.trans where the
//            operand is stored k-major, V in P V: no tile is transposed in memory); the softmax is
//            online (running row max and sum, the accumulator rescaled when the max grows), in base
//            2; no T x T matrix anywhere. The scores' accumulator fragments are the A operand of the
//            next product (P V) as they stand, converted to 16 bits: no trip through shared memory.
//            Results are staged in shared memory and written as whole 16-byte row pieces. Saved: the
//            log2-sum-exp2 L of each row and the rounding residual res = o - y (see attention.py).
//            Backward (FlashAttention-2's split, without atomics): a small kernel computes
//            delta = rowsum(dy * (y + res)); one kernel per 64-key tile walks the query tiles at or
//            after it for dK and dV; another per 64-query tile walks the key tiles at or before it
//            for dQ (so Q K^T and dY V^T are computed twice, the price of writing every gradient
//            element from exactly one block); both pipelined as the forward.
//
// Layout: q, k, v of head h at columns h*HS, C + h*HS, 2C + h*HS of a qkv row; y and dy (B,T,C);
// dqkv like qkv. Defines: floatX (the storage type), HEAD_DIM (flash: HS rounded up to a multiple of
// 16, at most 128; the padded columns are zeros in shared memory and never stored), VEC (flash: 1
// when HS and C are multiples of 8 and the pointers 16-byte aligned: cp.async tile loads and
// 16-byte stores; 0: element by element), DELTA_LANES (flash with VEC: the delta pass's lanes a
// row and head), FWD_M_TILES (flash: 1 or 2, above), MMA_FP16 (fp16).
//
// mma.sync.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane l,
// g = l / 4, c = l % 4 (each 32-bit register holds two 16-bit elements, the lower column first):
//   A (16x16, row-major)   a0: (g, 2c..2c+1)  a1: (g+8, 2c..)  a2: (g, 8+2c..)  a3: (g+8, 8+2c..)
//   B (16x8,  "col")       b0: (k = 2c..2c+1, n = g)          b1: (k = 8+2c.., n = g)
//   C (16x8,  float)       c0, c1: (g, 2c..2c+1)              c2, c3: (g+8, 2c..2c+1)
// So two C tiles side by side (16 x 16) are exactly the registers of an A operand. ldmatrix.x4
// (tensor_core.cuh) reads four 8 x 8 matrices, each lane getting (row l / 4, columns 2(l % 4)..+1)
// of each: that is an A fragment's layout, and a B fragment's where the tile holds B^T (n as its
// row, as K in Q K^T); .trans delivers the transpose, a B fragment from a tile that holds B itself
// (k as its row, as V in P V). Every tile in shared memory is row-major with a row stride padded
// by 8 elements (16 bytes), which puts the 8 rows of one ldmatrix matrix on 8 different groups of
// 4 banks: conflict-free.
#include "common.cuh"

// ---- the simple variant --------------------------------------------------------------------------

// grid (T, NH, B), block SIMPLE_THREADS, dynamic shared (HS + T) floats
extern "C" __global__ void attention_simple_forward(const floatX* __restrict__ qkv, floatX* __restrict__ y,
                                                    float* __restrict__ lse, int T, int C, int NH, float scale) {
    extern __shared__ float smem[];
    __shared__ float scratch[32];
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    float* q = smem;            // (HS)
    float* p = smem + HS;       // (t + 1) scores, then probabilities
    const floatX* base = qkv + (long long)b * T * 3 * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) q[d] = to_f32(base[(long long)t * 3 * C + d]);
    __syncthreads();
    float mx = -POS_INF_F;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        const floatX* k = base + (long long)s * 3 * C + C;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += q[d] * to_f32(k[d]);
        p[s] = dot * scale;
        mx = fmaxf(mx, p[s]);
    }
    mx = block_max(mx, scratch);
    float sum = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = block_sum(sum, scratch);  // its barriers also publish every p[s]
    const float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += p[s] * to_f32(base[(long long)s * 3 * C + 2 * C + d]);
        y[((long long)b * T + t) * C + h * HS + d] = from_f32<floatX>(acc * inv);
    }
    if (threadIdx.x == 0) lse[((long long)b * NH + h) * T + t] = mx + logf(sum);
}

// grid (T, NH, B), block SIMPLE_THREADS, dynamic shared (2 HS + 2 T) floats. For query row t:
// P[s] = exp(q.k_s scale - lse), dP[s] = dy.v_s, delta = sum_s P dP (written for the key kernel),
// dq = scale sum_s P (dP - delta) k_s.
extern "C" __global__ void attention_simple_backward_query(const floatX* __restrict__ qkv, const floatX* __restrict__ dy,
                                                           const float* __restrict__ lse, float* __restrict__ delta,
                                                           floatX* __restrict__ dqkv, int T, int C, int NH, float scale) {
    extern __shared__ float smem[];
    __shared__ float scratch[32];
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    float* q = smem;
    float* g = smem + HS;           // dy row
    float* p = smem + 2 * HS;       // (t + 1)
    float* dp = p + T;              // (t + 1)
    const floatX* base = qkv + (long long)b * T * 3 * C + h * HS;
    const long long row = ((long long)b * T + t) * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        q[d] = to_f32(base[(long long)t * 3 * C + d]);
        g[d] = to_f32(dy[row + d]);
    }
    __syncthreads();
    const float l = lse[((long long)b * NH + h) * T + t];
    float dsum = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        const floatX* k = base + (long long)s * 3 * C + C;
        const floatX* v = base + (long long)s * 3 * C + 2 * C;
        float qk = 0.0f, gv = 0.0f;
        for (int d = 0; d < HS; d++) {
            qk += q[d] * to_f32(k[d]);
            gv += g[d] * to_f32(v[d]);
        }
        p[s] = expf(qk * scale - l);
        dp[s] = gv;
        dsum += p[s] * gv;
    }
    dsum = block_sum(dsum, scratch);  // its barriers also publish p and dp
    if (threadIdx.x == 0) delta[((long long)b * NH + h) * T + t] = dsum;
    floatX* dq = dqkv + (long long)b * T * 3 * C + (long long)t * 3 * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s <= t; s++) acc += p[s] * (dp[s] - dsum) * to_f32(base[(long long)s * 3 * C + C + d]);
        dq[d] = from_f32<floatX>(acc * scale);
    }
}

// grid (T, NH, B), block SIMPLE_THREADS, dynamic shared (2 HS + 2 T) floats. For key row s:
// over the queries t >= s, P[t] = exp(q_t.k scale - lse_t), dS[t] = P (dy_t.v - delta_t);
// dv = sum_t P[t] dy_t, dk = scale sum_t dS[t] q_t.
extern "C" __global__ void attention_simple_backward_key(const floatX* __restrict__ qkv, const floatX* __restrict__ dy,
                                                         const float* __restrict__ lse, const float* __restrict__ delta,
                                                         floatX* __restrict__ dqkv, int T, int C, int NH, float scale) {
    extern __shared__ float smem[];
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    float* k = smem;
    float* v = smem + HS;
    float* p = smem + 2 * HS;   // indexed t - s
    float* ds = p + T;
    const floatX* base = qkv + (long long)b * T * 3 * C + h * HS;
    const float* lse_bh = lse + ((long long)b * NH + h) * T;
    const float* delta_bh = delta + ((long long)b * NH + h) * T;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        k[d] = to_f32(base[(long long)s * 3 * C + C + d]);
        v[d] = to_f32(base[(long long)s * 3 * C + 2 * C + d]);
    }
    __syncthreads();
    for (int t = s + threadIdx.x; t < T; t += blockDim.x) {
        const floatX* q = base + (long long)t * 3 * C;
        const floatX* g = dy + ((long long)b * T + t) * C + h * HS;
        float qk = 0.0f, gv = 0.0f;
        for (int d = 0; d < HS; d++) {
            qk += to_f32(q[d]) * k[d];
            gv += to_f32(g[d]) * v[d];
        }
        const float pt = expf(qk * scale - lse_bh[t]);
        p[t - s] = pt;
        ds[t - s] = pt * (gv - delta_bh[t]);
    }
    __syncthreads();
    floatX* out = dqkv + (long long)b * T * 3 * C + (long long)s * 3 * C + h * HS;
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float dk = 0.0f, dv = 0.0f;
        for (int t = s; t < T; t++) {
            dk += ds[t - s] * to_f32(base[(long long)t * 3 * C + d]);
            dv += p[t - s] * to_f32(dy[((long long)b * T + t) * C + h * HS + d]);
        }
        out[C + d] = from_f32<floatX>(dk * scale);
        out[2 * C + d] = from_f32<floatX>(dv);
    }
}

// ---- the flash variant ---------------------------------------------------------------------------
#ifdef HEAD_DIM
#include "tensor_core.cuh"

#define FLASH_THREADS 128                 // 4 warps
#define KEYS 64                           // keys per K/V tile; keys per dK/dV block; queries per dQ block
#define FWD_ROWS (64 * FWD_M_TILES)       // queries per forward block: 16 FWD_M_TILES rows per warp
#define STRIDE (HEAD_DIM + 8)             // padded row stride of a tile in shared memory
#define DK (HEAD_DIM / 16)                // k-steps over the head dimension
#define DN (HEAD_DIM / 8)                 // n8 tiles over the head dimension (even: HEAD_DIM % 16 == 0)
// A head's row of L (and of delta) in the (B, NH, L_STRIDE(T)) float arrays: T padded to a multiple of 4
// floats, so that every row starts on a 16-byte boundary, as the wgmma kernels' TMA boxes of it must
#define L_STRIDE(T) (((T) + 3) & ~3)

typedef unsigned int u32;

__device__ __forceinline__ u32 pack2(float lo, float hi) {  // two floats -> one register of floatX pair
    const floatX a = from_f32<floatX>(lo), b = from_f32<floatX>(hi);
    const unsigned short ua = *reinterpret_cast<const unsigned short*>(&a);
    const unsigned short ub = *reinterpret_cast<const unsigned short*>(&b);
    return (u32)ua | ((u32)ub << 16);
}

__device__ __forceinline__ const unsigned char* bytes(const floatX* p) {
    return reinterpret_cast<const unsigned char*>(p);
}

// The A fragment of rows r0..r0+15, columns k0..k0+15 of a tile: ldmatrix's four matrices are
// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0, a1, a2, a3.
__device__ __forceinline__ void load_a(u32 (&a)[4], const floatX* s, int r0, int k0) {
    const int lane = threadIdx.x % 32;
    ldsm_x4<false>(a, bytes(s + (r0 + lane % 16) * STRIDE + k0 + 8 * (lane / 16)));
}

// The B fragments of two n8 tiles (n0.. and n0+8..) over k0..k0+15 from a tile that holds B^T
// (row n of the tile is column n of B: K in Q K^T): matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
// (n 8-15, k 0-7), (n 8-15, k 8-15) are b[0][0], b[0][1], b[1][0], b[1][1].
__device__ __forceinline__ void load_b_pair(u32 (&b)[2][2], const floatX* s, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    u32 r[4];
    ldsm_x4<false>(r, bytes(s + (n0 + 8 * (lane / 16) + lane % 8) * STRIDE + k0 + 8 * ((lane / 8) % 2)));
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// The same fragments from a tile that holds B itself (row k of the tile is row k of B: V in P V):
// ldmatrix.trans of (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15). No tile is
// ever transposed in memory.
__device__ __forceinline__ void load_bt_pair(u32 (&b)[2][2], const floatX* s, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    u32 r[4];
    ldsm_x4<true>(r, bytes(s + (k0 + lane % 16) * STRIDE + n0 + 8 * (lane / 16)));
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

// acc (16 rows x 8 n8 tiles) += a (16 x 16) times the two n8 tiles of b
__device__ __forceinline__ void mma_pair(float (*acc)[4], int n, const u32 (&a)[4], const u32 (&b)[2][2]) {
    mma_16816(acc[n], a, b[0]);
    mma_16816(acc[n + 1], a, b[1]);
}

// The A operand for k-step kk (columns 16kk..16kk+15) from two float C tiles 2kk and 2kk+1.
__device__ __forceinline__ void c_to_a(u32 (&a)[4], const float (*acc)[4], int kk) {
    a[0] = pack2(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = pack2(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = pack2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = pack2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// Rows row0..row0+ROWS-1 of one head (row stride ld in global memory) into a ROWS x STRIDE tile of
// shared memory; rows >= T and columns >= HS are zeros. VEC: 16-byte cp.async copies, which the
// caller commits and waits for; else element by element (visible after the caller's barrier).
template <int ROWS>
__device__ __forceinline__ void load_tile(floatX* s, const floatX* g, long long ld, int row0, int T, int HS) {
#if VEC
    for (int i = threadIdx.x; i < ROWS * (HEAD_DIM / 8); i += FLASH_THREADS) {
        const int r = i / (HEAD_DIM / 8), d = (i % (HEAD_DIM / 8)) * 8;
        const bool in = row0 + r < T && d < HS;
        cp_async16(s + r * STRIDE + d, in ? g + (long long)(row0 + r) * ld + d : g, in);
    }
#else
    for (int i = threadIdx.x; i < ROWS * HEAD_DIM; i += FLASH_THREADS) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        s[r * STRIDE + d] = (row0 + r < T && d < HS) ? g[(long long)(row0 + r) * ld + d] : from_f32<floatX>(0.0f);
    }
#endif
}

// The other way: a staged ROWS x STRIDE tile to rows row0.. (< T), columns < HS, of global memory.
template <int ROWS>
__device__ __forceinline__ void store_tile(floatX* g, long long ld, const floatX* s, int row0, int T, int HS) {
#if VEC
    for (int i = threadIdx.x; i < ROWS * (HEAD_DIM / 8); i += FLASH_THREADS) {
        const int r = i / (HEAD_DIM / 8), d = (i % (HEAD_DIM / 8)) * 8;
        if (row0 + r < T && d < HS) store_pack(g + (long long)(row0 + r) * ld + d, load_pack(s + r * STRIDE + d));
    }
#else
    for (int i = threadIdx.x; i < ROWS * HEAD_DIM; i += FLASH_THREADS) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        if (row0 + r < T && d < HS) g[(long long)(row0 + r) * ld + d] = s[r * STRIDE + d];
    }
#endif
}

// A warp's 16 x HEAD_DIM accumulator (rows r0.., scaled) into a staged tile as floatX pairs.
__device__ __forceinline__ void stage_rows(floatX* s, int r0, const float (*acc)[4], float scale_a, float scale_b) {
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
    for (int n = 0; n < DN; n++) {
        *reinterpret_cast<u32*>(s + (r0 + g) * STRIDE + 8 * n + 2 * c) = pack2(acc[n][0] * scale_a, acc[n][1] * scale_a);
        *reinterpret_cast<u32*>(s + (r0 + g + 8) * STRIDE + 8 * n + 2 * c) = pack2(acc[n][2] * scale_b, acc[n][3] * scale_b);
    }
}

// The pipeline of every flash kernel: tile j + 1's copies are issued before tile j's math, into the
// other of two stages, and waited for (cp.async.wait_group) only at the top of iteration j + 1.
__device__ __forceinline__ void await_tile(bool more_issued) {
    if (more_issued) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
}

// K and V rows k0.. of one head into a stage (K, then V KEYS rows after it).
__device__ __forceinline__ void load_kv(floatX* stage, const floatX* base, long long ld, int C, int k0, int T, int HS) {
    load_tile<KEYS>(stage, base + C, ld, k0, T, HS);
    load_tile<KEYS>(stage + KEYS * STRIDE, base + 2 * C, ld, k0, T, HS);
}

// Step j of the forward's and dQ's walk over key tiles, two stages of K and V at skv (stage 0 loaded
// and committed before the walk): issues tile j + 1's copies if there is one, waits for tile j, and
// returns its stage.
__device__ __forceinline__ const floatX* kv_step(floatX* skv, const floatX* base, long long ld, int C, int j,
                                                 int n_tiles, int T, int HS) {
    const bool more = j + 1 < n_tiles;
    if (more) {
        load_kv(skv + ((j + 1) % 2) * 2 * KEYS * STRIDE, base, ld, C, (j + 1) * KEYS, T, HS);
        cp_async_commit();
    }
    await_tile(more);
    return skv + (j % 2) * 2 * KEYS * STRIDE;
}

// The online softmax of one 16-row tile of scores s (the C layout: rows row_a = its first row + g and
// row_a + 8; keys k0 + 8n + 2c + (e & 1)), in place: masked where MASKED (a key after its row, or at
// or past T), the running max m (in base 2: of s scale_log2) and sum l of the two rows updated, s
// turned into P = exp2(s scale_log2 - m), one FMA and one exp2 a score; corr gets exp2(m_old - m_new),
// the factor the output accumulator must be scaled by before P V is added to it. The
// max is taken over the raw scores and scaled once a row (scale_log2 > 0 keeps the order).
template <bool MASKED, int NT>
__device__ __forceinline__ void softmax_tile(float (*s)[4], float (&m_run)[2], float (&l_run)[2], float (&corr)[2],
                                             int row_a, int k0, int T, float scale_log2) {
    const int c = threadIdx.x % 4, row_b = row_a + 8;
    float mx[2] = {-POS_INF_F, -POS_INF_F};
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (MASKED) {
                const int key = k0 + n * 8 + 2 * c + (e & 1), row = e < 2 ? row_a : row_b;
                if (key > row || key >= T) s[n][e] = -POS_INF_F;
            }
            mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
        }
    float rowsum[2] = {0.0f, 0.0f}, neg_m[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        // every row's key 0 is in tile 0, so the max is finite from then on
        const float m_new = fmaxf(m_run[r], mx[r] * scale_log2);
        corr[r] = exp2f(m_run[r] - m_new);
        m_run[r] = m_new;
        neg_m[r] = -m_new;
    }
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(fmaf(s[n][e], scale_log2, neg_m[e >> 1]));
            s[n][e] = p;
            rowsum[e >> 1] += p;
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        rowsum[r] += __shfl_xor_sync(0xffffffffu, rowsum[r], 1);
        rowsum[r] += __shfl_xor_sync(0xffffffffu, rowsum[r], 2);
        l_run[r] = l_run[r] * corr[r] + rowsum[r];
    }
}

// softmax_scores: softmax_tile with the mask where edge (a tile that holds a key after one of the
// rows, or at or past T; two copies of the code, so that the tiles wholly before the diagonal, nearly
// all of them, spend no instruction on a mask). online_softmax: that, then the output accumulator o
// rescaled by corr. NT: the tile's keys / 8 (KEYS / 8 but in the wgmma forward's wider tiles).
template <int NT>
__device__ __forceinline__ void softmax_scores(float (*s)[4], float (&m_run)[2], float (&l_run)[2], float (&corr)[2],
                                               int row_a, int k0, int T, bool edge, float scale_log2) {
    if (edge) softmax_tile<true, NT>(s, m_run, l_run, corr, row_a, k0, T, scale_log2);
    else softmax_tile<false, NT>(s, m_run, l_run, corr, row_a, k0, T, scale_log2);
}
// the output accumulator's rows row_a and row_a + 8 times their corr
__device__ __forceinline__ void rescale_output(float (*o)[4], const float (&corr)[2]) {
#pragma unroll
    for (int n = 0; n < DN; n++) {
        o[n][0] *= corr[0];
        o[n][1] *= corr[0];
        o[n][2] *= corr[1];
        o[n][3] *= corr[1];
    }
}
template <int NT = KEYS / 8>
__device__ __forceinline__ void online_softmax(float (*s)[4], float (&m_run)[2], float (&l_run)[2], float (*o)[4],
                                               int row_a, int k0, int T, bool edge, float scale_log2) {
    float corr[2];
    softmax_scores<NT>(s, m_run, l_run, corr, row_a, k0, T, edge, scale_log2);
    rescale_output(o, corr);
}

// dK/dV's tile, in place: st (S^T, rows keys key_a = the thread's first key and key_a + 8, columns
// queries q0 + 8n + 2c + (e & 1)) becomes P^T = exp2(S^T scale_log2 - L) (0 for a query before its key
// where MASKED, the diagonal tile), dpt (dP^T) becomes dS^T = P^T (dP^T - delta); sl, sd: the query
// tile's L and delta, 8-byte aligned (each thread reads its two adjacent queries' values as one load).
template <bool MASKED>
__device__ __forceinline__ void dkdv_tile(float (*st)[4], float (*dpt)[4], const float* sl, const float* sd,
                                          int key_a, int q0, float scale_log2) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < KEYS / 8; n++) {
        // the thread's two queries of this n8 column group: one 8-byte load each of L and delta
        const Duo<float> l2 = *reinterpret_cast<const Duo<float>*>(sl + n * 8 + 2 * c);
        const Duo<float> d2 = *reinterpret_cast<const Duo<float>*>(sd + n * 8 + 2 * c);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int qi = n * 8 + 2 * c + (e & 1), key = e < 2 ? key_a : key_a + 8;
            float p = exp2f(fmaf(st[n][e], scale_log2, -l2.v[e & 1]));
            if constexpr (MASKED) {
                if (q0 + qi < key) p = 0.0f;
            }
            st[n][e] = p;
            dpt[n][e] = p * (dpt[n][e] - d2.v[e & 1]);
        }
    }
}
// (two copies, as online_softmax's: the tiles off the diagonal pay for no mask)
__device__ __forceinline__ void dkdv_probabilities(float (*st)[4], float (*dpt)[4], const float* sl, const float* sd,
                                                   int key_a, int q0, bool edge, float scale_log2) {
    if (edge) dkdv_tile<true>(st, dpt, sl, sd, key_a, q0, scale_log2);
    else dkdv_tile<false>(st, dpt, sl, sd, key_a, q0, scale_log2);
}

// dQ's tile, in place: s (S, rows row_a and row_a + 8, keys k0 + 8n + 2c + (e & 1)) becomes
// dS = P (dP - delta), P = exp2(S scale_log2 - L) (0 past a row or past T where MASKED); l_row, d_row:
// the two rows' L and delta.
template <bool MASKED>
__device__ __forceinline__ void dq_tile(float (*s)[4], const float (*dp)[4], const float (&l_row)[2],
                                        const float (&d_row)[2], int row_a, int k0, int T, float scale_log2) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < KEYS / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = exp2f(fmaf(s[n][e], scale_log2, -l_row[e >> 1]));
            if constexpr (MASKED) {
                const int key = k0 + n * 8 + 2 * c + (e & 1), row = e < 2 ? row_a : row_a + 8;
                if (key > row || key >= T) p = 0.0f;
            }
            s[n][e] = p * (dp[n][e] - d_row[e >> 1]);
        }
}
__device__ __forceinline__ void dq_probabilities(float (*s)[4], const float (*dp)[4], const float (&l_row)[2],
                                                 const float (&d_row)[2], int row_a, int k0, int T, bool edge,
                                                 float scale_log2) {
    if (edge) dq_tile<true>(s, dp, l_row, d_row, row_a, k0, T, scale_log2);
    else dq_tile<false>(s, dp, l_row, d_row, row_a, k0, T, scale_log2);
}

// Forward. grid (cdiv(T, FWD_ROWS), NH, B), the heaviest query tiles (the last) first; block 128:
// warp w owns queries q0 + 16 FWD_M_TILES w .. (FWD_M_TILES m16 tiles: each K and V fragment read
// from shared memory feeds that many mma). Dynamic shared: the Q tile (FWD_ROWS x STRIDE), then two
// stages of K and V tiles (KEYS x STRIDE each), floatX. The epilogue stages y in the Q tile and res
// in the K/V stages, then writes whole 16-byte row pieces.
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_forward(
        const floatX* __restrict__ qkv, floatX* __restrict__ y, floatX* __restrict__ res, float* __restrict__ lse,
        int T, int C, int NH, float scale_log2) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sq = reinterpret_cast<floatX*>(flash_smem);
    floatX* skv = sq + FWD_ROWS * STRIDE;  // stage s: K at skv + 2s KEYS STRIDE, V KEYS STRIDE after it
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const int q0 = qt * FWD_ROWS, r0 = warp * 16 * FWD_M_TILES;  // r0: this warp's first row in the tile
    const int warp_last = q0 + r0 + 16 * FWD_M_TILES - 1;
    const int n_tiles = (min(T, q0 + FWD_ROWS) + KEYS - 1) / KEYS;  // key tiles with a key <= some row
    load_tile<FWD_ROWS>(sq, base, ld, q0, T, HS);
    load_kv(skv, base, ld, C, 0, T, HS);
    cp_async_commit();
    u32 qa[FWD_M_TILES][DK][4];  // this warp's query rows as A fragments, kept for the whole walk
    float o[FWD_M_TILES][DN][4];
    float m_run[FWD_M_TILES][2], l_run[FWD_M_TILES][2];  // rows g and g + 8 of each m16 tile
#pragma unroll
    for (int mt = 0; mt < FWD_M_TILES; mt++) {
        m_run[mt][0] = m_run[mt][1] = -POS_INF_F;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < DN; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }
    for (int j = 0; j < n_tiles; j++) {
        const int k0 = j * KEYS;
        const floatX* sk = kv_step(skv, base, ld, C, j, n_tiles, T, HS);
        const floatX* sv = sk + KEYS * STRIDE;
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < FWD_M_TILES; mt++)
#pragma unroll
                for (int kk = 0; kk < DK; kk++) load_a(qa[mt][kk], sq, r0 + 16 * mt, 16 * kk);
        }
        if (k0 <= warp_last) {  // (warp-uniform) a tile wholly after this warp's rows adds nothing
            float s[FWD_M_TILES][KEYS / 8][4];  // scores: this warp's rows x 64 keys
#pragma unroll
            for (int mt = 0; mt < FWD_M_TILES; mt++)
#pragma unroll
                for (int n = 0; n < KEYS / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
            for (int n = 0; n < KEYS / 8; n += 2)
#pragma unroll
                for (int kk = 0; kk < DK; kk++) {
                    u32 kb[2][2];
                    load_b_pair(kb, sk, 8 * n, 16 * kk);
#pragma unroll
                    for (int mt = 0; mt < FWD_M_TILES; mt++) mma_pair(s[mt], n, qa[mt][kk], kb);
                }
            const bool edge = k0 + KEYS - 1 > q0 + r0 || k0 + KEYS > T;  // a key past a row, or past T
#pragma unroll
            for (int mt = 0; mt < FWD_M_TILES; mt++)
                online_softmax(s[mt], m_run[mt], l_run[mt], o[mt], q0 + r0 + 16 * mt + g, k0, T, edge, scale_log2);
#pragma unroll
            for (int kk = 0; kk < KEYS / 16; kk++) {  // o += P V over this tile's keys
                u32 pa[FWD_M_TILES][4];
#pragma unroll
                for (int mt = 0; mt < FWD_M_TILES; mt++) c_to_a(pa[mt], s[mt], kk);
#pragma unroll
                for (int n = 0; n < DN; n += 2) {
                    u32 vb[2][2];
                    load_bt_pair(vb, sv, 8 * n, 16 * kk);
#pragma unroll
                    for (int mt = 0; mt < FWD_M_TILES; mt++) mma_pair(o[mt], n, pa[mt], vb);
                }
            }
        }
        __syncthreads();  // every warp is done with this stage before iteration j + 1 refills it
    }
    floatX* sres = skv;  // the K/V stages are free now: 4 KEYS >= FWD_ROWS rows
#pragma unroll
    for (int mt = 0; mt < FWD_M_TILES; mt++) {
        const float inv_a = 1.0f / l_run[mt][0], inv_b = 1.0f / l_run[mt][1];
        const int r = r0 + 16 * mt;
        stage_rows(sq, r, o[mt], inv_a, inv_b);
#pragma unroll
        for (int n = 0; n < DN; n++)  // res = o - y, from the rounded y just staged
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int at = (r + g + (e >= 2 ? 8 : 0)) * STRIDE + 8 * n + 2 * c + (e & 1);
                const float val = o[mt][n][e] * (e < 2 ? inv_a : inv_b);
                sres[at] = from_f32<floatX>(val - to_f32(from_f32<floatX>(val)));
            }
        if (c == 0) {
            float* l = lse + ((long long)b * NH + h) * L_STRIDE(T);
            const int row_a = q0 + r + g, row_b = row_a + 8;
            if (row_a < T) l[row_a] = m_run[mt][0] + log2f(l_run[mt][0]);
            if (row_b < T) l[row_b] = m_run[mt][1] + log2f(l_run[mt][1]);
        }
    }
    __syncthreads();
    const long long out0 = (long long)b * T * C + h * HS;
    store_tile<FWD_ROWS>(y + out0, C, sq, q0, T, HS);
    store_tile<FWD_ROWS>(res + out0, C, sres, q0, T, HS);
}

#if VEC
// One lane's part of delta = rowsum(dy * o), o = y + res (the unrounded output), for the (row, head)
// whose head starts at element `at` of y, res and dy: the 16-byte pieces from element 8 part on,
// DELTA_LANES pieces apart; delta_lanes_sum adds the parts of a group of DELTA_LANES lanes
// (aligned in the warp) by a butterfly, every lane of the group getting the sum. The delta pass
// and the wgmma dQ kernel's prologue make delta with these two, so they make the same floats.
__device__ __forceinline__ float delta_part(const floatX* __restrict__ y, const floatX* __restrict__ res,
                                            const floatX* __restrict__ dy, long long at, int part, int HS) {
    float acc = 0.0f;
    for (int d = 8 * part; d < HS; d += 8 * DELTA_LANES) {
        const Pack<floatX> g = load_pack(dy + at + d), o = load_pack(y + at + d), r = load_pack(res + at + d);
#pragma unroll
        for (int e = 0; e < 8; e++) acc += to_f32(g.v[e]) * (to_f32(o.v[e]) + to_f32(r.v[e]));
    }
    return acc;
}

__device__ __forceinline__ float delta_lanes_sum(float acc) {
#pragma unroll
    for (int offset = DELTA_LANES / 2; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    return acc;
}
#endif

// delta = rowsum(dy * o), o = y + res (the unrounded output), into delta[(b NH + h) L_STRIDE(T) + t].
// VEC: DELTA_LANES lanes a (row, head) (attention.py: HEAD_DIM / 8 rounded up to a power of two, 8 at
// heads of 64), each reading 16-byte pieces of the three rows, then a butterfly over the lane group;
// the items ordered t fastest, (b NH + h) T + t, so that a warp's stores of delta are consecutive
// floats. grid cdiv(B NH T DELTA_LANES, 128), block 128. Else one warp per item, element by element:
// grid cdiv(B T NH, 4), block 128.
extern "C" __global__ void attention_flash_delta(const floatX* __restrict__ y, const floatX* __restrict__ res,
                                                 const floatX* __restrict__ dy, float* __restrict__ delta,
                                                 int B, int T, int C, int NH) {
    const int HS = C / NH;
#if VEC
    const long long item = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / DELTA_LANES;
    const int part = threadIdx.x % DELTA_LANES;
    const bool live = item < (long long)B * NH * T;  // every lane goes on to the butterfly
    const long long bh = item / T;
    const int t = (int)(item % T), h = (int)(bh % NH);
    const long long at = (bh / NH * T + t) * C + h * HS;
    const float sum = delta_lanes_sum(live ? delta_part(y, res, dy, at, part, HS) : 0.0f);
    if (live && part == 0) delta[bh * L_STRIDE(T) + t] = sum;
#else
    const long long item = (long long)blockIdx.x * 4 + threadIdx.x / 32;  // (b*T + t)*NH + h
    if (item >= (long long)B * T * NH) return;
    const int lane = threadIdx.x % 32, h = (int)(item % NH);
    const long long bt = item / NH;
    const long long at = bt * C + h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc += to_f32(dy[at + d]) * (to_f32(y[at + d]) + to_f32(res[at + d]));
    acc = warp_sum(acc);
    const long long b = bt / T, t = bt % T;
    if (lane == 0) delta[(b * NH + h) * L_STRIDE(T) + t] = acc;
#endif
}

// dK, dV of one 64-key tile. grid (cdiv(T, 64), NH, B), the heaviest (the first) first; block 128
// (warp w: keys k0 + 16w ..). Dynamic shared: the K and V tiles, two stages of Q and dY tiles (KEYS x
// STRIDE each, floatX), then two stages of the query tile's L and delta (2 x KEYS floats each).
//   S^T = K Q^T;  P^T = exp2(S^T scale_log2 - L);  dV += P^T dY;  dP^T = V dY^T;
//   dS^T = P^T (dP^T - delta);  dK += scale dS^T Q
// The A operands (K, V) are read from shared memory at each k-step rather than held in registers,
// which leaves room for the four accumulators (dK, dV, S^T, dP^T) at head size 128.
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_backward_dkdv(
        const floatX* __restrict__ qkv, const floatX* __restrict__ dy, const float* __restrict__ lse,
        const float* __restrict__ delta, floatX* __restrict__ dqkv, int T, int C, int NH, float scale_log2,
        float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sk = reinterpret_cast<floatX*>(flash_smem);
    floatX* sv = sk + KEYS * STRIDE;
    floatX* sqg = sv + KEYS * STRIDE;  // stage s: Q at sqg + 2s KEYS STRIDE, dY KEYS STRIDE after it
    float* sld = reinterpret_cast<float*>(sqg + 4 * KEYS * STRIDE);  // stage s: L at sld + 2s KEYS, delta after
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const floatX* dy_bh = dy + (long long)b * T * C + h * HS;
    const float* lse_bh = lse + ((long long)b * NH + h) * L_STRIDE(T);
    const float* delta_bh = delta + ((long long)b * NH + h) * L_STRIDE(T);
    const int k0 = kt * KEYS, n_tiles = (T - k0 + KEYS - 1) / KEYS;  // the query tiles at or after k0
    auto load_stage = [&](int stage, int q0) {
        floatX* s = sqg + stage * 2 * KEYS * STRIDE;
        load_tile<KEYS>(s, base, ld, q0, T, HS);
        load_tile<KEYS>(s + KEYS * STRIDE, dy_bh, C, q0, T, HS);
        float* l = sld + stage * 2 * KEYS;
        for (int i = threadIdx.x; i < KEYS; i += FLASH_THREADS) {
            const bool in = q0 + i < T;
            l[i] = in ? lse_bh[q0 + i] : POS_INF_F;  // a padded query row: P = exp2(-inf) = 0
            l[KEYS + i] = in ? delta_bh[q0 + i] : 0.0f;
        }
    };
    load_tile<KEYS>(sk, base + C, ld, k0, T, HS);
    load_tile<KEYS>(sv, base + 2 * C, ld, k0, T, HS);
    load_stage(0, k0);
    cp_async_commit();
    float dk[DN][4], dv[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int key_a = k0 + warp * 16 + g;  // this thread's rows of S^T: key_a and key_a + 8
    for (int j = 0; j < n_tiles; j++) {
        const int q0 = k0 + j * KEYS;
        const floatX* sq = sqg + (j % 2) * 2 * KEYS * STRIDE;
        const floatX* sg = sq + KEYS * STRIDE;
        const float* sl = sld + (j % 2) * 2 * KEYS;
        const float* sd = sl + KEYS;
        const bool more = j + 1 < n_tiles;
        if (more) {
            load_stage((j + 1) % 2, q0 + KEYS);
            cp_async_commit();
        }
        await_tile(more);
        float st[KEYS / 8][4], dpt[KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < KEYS / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            u32 ka[4], va[4];
            load_a(ka, sk, warp * 16, 16 * kk);
            load_a(va, sv, warp * 16, 16 * kk);
#pragma unroll
            for (int n = 0; n < KEYS / 8; n += 2) {
                u32 qb[2][2], gb[2][2];
                load_b_pair(qb, sq, 8 * n, 16 * kk);
                mma_pair(st, n, ka, qb);
                load_b_pair(gb, sg, 8 * n, 16 * kk);
                mma_pair(dpt, n, va, gb);
            }
        }
        // j == 0: the diagonal tile (q0 == k0), where some queries come before some keys
        dkdv_probabilities(st, dpt, sl, sd, key_a, q0, j == 0, scale_log2);
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; kk++) {
            u32 pa[4], sa[4];
            c_to_a(pa, st, kk);
            c_to_a(sa, dpt, kk);
#pragma unroll
            for (int n = 0; n < DN; n += 2) {
                u32 gb[2][2], qb[2][2];
                load_bt_pair(gb, sg, 8 * n, 16 * kk);
                mma_pair(dv, n, pa, gb);
                load_bt_pair(qb, sq, 8 * n, 16 * kk);
                mma_pair(dk, n, sa, qb);
            }
        }
        __syncthreads();  // every warp is done with this stage before iteration j + 1 refills it
    }
    stage_rows(sk, warp * 16, dk, scale, scale);  // K and V, read only as operands above, are free
    stage_rows(sv, warp * 16, dv, 1.0f, 1.0f);
    __syncthreads();
    floatX* out = dqkv + (long long)b * T * ld + h * HS;
    store_tile<KEYS>(out + C, ld, sk, k0, T, HS);
    store_tile<KEYS>(out + 2 * C, ld, sv, k0, T, HS);
}

// dQ of one 64-query tile. grid (cdiv(T, 64), NH, B), the heaviest first; block 128 (warp w: queries
// q0 + 16w ..). Dynamic shared: the Q and dY tiles, then two stages of K and V tiles (KEYS x STRIDE
// each), floatX.
//   S = Q K^T;  P = exp2(S scale_log2 - L);  dP = dY V^T;  dS = P (dP - delta);  dQ += scale dS K
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_backward_dq(
        const floatX* __restrict__ qkv, const floatX* __restrict__ dy, const float* __restrict__ lse,
        const float* __restrict__ delta, floatX* __restrict__ dqkv, int T, int C, int NH, float scale_log2,
        float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sq = reinterpret_cast<floatX*>(flash_smem);
    floatX* sg = sq + KEYS * STRIDE;
    floatX* skv = sg + KEYS * STRIDE;  // stage s: K at skv + 2s KEYS STRIDE, V KEYS STRIDE after it
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const floatX* dy_bh = dy + (long long)b * T * C + h * HS;
    const int q0 = qt * KEYS, n_tiles = (min(T, q0 + KEYS) + KEYS - 1) / KEYS;
    load_tile<KEYS>(sq, base, ld, q0, T, HS);
    load_tile<KEYS>(sg, dy_bh, C, q0, T, HS);
    load_kv(skv, base, ld, C, 0, T, HS);
    cp_async_commit();
    const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
    const float* lse_bh = lse + ((long long)b * NH + h) * L_STRIDE(T);
    const float* delta_bh = delta + ((long long)b * NH + h) * L_STRIDE(T);
    const float l_row[2] = {row_a < T ? lse_bh[row_a] : POS_INF_F, row_b < T ? lse_bh[row_b] : POS_INF_F};
    const float d_row[2] = {row_a < T ? delta_bh[row_a] : 0.0f, row_b < T ? delta_bh[row_b] : 0.0f};
    u32 qa[DK][4], ga[DK][4];
    float dq[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int j = 0; j < n_tiles; j++) {
        const int k0 = j * KEYS;
        const floatX* sk = kv_step(skv, base, ld, C, j, n_tiles, T, HS);
        const floatX* sv = sk + KEYS * STRIDE;
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < DK; kk++) {
                load_a(qa[kk], sq, warp * 16, 16 * kk);
                load_a(ga[kk], sg, warp * 16, 16 * kk);
            }
        }
        float s[KEYS / 8][4], dp[KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < KEYS / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
        for (int n = 0; n < KEYS / 8; n += 2)
#pragma unroll
            for (int kk = 0; kk < DK; kk++) {
                u32 kb[2][2], vb[2][2];
                load_b_pair(kb, sk, 8 * n, 16 * kk);
                mma_pair(s, n, qa[kk], kb);
                load_b_pair(vb, sv, 8 * n, 16 * kk);
                mma_pair(dp, n, ga[kk], vb);
            }
        const bool edge = k0 + KEYS - 1 > q0 + warp * 16 || k0 + KEYS > T;
        dq_probabilities(s, dp, l_row, d_row, row_a, k0, T, edge, scale_log2);
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; kk++) {
            u32 sa[4];
            c_to_a(sa, s, kk);
#pragma unroll
            for (int n = 0; n < DN; n += 2) {
                u32 kb[2][2];
                load_bt_pair(kb, sk, 8 * n, 16 * kk);
                mma_pair(dq, n, sa, kb);
            }
        }
        __syncthreads();  // every warp is done with this stage before iteration j + 1 refills it
    }
    stage_rows(sq, warp * 16, dq, scale, scale);  // Q and dY live in registers since tile 0
    __syncthreads();
    store_tile<KEYS>(dqkv + (long long)b * T * ld + h * HS, ld, sq, q0, T, HS);
}

// ---- the wgmma variant ---------------------------------------------------------------------------
// What Hopper adds to flash, for 16-bit heads of 64 (HEAD_DIM 64, VEC; attention.py falls back to the
// flash kernels otherwise): the products are wgmma.mma_async m64n64k16 (the forward's scores
// m64n128k16: its stages are FWD_KEYS = 128 keys), issued by the block's one
// warpgroup (4 warps, 64 rows: warp w holds rows 16w..16w+15 of every accumulator, in exactly the
// C layout the flash kernels' math already reads) with the operands read by the tensor cores from
// shared memory, not by each warp into registers: the tiles are 64 rows of 128 bytes in the 128-byte
// swizzle (matmul_layout.cuh), filled by cp.async as in flash, and described to wgmma by descriptors.
//   S = A B^T (Q K^T, K Q^T, V dY^T, dY V^T): both operands K-major tiles (a row per query or key).
//   O += P B (P V, P^T dY, dS^T Q, dS K): P from registers (the scores' accumulators converted to 16
//   bits: for wgmma's A a warp's 16 rows are the mma.sync A fragment), B an MN-major tile (a row per
//   key or query, the head dimension along it: the descriptor's transpose bit).
// The schedules, masks and softmax are flash's (online_softmax, dkdv_probabilities,
// dq_probabilities); results are stored from the registers as pairs. The backward has no delta pass:
// the dQ kernel makes delta for its rows and runs first, dK/dV after it.
#if FLASH_WGMMA
#include "matmul_layout.cuh"
#include "wgmma.cuh"
#include "tma.cuh"

static_assert(HEAD_DIM == 64 && VEC, "the wgmma kernels take 16-bit heads of 64 in 128-byte rows");
static_assert(WG_GROUPS == 1 || WG_GROUPS == 2, "one or two warpgroups a block");
#define WG_TILE_BYTES (KEYS * 128)  // one 64 x 64 16-bit tile
#define WG_THREADS (128 * WG_GROUPS)
#define WG_ROWS (64 * WG_GROUPS)    // the block's queries (forward, dQ) or keys (dK/dV)

#define WG_ACC4(a, i) "+f"(a[i][0]), "+f"(a[i][1]), "+f"(a[i][2]), "+f"(a[i][3])
#define WG_ACC32(a) WG_ACC4(a, 0), WG_ACC4(a, 1), WG_ACC4(a, 2), WG_ACC4(a, 3), WG_ACC4(a, 4), WG_ACC4(a, 5), \
                    WG_ACC4(a, 6), WG_ACC4(a, 7)
#define WG_REGS_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
                   "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
// the forward's scores over FWD_KEYS keys (64 or 128: attention.py's forward_keys): n8 tiles and k-steps
#ifndef FWD_KEYS
#define FWD_KEYS KEYS
#endif
static_assert(FWD_KEYS == 64 || FWD_KEYS == 128, "the forward's key tiles: 64 or 128 keys");
#define FWD_NT (FWD_KEYS / 8)
#define WG_ACC64(a) WG_ACC32(a), WG_ACC4(a, 8), WG_ACC4(a, 9), WG_ACC4(a, 10), WG_ACC4(a, 11), WG_ACC4(a, 12), \
                    WG_ACC4(a, 13), WG_ACC4(a, 14), WG_ACC4(a, 15)
#define WG_REGS_64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
                   "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
                   "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
                   "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#ifdef CUPY_RAW_EMULATOR
// acc (64 x 8 NT) = A (64 x 16) B (16 x 8 NT) (+ acc where accumulate), A K-major at descriptor da, B
// K-major (B^T's rows) at db
template <int NT>
__device__ __forceinline__ void wgmma_ss(float (&acc)[NT][4], unsigned long long da, unsigned long long db,
                                         int accumulate) {
    const int t = threadIdx.x & 127;
    for (int reg = 0; reg < 4 * NT; ++reg) {
        int row, col;
        wgmma_acc_coords(t, reg, row, col);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += emu_wgmma_operand(da, true, row, k) * emu_wgmma_operand(db, true, col, k);
        acc[reg / 4][reg % 4] = (accumulate ? acc[reg / 4][reg % 4] : 0.0f) + sum;
    }
}
// acc (64 x 64) += A (64 x 16, this warp's 16 rows in registers a) B (16 x 64, MN-major at db):
// the warp's fragments gathered as emu_mma16816 gathers them
__device__ __forceinline__ void wgmma_rs(float (&acc)[8][4], const u32 (&a)[4], unsigned long long db) {
    emu::Warp& w = emu::my_warp();
    const int t = threadIdx.x & 127, lane = t % 32;
    memcpy(w.a[lane], a, 16);
    emu::warp_barrier();
    float A[16][16];
    for (int l = 0; l < 32; l++)
        for (int half = 0; half < 2; half++) {
            const int g = l / 4, q = l % 4, shift = 16 * half;
            for (int r = 0; r < 4; r++)
                A[g + 8 * (r & 1)][8 * (r >> 1) + 2 * q + half] =
                    emu_half_value((unsigned short)(w.a[l][r] >> shift), !T_IS_BF16);
        }
    emu::warp_barrier();
    for (int reg = 0; reg < 32; ++reg) {
        int row, col;
        wgmma_acc_coords(t, reg, row, col);
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += A[row % 16][k] * emu_wgmma_operand(db, false, col, k);
        acc[reg / 4][reg % 4] += sum;
    }
}
#else
// One m64nNk16 product with both operands in shared memory: the accumulators (REGS, their operands
// the variadic ACCS), the descriptors at operands %DA and %DB, scale-d from the predicate at %PRED.
#define WGMMA_SS(AB, N, REGS, DA, DB, PRED, ...)                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" PRED ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." AB "." AB " " REGS ", %" DA ", %" DB ", " \
                 "p, 1, 1, 0, 0;\n}\n"                                                                  \
                 : __VA_ARGS__ : "l"(da), "l"(db), "r"(accumulate))
__device__ __forceinline__ void wgmma_ss(float (&acc)[8][4], unsigned long long da, unsigned long long db,
                                         int accumulate) {
    if constexpr (T_IS_BF16) WGMMA_SS("bf16", "64", WG_REGS_32, "32", "33", "34", WG_ACC32(acc));
    else WGMMA_SS("f16", "64", WG_REGS_32, "32", "33", "34", WG_ACC32(acc));
}
// the same with N = 128: 64 accumulators a thread
__device__ __forceinline__ void wgmma_ss(float (&acc)[16][4], unsigned long long da, unsigned long long db,
                                         int accumulate) {
    if constexpr (T_IS_BF16) WGMMA_SS("bf16", "128", WG_REGS_64, "64", "65", "66", WG_ACC64(acc));
    else WGMMA_SS("f16", "128", WG_REGS_64, "64", "65", "66", WG_ACC64(acc));
}
#undef WGMMA_SS
__device__ __forceinline__ void wgmma_rs(float (&acc)[8][4], const u32 (&a)[4], unsigned long long db) {
#define WGMMA_RS(AB)                                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB "." AB " " WG_REGS_32 ", "           \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                          \
                 : WG_ACC32(acc) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
    if constexpr (T_IS_BF16) WGMMA_RS("bf16");
    else WGMMA_RS("f16");
#undef WGMMA_RS
}
#endif  // CUPY_RAW_EMULATOR

template <int NT> __device__ __forceinline__ void zero_acc(float (&acc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Issue acc = A B^T (overwrite: the first of the four k-steps ignores acc, wgmma's scale-d 0) or acc
// += A B^T over the 64 of k: A a 64-row K-major tile at shared address a, B 8 NT such rows at b (64
// or 128: two 64-row tiles back to back are one 128-row tile, the swizzle repeating every 8 rows). (The caller
// fences before and commits and waits after.) Measured on the H200 (reports/cupy_raw-h200/wgmma-attention/53103d3,
// B=32): the backward's kernels overwrite (783 us, against 831 zeroing the 64 registers first, which
// the compiler moved past wgmma.fence and ptxas then guarded with an injected arrive and wait); the
// forward zeroes s and accumulates (286 us; overwriting, 398: not understood yet).
template <int NT>
__device__ __forceinline__ void issue_nt(float (&acc)[NT][4], unsigned a, unsigned b, bool overwrite) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        wgmma_ss(acc, wgmma_operand_desc(true, a, 0, kk), wgmma_operand_desc(true, b, 0, kk), kk > 0 || !overwrite);
}

// Issue acc += P B: P this warp's rows as the 16-bit A fragments of its KS k-steps, B the MN-major
// tile at shared address b (its row k is row k of B; 16 KS rows: 64-row tiles back to back).
template <int KS>
__device__ __forceinline__ void issue_pn(float (&acc)[8][4], const u32 (&pa)[KS][4], unsigned b) {
#pragma unroll
    for (int kk = 0; kk < KS; kk++) wgmma_rs(acc, pa[kk], wgmma_operand_desc(false, b, 0, kk));
}

// Wait for every wgmma issued; the accumulators are the registers' own again.
template <int NT> __device__ __forceinline__ void finish_wgmma(float (&a)[NT][4]) {
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(a);
}
__device__ __forceinline__ void finish_wgmma(float (&a)[8][4], float (&b)[8][4]) {
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(a);
    fence_accumulators(b);
}

// a 64 x 8 NT accumulator (this thread's 4 NT floats) as the 16-bit A fragments of its NT / 2 k-steps
template <int NT>
__device__ __forceinline__ void acc_to_a(u32 (&pa)[NT / 2][4], const float (&acc)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) c_to_a(pa[kk], acc, kk);
}

// The tiles stream through a ring of WG_RING slots filled by TMA (tma.cuh), with no block-wide
// barrier: the issuing thread copies tile t into its slot once every multiplying thread has released
// the slot's previous tile (its "empty" mbarrier, WG_THREADS arrivals), and the copies complete its
// "full" mbarrier; every multiplying thread waits for that one, multiplies, and releases the slot.
// The issuing thread is thread 0 (WG_PRODUCER 0: tile j + WG_AHEAD issued at step j, so only thread
// 0's warpgroup ever waits for another, for a tile WG_RING - WG_AHEAD steps back) or lane 0 of a
// producer warp after the warpgroups (WG_PRODUCER 1: it walks the whole ring ahead, as far as the
// free slots let it, and no multiplying warp issues anything). Either way the warpgroups run out of
// step, where the cp.async stages needed a __syncthreads every tile (15% of the forward's stall
// samples, reports/cupy_raw-h200/ncu-attention-499346b). The tensor maps (attention.py) see qkv and
// dy as (B, T, columns) arrays and L and delta as (B NH, T) ones (rows L_STRIDE(T) apart), so
// whatever lies past T arrives as zeros: a padded query row of dK/dV's tile has Q = dY = 0 and L =
// delta = 0, so P = 1 and dS = 0 there, and both add nothing to dK and dV (flash's loads put L = +inf
// there instead). The mbarriers follow the tiles: `once` (the block's own tiles, loaded first), full[WG_RING],
// empty[WG_RING].
static_assert(WG_AHEAD >= 1 && WG_AHEAD < WG_RING, "tiles issued ahead: at least one, fewer than the ring's slots");
#define WG_BLOCK_THREADS (WG_THREADS + 32 * WG_PRODUCER)  // the multiplying warpgroups, then the producer warp
#define WG_ISSUER (WG_PRODUCER ? WG_THREADS : 0)          // the thread that issues every copy
#define WG_BARS_BYTES (8 * (1 + 2 * WG_RING))
__device__ __forceinline__ unsigned full_bar(unsigned bars, int slot) { return bars + 8 * (1 + slot); }
__device__ __forceinline__ unsigned empty_bar(unsigned bars, int slot) { return bars + 8 * (1 + WG_RING + slot); }

// thread 0, before the block's first __syncthreads: `once` and the ring's full and empty mbarriers
__device__ __forceinline__ void init_ring(unsigned bars) {
    mbar_init(bars, 1);
    for (int s = 0; s < WG_RING; s++) {
        mbar_init(full_bar(bars, s), 1);
        mbar_init(empty_bar(bars, s), WG_THREADS);
    }
    MBAR_FENCE_INIT();
}

// The issuing thread: wait until tile t's slot is free (its previous tile released by every thread;
// the ring's first pass at once), announce the bytes its copies bring; returns the slot.
__device__ __forceinline__ int claim_slot(unsigned bars, int t, unsigned bytes) {
    const int slot = t % WG_RING;
    mbar_wait(empty_bar(bars, slot), ((t / WG_RING) & 1) ^ 1);
    mbar_expect_tx(full_bar(bars, slot), bytes);
    return slot;
}

// Every thread: wait for tile t's copies; returns its slot.
__device__ __forceinline__ int await_slot(unsigned bars, int t) {
    const int slot = t % WG_RING;
    mbar_wait(full_bar(bars, slot), (t / WG_RING) & 1);
    return slot;
}

// Every thread, once done with tile t (its wgmma waited for).
__device__ __forceinline__ void release_slot(unsigned bars, int t) { mbar_arrive(empty_bar(bars, t % WG_RING)); }

// The issuing thread: the K and V tiles of keys stage 64 TILES.. of head column hc (batch b) into
// tile t's slot of a ring of (K, V) stages at skv: TILES 64-row boxes of K back to back (one tile of
// 64 TILES rows), then as many of V. (stage is t where a block's ring serves one item; the overlapped
// forward's count t runs on across its items.)
template <int TILES = 1>
__device__ __forceinline__ void issue_kv(unsigned bars, unsigned skv, const TmaDescriptor* qkv_map, int t, int stage,
                                         int C, int hc, int b) {
    const int slot = claim_slot(bars, t, 2 * TILES * WG_TILE_BYTES);
    const unsigned dst = skv + slot * 2 * TILES * WG_TILE_BYTES;
#pragma unroll
    for (int i = 0; i < TILES; i++) {
        const int row = (stage * TILES + i) * KEYS;
        tma_load_3d(dst + i * WG_TILE_BYTES, qkv_map, C + hc, row, b, full_bar(bars, slot));
        tma_load_3d(dst + (TILES + i) * WG_TILE_BYTES, qkv_map, 2 * C + hc, row, b, full_bar(bars, slot));
    }
}

// The block's copies begin (after init_ring's __syncthreads): the issuing thread runs `once` (the
// tiles read once) and issues the ring's first WG_AHEAD tiles, or with a producer warp every tile.
// Returns true for the producer warp's threads, which have nothing else to do.
template <class Once, class Issue>
__device__ __forceinline__ bool ring_start(int n_tiles, Once once, Issue issue) {
    if (threadIdx.x == WG_ISSUER) {
        once();
        for (int t = 0; t < (WG_PRODUCER ? n_tiles : min(WG_AHEAD, n_tiles)); t++) issue(t);
    }
    return threadIdx.x >= WG_THREADS;
}

// Step j's copies, without a producer warp: thread 0 issues tile j + WG_AHEAD.
template <class Issue>
__device__ __forceinline__ void ring_step(int j, int n_tiles, Issue issue) {
    if (!WG_PRODUCER && threadIdx.x == 0 && j + WG_AHEAD < n_tiles) issue(j + WG_AHEAD);
    __syncwarp();
}

// this thread's part of a 64 x 64 accumulator (rows row_a, row_a + 8; columns 8n + 2c, + 1), times
// scale_a / scale_b, to the rows < T of g (row stride ld), as floatX pairs
__device__ __forceinline__ void store_acc(floatX* g, long long ld, const float (&acc)[8][4], int row_a, int T,
                                          float scale_a, float scale_b) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        if (row_a < T) *reinterpret_cast<u32*>(g + (long long)row_a * ld + 8 * n + 2 * c) =
            pack2(acc[n][0] * scale_a, acc[n][1] * scale_a);
        if (row_a + 8 < T) *reinterpret_cast<u32*>(g + (long long)(row_a + 8) * ld + 8 * n + 2 * c) =
            pack2(acc[n][2] * scale_b, acc[n][3] * scale_b);
    }
}

__device__ __forceinline__ unsigned char* align_1024(unsigned char* p) {
    return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}

// The block's WG_GROUPS warpgroups share every tile they stream (K and V in the forward and dQ; Q
// and dY in dK/dV): warpgroup wg owns rows 64 wg.. of the block's 64 WG_GROUPS queries (or keys) and
// multiplies its own 64-row operand tile; two of them halve the streamed tiles' traffic per row.
// A warpgroup skips (warpgroup-uniform, barriers still met) a tile that masks all its rows.

// The forward's stages of FWD_KEYS keys for the block's queries from q0 (those before T), and whether the
// stage from key k0 is an edge one for the warp whose queries start at q0w (a key after one of its
// rows, or at or past T: the mask is applied there only).
__device__ __forceinline__ int forward_stages(int q0, int T) {
    return (min(T, q0 + WG_ROWS) + FWD_KEYS - 1) / FWD_KEYS;
}
__device__ __forceinline__ bool forward_edge(int k0, int q0w, int T) {
    return k0 + FWD_KEYS - 1 > q0w || k0 + FWD_KEYS > T;
}

// One forward stage for this warpgroup's 64 queries from q0w (its rows row_a, row_a + 8; q0w the
// warp's first): S = Q K^T over the stage's FWD_KEYS keys from k0 (one m64nFWD_KEYSk16 product a
// k-step: the Q tile at sq, K at sk), the online softmax (the mask only on an edge stage: a key
// after one of the warp's rows, or at or past T), then O += P V (V after K, FWD_KEYS / 16 k-steps).
__device__ __forceinline__ void forward_stage(float (&o)[8][4], float (&m_run)[2], float (&l_run)[2], unsigned sq,
                                              unsigned sk, int row_a, int q0w, int k0, int T, float scale_log2) {
    constexpr int TILES = FWD_KEYS / KEYS;
    float s[FWD_NT][4];
    zero_acc(s);
    wgmma_fence();
    issue_nt(s, sq, sk, false);
    finish_wgmma(s);
    online_softmax<FWD_NT>(s, m_run, l_run, o, row_a, k0, T, forward_edge(k0, q0w, T), scale_log2);
    u32 pa[FWD_NT / 2][4];
    acc_to_a(pa, s);
    wgmma_fence();
    issue_pn(o, pa, sk + TILES * WG_TILE_BYTES);
    finish_wgmma(o);
}

// The forward's results for this thread's rows row_a, row_a + 8 (those < T) of head h, batch b: y =
// O / l, res = O / l - y with y rounded as stored (o is overwritten), L = m + log2 l.
__device__ __forceinline__ void forward_store(floatX* __restrict__ y, floatX* __restrict__ res, float* __restrict__ lse,
                                              float (&o)[8][4], const float (&m_run)[2], const float (&l_run)[2],
                                              int row_a, int T, int C, int NH, int h, int b) {
    const int HS = C / NH;
    const float inv_a = 1.0f / l_run[0], inv_b = 1.0f / l_run[1];
    const long long out0 = (long long)b * T * C + h * HS;
    store_acc(y + out0, C, o, row_a, T, inv_a, inv_b);
#pragma unroll
    for (int n = 0; n < 8; n++)  // res = o - y, y rounded as just stored
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float val = o[n][e] * (e < 2 ? inv_a : inv_b);
            o[n][e] = val - to_f32(from_f32<floatX>(val));
        }
    store_acc(res + out0, C, o, row_a, T, 1.0f, 1.0f);
    if (threadIdx.x % 4 == 0) {
        float* l = lse + ((long long)b * NH + h) * L_STRIDE(T);
        if (row_a < T) l[row_a] = m_run[0] + log2f(l_run[0]);
        if (row_a + 8 < T) l[row_a + 8] = m_run[1] + log2f(l_run[1]);
    }
}

// Forward. grid (cdiv(T, WG_ROWS), NH, B), the heaviest query tiles (the last) first; block
// WG_THREADS. Dynamic shared (1 KB of alignment slack, then swizzled tiles): WG_GROUPS Q tiles, the
// ring of (K, V) stages (FWD_KEYS keys each), its mbarriers. With 128-key stages the scores are one
// m64n128k16 product a k-step (half the products, and the softmax's row reductions, a key) and P V
// eight k-steps; the diagonal stage of a warpgroup whose rows end in its first half wastes the rest.
extern "C" __global__ void __launch_bounds__(WG_BLOCK_THREADS) attention_wgmma_forward(
        const __grid_constant__ TmaDescriptor qkv_map, floatX* __restrict__ y, floatX* __restrict__ res,
        float* __restrict__ lse, int T, int C, int NH, float scale_log2) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    constexpr int TILES = FWD_KEYS / KEYS;  // 64-row tiles of K (and of V) a stage
    unsigned char* sq = align_1024(flash_smem);
    unsigned char* skv = sq + WG_GROUPS * WG_TILE_BYTES;
    const unsigned bars = smem_u32(skv + WG_RING * 2 * TILES * WG_TILE_BYTES);
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, wg = warp / 4, lane = threadIdx.x % 32, g = lane / 4;
    const int q0 = qt * WG_ROWS, row_a = q0 + warp * 16 + g, wg_last = q0 + 64 * wg + 63;
    const int n_tiles = forward_stages(q0, T);
    auto issue = [&](int t) { issue_kv<TILES>(bars, smem_u32(skv), &qkv_map, t, t, C, h * HS, b); };
    if (threadIdx.x == 0) init_ring(bars);
    __syncthreads();
    if (ring_start(n_tiles, [&] {
            mbar_expect_tx(bars, WG_GROUPS * WG_TILE_BYTES);
            for (int w = 0; w < WG_GROUPS; w++)
                tma_load_3d(smem_u32(sq + w * WG_TILE_BYTES), &qkv_map, h * HS, q0 + 64 * w, b, bars);
        }, issue))
        return;
    float o[8][4], m_run[2] = {-POS_INF_F, -POS_INF_F}, l_run[2] = {0.0f, 0.0f};
    zero_acc(o);
    mbar_wait(bars, 0);
    for (int j = 0; j < n_tiles; j++) {
        const int k0 = j * FWD_KEYS;
        ring_step(j, n_tiles, issue);
        unsigned char* sk = skv + await_slot(bars, j) * 2 * TILES * WG_TILE_BYTES;
        if (k0 <= wg_last)
            forward_stage(o, m_run, l_run, smem_u32(sq + wg * WG_TILE_BYTES), smem_u32(sk), row_a, q0 + warp * 16, k0, T,
                          scale_log2);
        release_slot(bars, j);
    }
    forward_store(y, res, lse, o, m_run, l_run, row_a, T, C, NH, h, b);
}

#if FWD_OVERLAPPED
// The forward overlapped (FWD_OVERLAPPED; attention.py's forward_schedule "overlapped"), FlashAttention-3's
// schedule, and by its launch the shape of cuDNN's forward on Hopper (reports/cupy_raw-h200/
// ncu-attention-499346b: a persistent grid of one block an SM, 384 threads at 168 registers, what two
// warpgroups at 240 and a third at 24 average): one block an SM walks items (a 128-query tile, a
// head, a batch) with its two warpgroups and a producer warp, which loads each item's Q tiles into
// one of two Q slots (the next item's while this one multiplies) and every 128-key stage of K and V
// into the ring, running on across items. Each warpgroup overlaps its own work: step j issues stage
// j's scores (S = Q K^T) and stage j - 1's P V as two wgmma groups, waits for the first alone and
// computes stage j's softmax while the second still runs; then waits for it, releases stage j - 1's
// slot, rescales O and takes the new P. Live across the softmax: S (64 floats), the previous P (32) that the running P V reads,
// and O (32): the 224 registers one block of 288 threads an SM may have, not the 128 of two blocks
// (in that budget, with 64-key stages and cp.async, the overlap was slower: reports/cupy_raw-h200,
// wgmma-attention/2ed8b77). The arithmetic is the in-turn forward's (softmax_scores, then O scaled
// by corr before the next P V adds to it), so the results are the same.
// Items in heaviest-first order (the last query tiles first), dealt round by round to the blocks in a
// zigzag (block k takes the k-th item of an even round and the k-th from the end of an odd one), so
// that the blocks' sums of work stay close; the producer and the warpgroups walk the same sequence.
static_assert(WG_GROUPS == 2 && FWD_KEYS == 128 && WG_PRODUCER,
              "the overlapped forward: two warpgroups of 64 queries, 128-key stages, a producer warp");
#define OV_Q_SLOTS 2
// the Q slots' mbarriers, after the ring's: full (the copies, once per item), empty (256 arrivals)
__device__ __forceinline__ unsigned q_full_bar(unsigned bars, int q) { return bars + 8 * (1 + 2 * WG_RING + q); }
__device__ __forceinline__ unsigned q_empty_bar(unsigned bars, int q) {
    return bars + 8 * (1 + 2 * WG_RING + OV_Q_SLOTS + q);
}

// The block's n-th item of the walk: false past the grid's last round; skip where a ragged last round
// has none for this block.
__device__ __forceinline__ bool overlapped_item(int n, int n_q, int NH, int B, int& qt, int& h, int& b, bool& skip) {
    const int G = gridDim.x, items = n_q * NH * B;
    if (n * G >= items) return false;
    const int i = n * G + ((n & 1) ? G - 1 - (int)blockIdx.x : (int)blockIdx.x);
    skip = i >= items;
    qt = n_q - 1 - i / (NH * B);
    h = i % NH;
    b = (i / NH) % B;
    return true;
}

// grid (at most the SMs), block WG_BLOCK_THREADS (two warpgroups, then the producer warp). Dynamic
// shared: 1 KB slack, 2 Q slots of two swizzled tiles each, the ring of (K, V) stages of 128 keys,
// the ring's mbarriers, the Q slots'.
extern "C" __global__ void __maxnreg__(224) attention_wgmma_forward_overlapped(
        const __grid_constant__ TmaDescriptor qkv_map, int B, floatX* __restrict__ y, floatX* __restrict__ res,
        float* __restrict__ lse, int T, int C, int NH, float scale_log2) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    constexpr int TILES = FWD_KEYS / KEYS, STAGE_BYTES = 2 * TILES * WG_TILE_BYTES;
    unsigned char* sq = align_1024(flash_smem);
    unsigned char* skv = sq + OV_Q_SLOTS * WG_GROUPS * WG_TILE_BYTES;
    const unsigned bars = smem_u32(skv + WG_RING * STAGE_BYTES);
    const int HS = C / NH, n_q = (T + WG_ROWS - 1) / WG_ROWS;
    if (threadIdx.x == 0) {
        init_ring(bars);
        for (int q = 0; q < OV_Q_SLOTS; q++) {
            mbar_init(q_full_bar(bars, q), 1);
            mbar_init(q_empty_bar(bars, q), WG_THREADS);
        }
        MBAR_FENCE_INIT();
    }
    __syncthreads();
    int qt, h, b;
    bool skip;
    if (threadIdx.x >= WG_THREADS) {  // the producer warp: lane 0 issues every copy
        if (threadIdx.x != WG_THREADS) return;
        for (int n = 0, t = 0, it = 0; overlapped_item(n, n_q, NH, B, qt, h, b, skip); n++) {
            if (skip) continue;
            const int q = it % OV_Q_SLOTS, q0 = qt * WG_ROWS;
            mbar_wait(q_empty_bar(bars, q), ((it / OV_Q_SLOTS) & 1) ^ 1);
            mbar_expect_tx(q_full_bar(bars, q), WG_GROUPS * WG_TILE_BYTES);
            for (int w = 0; w < WG_GROUPS; w++)
                tma_load_3d(smem_u32(sq + (q * WG_GROUPS + w) * WG_TILE_BYTES), &qkv_map, h * HS, q0 + 64 * w, b,
                            q_full_bar(bars, q));
            const int n_tiles = forward_stages(q0, T);
            for (int j = 0; j < n_tiles; j++) issue_kv<TILES>(bars, smem_u32(skv), &qkv_map, t++, j, C, h * HS, b);
            it++;
        }
        return;
    }
    const int warp = threadIdx.x / 32, wg = warp / 4, g = (threadIdx.x % 32) / 4;
    for (int n = 0, t = 0, it = 0; overlapped_item(n, n_q, NH, B, qt, h, b, skip); n++) {
        if (skip) continue;
        const int q = it % OV_Q_SLOTS, q0 = qt * WG_ROWS, q0w = q0 + warp * 16, row_a = q0w + g;
        const int n_tiles = forward_stages(q0, T);
        const unsigned sqw = smem_u32(sq + (q * WG_GROUPS + wg) * WG_TILE_BYTES);
        float o[8][4], m_run[2] = {-POS_INF_F, -POS_INF_F}, l_run[2] = {0.0f, 0.0f}, corr[2];
        float s[FWD_NT][4];
        u32 pa[FWD_NT / 2][4];
        zero_acc(o);
        mbar_wait(q_full_bar(bars, q), (it / OV_Q_SLOTS) & 1);
        // stage 0's scores and softmax (O is 0: nothing to rescale)
        unsigned sk = smem_u32(skv + await_slot(bars, t) * STAGE_BYTES);
        zero_acc(s);
        wgmma_fence();
        issue_nt(s, sqw, sk, false);
        finish_wgmma(s);
        softmax_scores<FWD_NT>(s, m_run, l_run, corr, row_a, 0, T, forward_edge(0, q0w, T), scale_log2);
        acc_to_a(pa, s);
        for (int j = 1; j < n_tiles; j++) {
            const int k0 = j * FWD_KEYS;
            const unsigned sk_next = smem_u32(skv + await_slot(bars, t + j) * STAGE_BYTES);
            zero_acc(s);
            wgmma_fence();
            issue_nt(s, sqw, sk_next, false);  // stage j's scores,
            wgmma_commit();
            issue_pn(o, pa, sk + TILES * WG_TILE_BYTES);  // then stage j - 1's P V
            wgmma_commit();
            wgmma_wait<1>();  // the scores (groups complete in order)
            fence_accumulators(s);
            softmax_scores<FWD_NT>(s, m_run, l_run, corr, row_a, k0, T, forward_edge(k0, q0w, T), scale_log2);
            wgmma_wait<0>();  // P V: O and the previous P are the registers' own again
            fence_accumulators(o);
            release_slot(bars, t + j - 1);
            rescale_output(o, corr);
            acc_to_a(pa, s);
            sk = sk_next;
        }
        wgmma_fence();
        issue_pn(o, pa, sk + TILES * WG_TILE_BYTES);
        finish_wgmma(o);
        release_slot(bars, t + n_tiles - 1);
        mbar_arrive(q_empty_bar(bars, q));  // (its last reader, the last stage's scores, long done)
        forward_store(y, res, lse, o, m_run, l_run, row_a, T, C, NH, h, b);
        t += n_tiles;
        it++;
    }
}
#endif  // FWD_OVERLAPPED

// dK, dV of the block's WG_ROWS keys (flash's attention_flash_backward_dkdv on wgmma). grid
// (cdiv(T, WG_ROWS), NH, B); block WG_THREADS (warp w: keys k0 + 16w ..). Dynamic shared: 1 KB slack,
// then WG_GROUPS swizzled K and as many V tiles, the ring of (Q, dY) stages, the ring's L and delta
// (2 x 64 floats a slot), its mbarriers.
extern "C" __global__ void __launch_bounds__(WG_BLOCK_THREADS) attention_wgmma_backward_dkdv(
        const __grid_constant__ TmaDescriptor qkv_map, const __grid_constant__ TmaDescriptor dy_map,
        const __grid_constant__ TmaDescriptor lse_map, const __grid_constant__ TmaDescriptor delta_map,
        floatX* __restrict__ dqkv, int T, int C, int NH, float scale_log2, float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    unsigned char* sk = align_1024(flash_smem);
    unsigned char* sv = sk + WG_GROUPS * WG_TILE_BYTES;
    unsigned char* sqg = sv + WG_GROUPS * WG_TILE_BYTES;  // slot s: Q at sqg + 2s tiles, dY one tile after it
    float* sld = reinterpret_cast<float*>(sqg + WG_RING * 2 * WG_TILE_BYTES);  // slot s: L at sld + 2s KEYS, delta after
    const unsigned bars = smem_u32(sld + WG_RING * 2 * KEYS);
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, wg = warp / 4, lane = threadIdx.x % 32, g = lane / 4;
    const int k0 = kt * WG_ROWS, wg_k0 = k0 + 64 * wg, n_tiles = (T - k0 + KEYS - 1) / KEYS;
    auto issue = [&](int t) {  // the issuing thread: query tile t's Q, dY, L and delta
        const int slot = claim_slot(bars, t, 2 * WG_TILE_BYTES + 2 * KEYS * 4);
        const unsigned dst = smem_u32(sqg + slot * 2 * WG_TILE_BYTES), bar = full_bar(bars, slot);
        const int q0 = k0 + t * KEYS;
        tma_load_3d(dst, &qkv_map, h * HS, q0, b, bar);
        tma_load_3d(dst + WG_TILE_BYTES, &dy_map, h * HS, q0, b, bar);
        tma_load_2d(smem_u32(sld + slot * 2 * KEYS), &lse_map, q0, b * NH + h, bar);
        tma_load_2d(smem_u32(sld + slot * 2 * KEYS + KEYS), &delta_map, q0, b * NH + h, bar);
    };
    if (threadIdx.x == 0) init_ring(bars);
    __syncthreads();
    if (ring_start(n_tiles, [&] {
            mbar_expect_tx(bars, 2 * WG_GROUPS * WG_TILE_BYTES);
            for (int w = 0; w < WG_GROUPS; w++) {
                tma_load_3d(smem_u32(sk + w * WG_TILE_BYTES), &qkv_map, C + h * HS, k0 + 64 * w, b, bars);
                tma_load_3d(smem_u32(sv + w * WG_TILE_BYTES), &qkv_map, 2 * C + h * HS, k0 + 64 * w, b, bars);
            }
        }, issue))
        return;
    float dk[8][4], dv[8][4];
    zero_acc(dk);
    zero_acc(dv);
    const int key_a = k0 + warp * 16 + g;
    mbar_wait(bars, 0);
    for (int j = 0; j < n_tiles; j++) {
        const int q0 = k0 + j * KEYS;
        ring_step(j, n_tiles, issue);
        const int slot = await_slot(bars, j);
        unsigned char* sq = sqg + slot * 2 * WG_TILE_BYTES;
        unsigned char* sg = sq + WG_TILE_BYTES;
        const float* sl = sld + slot * 2 * KEYS;
        // (with one warpgroup never false: then the test is compiled out, the wgmma kept out of a branch)
        if (WG_GROUPS == 1 || q0 + KEYS > wg_k0) {  // else every query of the tile comes before every key of this warpgroup
            float st[8][4], dpt[8][4];
            wgmma_fence();
            issue_nt(st, smem_u32(sk + wg * WG_TILE_BYTES), smem_u32(sq), true);   // S^T = K Q^T
            issue_nt(dpt, smem_u32(sv + wg * WG_TILE_BYTES), smem_u32(sg), true);  // dP^T = V dY^T
            finish_wgmma(st, dpt);
            // q0 == wg_k0: the warpgroup's diagonal tile, where some queries come before some keys
            dkdv_probabilities(st, dpt, sl, sl + KEYS, key_a, q0, q0 == wg_k0, scale_log2);
            u32 pa[4][4], sa[4][4];
            acc_to_a(pa, st);
            acc_to_a(sa, dpt);
            wgmma_fence();
            issue_pn(dv, pa, smem_u32(sg));  // dV += P^T dY
            issue_pn(dk, sa, smem_u32(sq));  // dK += dS^T Q
            finish_wgmma(dv, dk);
        }
        release_slot(bars, j);
    }
    const long long ld = 3LL * C;
    floatX* out = dqkv + (long long)b * T * ld + h * HS;
    store_acc(out + C, ld, dk, key_a, T, scale, scale);
    store_acc(out + 2 * C, ld, dv, key_a, T, 1.0f, 1.0f);
}

// delta of this thread's two rows (the warp's g and g + 8; 0 past T) for a dQ block of 64 WG_GROUPS
// queries of head h, batch b (its warp's rows from q0w), made here from y, res and dy and written to
// delta_bh (the head's row of delta) for the dK/dV kernel: each warp its 16 rows, four at a time
// (pass p: rows 4p .. 4p + 3, row 4p + lane / 8 by lanes 8 (lane / 8) ..), the delta pass's own sums
// (delta_part, delta_lanes_sum: the same floats); no branch around the loads (a row past T reads
// row T - 1 and counts 0), so that all twelve are in flight at once (HEAD_DIM as HS: one piece a
// lane).
__device__ __forceinline__ void dq_row_deltas(float (&d_row)[2], float* __restrict__ delta_bh,
                                              const floatX* __restrict__ y, const floatX* __restrict__ res,
                                              const floatX* __restrict__ dy, int q0w, int b, int h, int T, int C,
                                              int HS) {
    static_assert(DELTA_LANES == 8, "dQ's delta: 8 lanes a row of 64");
    const int lane = threadIdx.x % 32, g = lane / 4, part = lane % DELTA_LANES, row0 = q0w + lane / DELTA_LANES;
    float sums[4];
#pragma unroll
    for (int p = 0; p < 4; p++) {
        const long long at = ((long long)b * T + min(row0 + 4 * p, T - 1)) * C + h * HS;
        const float sum = delta_part(y, res, dy, at, part, HEAD_DIM);
        sums[p] = row0 + 4 * p < T ? sum : 0.0f;
    }
#pragma unroll
    for (int p = 0; p < 4; p++) {
        sums[p] = delta_lanes_sum(sums[p]);
        if (row0 + 4 * p < T && part == 0) delta_bh[row0 + 4 * p] = sums[p];
    }
    // the thread's rows are the warp's g (pass g / 4) and g + 8 (pass 2 + g / 4), lanes 8 (g % 4) ..
    const int from = DELTA_LANES * (g % 4);
    float got[4];
#pragma unroll
    for (int p = 0; p < 4; p++) got[p] = __shfl_sync(0xffffffffu, sums[p], from);
    d_row[0] = g < 4 ? got[0] : got[1];
    d_row[1] = g < 4 ? got[2] : got[3];
}

// One dQ stage for this warpgroup's 64 queries (the warp's from q0w; this thread's rows row_a,
// row_a + 8 with their L and delta): S = Q K^T and dP = dY V^T over the 64 keys from k0 (Q at sq,
// dY at sg, K at sk, V after it), dS = P (dP - delta), dQ += dS K.
__device__ __forceinline__ void dq_stage(float (&dq)[8][4], unsigned sq, unsigned sg, unsigned sk,
                                         const float (&l_row)[2], const float (&d_row)[2], int row_a, int q0w, int k0,
                                         int T, float scale_log2) {
    float s[8][4], dp[8][4];
    wgmma_fence();
    issue_nt(s, sq, sk, true);                    // S = Q K^T
    issue_nt(dp, sg, sk + WG_TILE_BYTES, true);   // dP = dY V^T
    finish_wgmma(s, dp);
    const bool edge = k0 + KEYS - 1 > q0w || k0 + KEYS > T;
    dq_probabilities(s, dp, l_row, d_row, row_a, k0, T, edge, scale_log2);
    u32 sa[4][4];
    acc_to_a(sa, s);
    wgmma_fence();
    issue_pn(dq, sa, sk);  // dQ += dS K
    finish_wgmma(dq);
}

// dQ of the block's WG_ROWS queries (flash's attention_flash_backward_dq on wgmma). grid
// (cdiv(T, WG_ROWS), NH, B), the heaviest first; block WG_THREADS. Dynamic shared: 1 KB slack, then
// WG_GROUPS swizzled Q and as many dY tiles, the ring of (K, V) stages, its mbarriers.
// The kernel makes delta itself instead of a delta pass (dq_row_deltas: while the copies of Q, dY
// and the first K and V are in flight) and writes it for the dK/dV kernel, launched after this one:
// one pass less over dy, y and res (3 B T C 16-bit values) and one launch less a backward (measured
// on the H200, reports/cupy_raw-h200: B=32 backward 0.529 against 0.534 ms with the pass).
extern "C" __global__ void __launch_bounds__(WG_BLOCK_THREADS) attention_wgmma_backward_dq(
        const __grid_constant__ TmaDescriptor qkv_map, const __grid_constant__ TmaDescriptor dy_map,
        const float* __restrict__ lse, float* __restrict__ delta, const floatX* __restrict__ y,
        const floatX* __restrict__ res, const floatX* __restrict__ dy, floatX* __restrict__ dqkv, int T, int C,
        int NH, float scale_log2, float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    unsigned char* sq = align_1024(flash_smem);
    unsigned char* sg = sq + WG_GROUPS * WG_TILE_BYTES;
    unsigned char* skv = sg + WG_GROUPS * WG_TILE_BYTES;
    const unsigned bars = smem_u32(skv + WG_RING * 2 * WG_TILE_BYTES);
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, wg = warp / 4, lane = threadIdx.x % 32, g = lane / 4;
    const int q0 = qt * WG_ROWS, wg_last = q0 + 64 * wg + 63, n_tiles = (min(T, q0 + WG_ROWS) + KEYS - 1) / KEYS;
    auto issue = [&](int t) { issue_kv(bars, smem_u32(skv), &qkv_map, t, t, C, h * HS, b); };
    if (threadIdx.x == 0) init_ring(bars);
    __syncthreads();
    if (ring_start(n_tiles, [&] {
            mbar_expect_tx(bars, 2 * WG_GROUPS * WG_TILE_BYTES);
            for (int w = 0; w < WG_GROUPS; w++) {
                tma_load_3d(smem_u32(sq + w * WG_TILE_BYTES), &qkv_map, h * HS, q0 + 64 * w, b, bars);
                tma_load_3d(smem_u32(sg + w * WG_TILE_BYTES), &dy_map, h * HS, q0 + 64 * w, b, bars);
            }
        }, issue))
        return;
    const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
    const float* lse_bh = lse + ((long long)b * NH + h) * L_STRIDE(T);
    const float l_row[2] = {row_a < T ? lse_bh[row_a] : POS_INF_F, row_b < T ? lse_bh[row_b] : POS_INF_F};
    float d_row[2];
    dq_row_deltas(d_row, delta + ((long long)b * NH + h) * L_STRIDE(T), y, res, dy, q0 + warp * 16, b, h, T, C, HS);
    float dq[8][4];
    zero_acc(dq);
    mbar_wait(bars, 0);
    for (int j = 0; j < n_tiles; j++) {
        const int k0 = j * KEYS;
        ring_step(j, n_tiles, issue);
        unsigned char* sk = skv + await_slot(bars, j) * 2 * WG_TILE_BYTES;
        if (WG_GROUPS == 1 || k0 <= wg_last)  // (one warpgroup: every tile has a key at or before a row)
            dq_stage(dq, smem_u32(sq + wg * WG_TILE_BYTES), smem_u32(sg + wg * WG_TILE_BYTES), smem_u32(sk), l_row, d_row,
                     row_a, q0 + warp * 16, k0, T, scale_log2);
        release_slot(bars, j);
    }
    store_acc(dqkv + (long long)b * T * 3LL * C + h * HS, 3LL * C, dq, row_a, T, scale, scale);
}
#endif  // FLASH_WGMMA
#endif  // HEAD_DIM
