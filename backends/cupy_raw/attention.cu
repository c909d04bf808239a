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
//            accumulation): a block of 4 warps takes 64 queries (16 per warp); 64-key tiles of K and
//            V stream through shared memory; the softmax is online (running row max and sum, the
//            accumulator rescaled when the max grows), in base 2; no T x T matrix anywhere. The
//            scores' accumulator fragments are the A operand of the next product (P V) as they
//            stand, converted to 16 bits: no trip through shared memory. Saved: the log2-sum-exp2
//            L of each row and the rounding residual res = o - y (see attention.py). Backward
//            (FlashAttention-2's split, without atomics): a small kernel computes
//            delta = rowsum(dy * (y + res)); one kernel per 64-key tile walks the query tiles at or
//            after it for dK and dV; another per 64-query tile walks the key tiles at or before it
//            for dQ (so Q K^T and dY V^T are computed twice, the price of writing every gradient
//            element from exactly one block).
//
// Layout: q, k, v of head h at columns h*HS, C + h*HS, 2C + h*HS of a qkv row; y and dy (B,T,C);
// dqkv like qkv. Defines: floatX (the storage type), HEAD_DIM (flash: HS rounded up to a multiple of
// 16, at most 128; the padded columns are zeros in shared memory and never stored), VEC (flash: 1
// when HS and C are multiples of 8 and the pointers 16-byte aligned: 16-byte tile loads).
//
// mma.sync.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane l,
// g = l / 4, c = l % 4 (each 32-bit register holds two 16-bit elements, the lower column first):
//   A (16x16, row-major)   a0: (g, 2c..2c+1)  a1: (g+8, 2c..)  a2: (g, 8+2c..)  a3: (g+8, 8+2c..)
//   B (16x8,  "col")       b0: (k = 2c..2c+1, n = g)          b1: (k = 8+2c.., n = g)
//   C (16x8,  float)       c0, c1: (g, 2c..2c+1)              c2, c3: (g+8, 2c..2c+1)
// So two C tiles side by side (16 x 16) are exactly the registers of an A operand, and a B operand
// is read from a matrix stored with n as its row: B^T row-major. Every tile in shared memory is
// row-major with a row stride padded by 8 elements (16 bytes), which puts the 8 rows g of a
// fragment load on 8 different groups of 4 banks: the 32 lanes hit 32 different banks.
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

#define TILE 64                     // queries per block and keys per tile (4 warps x 16 rows)
#define FLASH_THREADS 128
#define STRIDE (HEAD_DIM + 8)       // padded row stride of a (64 x HEAD_DIM) tile in shared memory
#define STRIDE_T (TILE + 8)         // padded row stride of a transposed (HEAD_DIM x 64) tile
#define DK (HEAD_DIM / 16)          // k-steps over the head dimension
#define DN (HEAD_DIM / 8)           // n-tiles over the head dimension
#define LOG2E 1.4426950408889634f

typedef unsigned int u32;

__device__ __forceinline__ void mma16816(float* c, const u32* a, const u32* b) {
#if defined(CUPY_RAW_EMULATOR)  // the CPU emulator's mma (tests; emulator/emulator.hpp)
#ifdef MMA_FP16
    emu_mma16816(c, a, b, true);
#else
    emu_mma16816(c, a, b, false);
#endif
#elif defined(MMA_FP16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ u32 pack2(float lo, float hi) {  // two floats -> one register of floatX pair
    const floatX a = from_f32<floatX>(lo), b = from_f32<floatX>(hi);
    const unsigned short ua = *reinterpret_cast<const unsigned short*>(&a);
    const unsigned short ub = *reinterpret_cast<const unsigned short*>(&b);
    return (u32)ua | ((u32)ub << 16);
}

__device__ __forceinline__ u32 ld32(const floatX* p) { return *reinterpret_cast<const u32*>(p); }

// the A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile with row stride `stride`
__device__ __forceinline__ void load_a(u32* a, const floatX* s, int stride, int r0, int k0) {
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    a[0] = ld32(s + (r0 + g) * stride + k0 + 2 * c);
    a[1] = ld32(s + (r0 + g + 8) * stride + k0 + 2 * c);
    a[2] = ld32(s + (r0 + g) * stride + k0 + 8 + 2 * c);
    a[3] = ld32(s + (r0 + g + 8) * stride + k0 + 8 + 2 * c);
}

// the B fragment (16 x 8) whose column n is row n0 + n of a row-major tile (B^T stored), k0..k0+15
__device__ __forceinline__ void load_b(u32* b, const floatX* s, int stride, int n0, int k0) {
    const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    b[0] = ld32(s + (n0 + g) * stride + k0 + 2 * c);
    b[1] = ld32(s + (n0 + g) * stride + k0 + 8 + 2 * c);
}

// the A operand for k-step kk (columns 16kk..16kk+15) from two float C tiles 2kk and 2kk+1
__device__ __forceinline__ void c_to_a(u32* a, const float (*acc)[4], int kk) {
    a[0] = pack2(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = pack2(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = pack2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = pack2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// rows row0.. of one head (row stride `ld` in global memory) into a (TILE x HEAD_DIM) tile of
// shared memory, or transposed into a (HEAD_DIM x TILE) one; rows >= T and columns >= HS are zeros
__device__ __forceinline__ void load_tile(floatX* s, const floatX* g, long long ld, int row0, int T, int HS) {
#if VEC
    for (int i = threadIdx.x; i < TILE * (HEAD_DIM / 8); i += FLASH_THREADS) {
        const int r = i / (HEAD_DIM / 8), d = (i % (HEAD_DIM / 8)) * 8;
        Pack<floatX> pk;
        if (row0 + r < T && d < HS) {
            pk = load_pack(g + (long long)(row0 + r) * ld + d);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) pk.v[k] = from_f32<floatX>(0.0f);
        }
        store_pack(s + r * STRIDE + d, pk);
    }
#else
    for (int i = threadIdx.x; i < TILE * HEAD_DIM; i += FLASH_THREADS) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        s[r * STRIDE + d] = (row0 + r < T && d < HS) ? g[(long long)(row0 + r) * ld + d] : from_f32<floatX>(0.0f);
    }
#endif
}

__device__ __forceinline__ void load_tile_t(floatX* s, const floatX* g, long long ld, int row0, int T, int HS) {
    for (int i = threadIdx.x; i < TILE * HEAD_DIM; i += FLASH_THREADS) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        s[d * STRIDE_T + r] = (row0 + r < T && d < HS) ? g[(long long)(row0 + r) * ld + d] : from_f32<floatX>(0.0f);
    }
}

// Forward. grid (cdiv(T, 64), NH, B), the heaviest query tiles (the last) first; block 128;
// dynamic shared: Q and K tiles (64 x STRIDE) and V transposed (HEAD_DIM x STRIDE_T), floatX.
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_forward(
        const floatX* __restrict__ qkv, floatX* __restrict__ y, floatX* __restrict__ res, float* __restrict__ lse,
        int T, int C, int NH, float scale_log2, int save_res) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sq = reinterpret_cast<floatX*>(flash_smem);
    floatX* sk = sq + TILE * STRIDE;
    floatX* svt = sk + TILE * STRIDE;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const int q0 = qt * TILE;
    load_tile(sq, base, ld, q0, T, HS);
    __syncthreads();
    u32 qa[DK][4];  // this warp's 16 query rows as A fragments, kept for the whole walk
#pragma unroll
    for (int kk = 0; kk < DK; kk++) load_a(qa[kk], sq, STRIDE, warp * 16, kk * 16);
    float o[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {-POS_INF_F, -POS_INF_F}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8
    const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
    const int last_key = min(T, q0 + TILE) - 1;
    for (int k0 = 0; k0 <= last_key; k0 += TILE) {
        __syncthreads();  // every warp is done with the previous K and V tiles
        load_tile(sk, base + C, ld, k0, T, HS);
        load_tile_t(svt, base + 2 * C, ld, k0, T, HS);
        __syncthreads();
        float s[TILE / 8][4];  // scores: 16 rows x 64 keys of this warp
#pragma unroll
        for (int n = 0; n < TILE / 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < DK; kk++) {
                u32 bf[2];
                load_b(bf, sk, STRIDE, n * 8, kk * 16);
                mma16816(s[n], qa[kk], bf);
            }
        }
        const bool edge = k0 + TILE - 1 > q0 + warp * 16 || k0 + TILE > T;  // a key past a row, or past T
        float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
        for (int n = 0; n < TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + n * 8 + 2 * c + (e & 1), row = e < 2 ? row_a : row_b;
                float v = s[n][e] * scale_log2;
                if (edge && (key > row || key >= T)) v = -POS_INF_F;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // a row's first key (key 0) is in the first tile, so mx is finite from then on
            corr[r] = exp2f(m_run[r] - mx[r]);
            m_run[r] = mx[r];
            l_run[r] *= corr[r];
        }
        float rowsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(s[n][e] - mx[e >> 1]);
                s[n][e] = p;
                rowsum[e >> 1] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            rowsum[r] += __shfl_xor_sync(0xffffffffu, rowsum[r], 1);
            rowsum[r] += __shfl_xor_sync(0xffffffffu, rowsum[r], 2);
            l_run[r] += rowsum[r];
        }
#pragma unroll
        for (int n = 0; n < DN; n++) {
            o[n][0] *= corr[0];
            o[n][1] *= corr[0];
            o[n][2] *= corr[1];
            o[n][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) {  // o += P V over this tile's keys
            u32 pa[4];
            c_to_a(pa, s, kk);
#pragma unroll
            for (int n = 0; n < DN; n++) {
                u32 bf[2];
                load_b(bf, svt, STRIDE_T, n * 8, kk * 16);
                mma16816(o[n], pa, bf);
            }
        }
    }
    const float inv[2] = {1.0f / l_run[0], 1.0f / l_run[1]};
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = e < 2 ? row_a : row_b, d = n * 8 + 2 * c + (e & 1);
            if (row < T && d < HS) {
                const float val = o[n][e] * inv[e >> 1];
                const long long at = ((long long)b * T + row) * C + h * HS + d;
                const floatX rounded = from_f32<floatX>(val);
                y[at] = rounded;
                if (save_res) res[at] = from_f32<floatX>(val - to_f32(rounded));
            }
        }
    if (c == 0) {
        float* l = lse + ((long long)b * NH + h) * T;
        if (row_a < T) l[row_a] = m_run[0] + log2f(l_run[0]);
        if (row_b < T) l[row_b] = m_run[1] + log2f(l_run[1]);
    }
}

// delta = rowsum(dy * o), o = y + res (the unrounded output). grid cdiv(B*T*NH, 4), block 128:
// one warp per (row, head).
extern "C" __global__ void attention_flash_delta(const floatX* __restrict__ y, const floatX* __restrict__ res,
                                                 const floatX* __restrict__ dy, float* __restrict__ delta,
                                                 int B, int T, int C, int NH) {
    const long long item = (long long)blockIdx.x * 4 + threadIdx.x / 32;  // (b*T + t)*NH + h
    if (item >= (long long)B * T * NH) return;
    const int lane = threadIdx.x % 32, HS = C / NH, h = (int)(item % NH);
    const long long bt = item / NH;
    const long long at = bt * C + h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc += to_f32(dy[at + d]) * (to_f32(y[at + d]) + to_f32(res[at + d]));
    acc = warp_sum(acc);
    const long long b = bt / T, t = bt % T;
    if (lane == 0) delta[(b * NH + h) * T + t] = acc;
}

// dK, dV of one 64-key tile. grid (cdiv(T, 64), NH, B), block 128 (warp w: keys k0 + 16w ..);
// dynamic shared: K, V, Q, dY tiles (64 x STRIDE) and Q, dY transposed (HEAD_DIM x STRIDE_T),
// floatX, then L and delta of the query tile (2 x 64 floats).
//   S^T = K Q^T;  P^T = exp2(S^T scale_log2 - L);  dV += P^T dY;  dP^T = V dY^T;
//   dS^T = P^T (dP^T - delta);  dK += scale dS^T Q
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_backward_dkdv(
        const floatX* __restrict__ qkv, const floatX* __restrict__ dy, const float* __restrict__ lse,
        const float* __restrict__ delta, floatX* __restrict__ dqkv, int T, int C, int NH, float scale_log2,
        float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sk = reinterpret_cast<floatX*>(flash_smem);
    floatX* sv = sk + TILE * STRIDE;
    floatX* sq = sv + TILE * STRIDE;
    floatX* sg = sq + TILE * STRIDE;
    floatX* sqt = sg + TILE * STRIDE;
    floatX* sgt = sqt + HEAD_DIM * STRIDE_T;
    float* sl = reinterpret_cast<float*>(sgt + HEAD_DIM * STRIDE_T);
    float* sd = sl + TILE;
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const floatX* dy_bh = dy + (long long)b * T * C + h * HS;
    const float* lse_bh = lse + ((long long)b * NH + h) * T;
    const float* delta_bh = delta + ((long long)b * NH + h) * T;
    const int k0 = kt * TILE;
    load_tile(sk, base + C, ld, k0, T, HS);
    load_tile(sv, base + 2 * C, ld, k0, T, HS);
    float dk[DN][4], dv[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;  // this thread's rows of S^T
    for (int q0 = k0; q0 < T; q0 += TILE) {  // the query tiles at or after this key tile
        __syncthreads();
        load_tile(sq, base, ld, q0, T, HS);
        load_tile(sg, dy_bh, C, q0, T, HS);
        load_tile_t(sqt, base, ld, q0, T, HS);
        load_tile_t(sgt, dy_bh, C, q0, T, HS);
        for (int i = threadIdx.x; i < TILE; i += FLASH_THREADS) {
            const bool in = q0 + i < T;
            sl[i] = in ? lse_bh[q0 + i] : POS_INF_F;  // a padded query row: P = exp2(-inf) = 0
            sd[i] = in ? delta_bh[q0 + i] : 0.0f;
        }
        __syncthreads();
        float st[TILE / 8][4], dpt[TILE / 8][4];
#pragma unroll
        for (int n = 0; n < TILE / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < DK; kk++) {
                u32 af[4], bf[2];
                load_a(af, sk, STRIDE, warp * 16, kk * 16);
                load_b(bf, sq, STRIDE, n * 8, kk * 16);
                mma16816(st[n], af, bf);
                load_a(af, sv, STRIDE, warp * 16, kk * 16);
                load_b(bf, sg, STRIDE, n * 8, kk * 16);
                mma16816(dpt[n], af, bf);
            }
        }
        const bool edge = q0 < k0 + TILE;  // the diagonal tile: some queries come before some keys
#pragma unroll
        for (int n = 0; n < TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qi = n * 8 + 2 * c + (e & 1), key = e < 2 ? key_a : key_b;
                float p = exp2f(st[n][e] * scale_log2 - sl[qi]);
                if (edge && q0 + qi < key) p = 0.0f;
                st[n][e] = p;                               // P^T
                dpt[n][e] = p * (dpt[n][e] - sd[qi]);       // dS^T
            }
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) {
            u32 pa[4], sa[4];
            c_to_a(pa, st, kk);
            c_to_a(sa, dpt, kk);
#pragma unroll
            for (int n = 0; n < DN; n++) {
                u32 bf[2];
                load_b(bf, sgt, STRIDE_T, n * 8, kk * 16);
                mma16816(dv[n], pa, bf);
                load_b(bf, sqt, STRIDE_T, n * 8, kk * 16);
                mma16816(dk[n], sa, bf);
            }
        }
    }
    floatX* out = dqkv + (long long)b * T * ld + h * HS;
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = e < 2 ? key_a : key_b, d = n * 8 + 2 * c + (e & 1);
            if (key < T && d < HS) {
                out[(long long)key * ld + C + d] = from_f32<floatX>(dk[n][e] * scale);
                out[(long long)key * ld + 2 * C + d] = from_f32<floatX>(dv[n][e]);
            }
        }
}

// dQ of one 64-query tile. grid (cdiv(T, 64), NH, B), the heaviest first; block 128 (warp w: queries
// q0 + 16w ..); dynamic shared: Q, dY, K, V tiles (64 x STRIDE), K transposed (HEAD_DIM x STRIDE_T).
//   S = Q K^T;  P = exp2(S scale_log2 - L);  dP = dY V^T;  dS = P (dP - delta);  dQ += scale dS K
extern "C" __global__ void __launch_bounds__(FLASH_THREADS) attention_flash_backward_dq(
        const floatX* __restrict__ qkv, const floatX* __restrict__ dy, const float* __restrict__ lse,
        const float* __restrict__ delta, floatX* __restrict__ dqkv, int T, int C, int NH, float scale_log2,
        float scale) {
    extern __shared__ __align__(16) unsigned char flash_smem[];
    floatX* sq = reinterpret_cast<floatX*>(flash_smem);
    floatX* sg = sq + TILE * STRIDE;
    floatX* sk = sg + TILE * STRIDE;
    floatX* sv = sk + TILE * STRIDE;
    floatX* skt = sv + TILE * STRIDE;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const long long ld = 3LL * C;
    const floatX* base = qkv + (long long)b * T * ld + h * HS;
    const floatX* dy_bh = dy + (long long)b * T * C + h * HS;
    const int q0 = qt * TILE;
    load_tile(sq, base, ld, q0, T, HS);
    load_tile(sg, dy_bh, C, q0, T, HS);
    __syncthreads();
    u32 qa[DK][4], ga[DK][4];
#pragma unroll
    for (int kk = 0; kk < DK; kk++) {
        load_a(qa[kk], sq, STRIDE, warp * 16, kk * 16);
        load_a(ga[kk], sg, STRIDE, warp * 16, kk * 16);
    }
    const int row_a = q0 + warp * 16 + g, row_b = row_a + 8;
    const float* lse_bh = lse + ((long long)b * NH + h) * T;
    const float* delta_bh = delta + ((long long)b * NH + h) * T;
    const float l_row[2] = {row_a < T ? lse_bh[row_a] : POS_INF_F, row_b < T ? lse_bh[row_b] : POS_INF_F};
    const float d_row[2] = {row_a < T ? delta_bh[row_a] : 0.0f, row_b < T ? delta_bh[row_b] : 0.0f};
    float dq[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    const int last_key = min(T, q0 + TILE) - 1;
    for (int k0 = 0; k0 <= last_key; k0 += TILE) {
        __syncthreads();
        load_tile(sk, base + C, ld, k0, T, HS);
        load_tile(sv, base + 2 * C, ld, k0, T, HS);
        load_tile_t(skt, base + C, ld, k0, T, HS);
        __syncthreads();
        float s[TILE / 8][4], dp[TILE / 8][4];
#pragma unroll
        for (int n = 0; n < TILE / 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < DK; kk++) {
                u32 bf[2];
                load_b(bf, sk, STRIDE, n * 8, kk * 16);
                mma16816(s[n], qa[kk], bf);
                load_b(bf, sv, STRIDE, n * 8, kk * 16);
                mma16816(dp[n], ga[kk], bf);
            }
        }
        const bool edge = k0 + TILE - 1 > q0 + warp * 16 || k0 + TILE > T;
#pragma unroll
        for (int n = 0; n < TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + n * 8 + 2 * c + (e & 1), row = e < 2 ? row_a : row_b;
                float p = exp2f(s[n][e] * scale_log2 - l_row[e >> 1]);
                if (edge && (key > row || key >= T)) p = 0.0f;
                s[n][e] = p * (dp[n][e] - d_row[e >> 1]);  // dS
            }
#pragma unroll
        for (int kk = 0; kk < TILE / 16; kk++) {
            u32 sa[4];
            c_to_a(sa, s, kk);
#pragma unroll
            for (int n = 0; n < DN; n++) {
                u32 bf[2];
                load_b(bf, skt, STRIDE_T, n * 8, kk * 16);
                mma16816(dq[n], sa, bf);
            }
        }
    }
    floatX* out = dqkv + (long long)b * T * ld + h * HS;
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = e < 2 ? row_a : row_b, d = n * 8 + 2 * c + (e & 1);
            if (row < T && d < HS) out[(long long)row * ld + d] = from_f32<floatX>(dq[n][e] * scale);
        }
}
#endif  // HEAD_DIM
