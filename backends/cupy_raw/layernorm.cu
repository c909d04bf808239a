// layernorm.cu: layernorm forward and backward, one warp per row (one variant, "rows").
//
//   mean = sum_c x / C,  rstd = 1 / sqrt(sum_c (x - mean)^2 / C + eps),  xhat = (x - mean) rstd
//   y = xhat * w + b
//   g = dout * w:  dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dw += sum_n dout xhat,  db += sum_n dout
//
// Compile-time defines: floatX (x, w, b, y, dout, dx), gradT (dweight, dbias: float for 16-bit
// inputs under mixed precision, else floatX), ELEMS (elements per load: 16 bytes' worth, or 1 where
// C is not a multiple of that or a pointer is not 16-byte aligned), PACKS (loads per lane:
// ceil(C / (32 ELEMS))), and the backward's BACKWARD_THREADS and BACKWARD_MIN_BLOCKS (its
// __launch_bounds__: the blocks per SM the launcher's grid counts on). A lane owns columns
// (p*32 + lane)*ELEMS .. +ELEMS-1 for p < PACKS, so a whole row sits in the warp's registers and is
// read from memory once; the mean and the variance are two passes over the registers (not the
// E[x^2] - E[x]^2 shortcut).
//
// What sets the speed (both kernels are memory-bound: ~2-3 bytes moved per flop) is how many bytes
// each SM has in flight, which is warps resident x bytes each warp has asked for; registers decide
// the warps. So a lane keeps its share of a row as stored (Elems: 8 bf16 in 4 registers, not 8
// floats) and converts to float32 where it computes; the forward loads weight and bias only after
// the statistics, where they are used; the backward keeps weight (float32) in shared memory, read
// at every row, leaving the registers to its dweight/dbias sums, laid out lane-major (`slot`) so that
// those reads hit 32 banks, not 4; x and dout, read once, are loaded
// with the evict-first hint. The first version kept x, w and b (in the backward x, dout, w) as
// float32 rows in registers: 92 registers in the forward (20 warps an SM) and 157 in the backward
// (2 blocks of 4 warps: 8 warps an SM); at C = 768 in bf16 now 46 (44 warps) and 127 (2 blocks of
// 8 warps, the __launch_bounds__ the launcher asks for).
//
// Backward: a fixed grid of G blocks; warp w of block g takes rows (g*WARPS + w) + k*G*WARPS, so
// each lane accumulates its columns' dweight/dbias sums over those rows in registers (float32). At
// the end the warps of a block add theirs into one shared row, one warp after another (a fixed
// order), and the block writes its (2C) partial; layernorm_finish sums the G partials in order of g
// and adds them to dweight/dbias. No atomics: bitwise repeatable. The finish is spread over many
// threads (FINISH_SPLIT of them per column, each summing every FINISH_SPLIT-th partial, then the
// FINISH_SPLIT sums added in order): one thread per column walking all G partials was a long chain
// of dependent L2 reads on a handful of blocks.
#include "common.cuh"

typedef Pack<floatX> PackX;

// ELEMS consecutive elements of a row as stored: one 16-byte load when ELEMS == PackX::N
struct alignas(16) Elems {
    floatX v[ELEMS];
};

__device__ __forceinline__ int column(int p, int lane) { return (p * 32 + lane) * ELEMS; }

// Where the backward keeps weight[column(p, lane) + k] in shared memory: lane-major, so that the 32
// lanes reading element k of their pack p read 32 consecutive floats (one per bank). Stored as the
// row is (lane stride ELEMS floats), the lanes of a warp hit the same banks 8 ways (bf16 packs).
__device__ __forceinline__ int slot(int p, int lane, int k) { return (k * PACKS + p) * 32 + lane; }
__device__ __forceinline__ int weight_slot(int c) { return slot(c / ELEMS / 32, c / ELEMS % 32, c % ELEMS); }

// src[c .. c+ELEMS-1], or zeros past the row's end; `stream`: the evict-first hint (data read once)
template <bool stream> __device__ __forceinline__ Elems load_elems(const floatX* __restrict__ src, int c, int C) {
    Elems e;
    if (c >= C) {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) e.v[k] = from_f32<floatX>(0.0f);
    } else if constexpr (ELEMS == PackX::N) {
        const PackX pk = stream ? load_pack_stream(src + c) : load_pack(src + c);
        e = *reinterpret_cast<const Elems*>(&pk);
    } else {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) e.v[k] = src[c + k];
    }
    return e;
}

__device__ __forceinline__ void store_elems(floatX* __restrict__ dst, int c, int C, const Elems& e) {
    if (c >= C) return;
    if constexpr (ELEMS == PackX::N) {
        store_pack(dst + c, *reinterpret_cast<const PackX*>(&e));
    } else {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dst[c + k] = e.v[k];
    }
}

// grid cdiv(N, WARPS), block 32*WARPS: one warp per row
extern "C" __global__ void layernorm_forward(const floatX* __restrict__ x, const floatX* __restrict__ weight,
                                             const floatX* __restrict__ bias, floatX* __restrict__ y,
                                             float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                             int N, int C, float eps) {
    const int lane = threadIdx.x % 32;
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    Elems xr[PACKS];  // this lane's share of the row, as stored
#pragma unroll
    for (int p = 0; p < PACKS; p++) xr[p] = load_elems<true>(x + row * C, column(p, lane), C);
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) sum += to_f32(xr[p].v[k]);  // columns past C hold 0
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) {
            const float d = column(p, lane) < C ? to_f32(xr[p].v[k]) - mean : 0.0f;
            sq += d * d;
        }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int c = column(p, lane);
        const Elems w = load_elems<false>(weight, c, C), b = load_elems<false>(bias, c, C);
        Elems out;
#pragma unroll
        for (int k = 0; k < ELEMS; k++)
            out.v[k] = from_f32<floatX>((to_f32(xr[p].v[k]) - mean) * rstd * to_f32(w.v[k]) + to_f32(b.v[k]));
        store_elems(y + row * C, c, C, out);
    }
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// grid G, block BACKWARD_THREADS, dynamic shared memory 2C + 32 PACKS ELEMS floats; partial (G, 2C) float32
extern "C" __global__ void __launch_bounds__(BACKWARD_THREADS, BACKWARD_MIN_BLOCKS)
layernorm_backward(const floatX* __restrict__ x, const floatX* __restrict__ weight, const floatX* __restrict__ dout,
                   const float* __restrict__ mean, const float* __restrict__ rstd, floatX* __restrict__ dx,
                   float* __restrict__ partial, int N, int C) {
    extern __shared__ float shared[];
    float* block_part = shared;          // (2C): dweight sums then dbias sums of this block
    float* w = shared + 2 * C;           // (C): weight in float32, read from here at every row, lane-major
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int c = threadIdx.x; c < C; c += blockDim.x) w[weight_slot(c)] = to_f32(weight[c]);
    __syncthreads();
    float dw[PACKS][ELEMS], db[PACKS][ELEMS];     // this lane's columns' sums over its rows
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dw[p][k] = db[p][k] = 0.0f;
    const long long step = (long long)gridDim.x * warps;
    for (long long row = (long long)blockIdx.x * warps + warp; row < N; row += step) {
        Elems xr[PACKS], dr[PACKS];
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            xr[p] = load_elems<true>(x + row * C, column(p, lane), C);
            dr[p] = load_elems<true>(dout + row * C, column(p, lane), C);
        }
        const float m = mean[row], rs = rstd[row];
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            if (column(p, lane) >= C) continue;
#pragma unroll
            for (int k = 0; k < ELEMS; k++) {
                const float xhat = (to_f32(xr[p].v[k]) - m) * rs;
                const float d = to_f32(dr[p].v[k]), g = d * w[slot(p, lane, k)];
                sum_g += g;
                sum_gx += g * xhat;
                dw[p][k] += d * xhat;
                db[p][k] += d;
            }
        }
        const float mean_g = warp_sum(sum_g) / C, mean_gx = warp_sum(sum_gx) / C;
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            if (column(p, lane) >= C) continue;
            Elems out;
#pragma unroll
            for (int k = 0; k < ELEMS; k++) {
                const float xhat = (to_f32(xr[p].v[k]) - m) * rs;
                const float g = to_f32(dr[p].v[k]) * w[slot(p, lane, k)];
                out.v[k] = from_f32<floatX>(rs * (g - mean_g - xhat * mean_gx));
            }
            store_elems(dx + row * C, column(p, lane), C, out);
        }
    }
    // the block's column sums: warp 0 writes, then each later warp adds, in order
    for (int turn = 0; turn < warps; turn++) {
        if (warp == turn) {
#pragma unroll
            for (int p = 0; p < PACKS; p++)
#pragma unroll
                for (int k = 0; k < ELEMS; k++) {
                    const int c = column(p, lane) + k;
                    if (column(p, lane) < C) {
                        block_part[c] = (turn ? block_part[c] : 0.0f) + dw[p][k];
                        block_part[C + c] = (turn ? block_part[C + c] : 0.0f) + db[p][k];
                    }
                }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) partial[(long long)blockIdx.x * 2 * C + c] = block_part[c];
}

// grid cdiv(2C, 32), block (32, FINISH_SPLIT): column c = 32 blockIdx.x + threadIdx.x;
// dweight[c] += sum_g partial[g, c], dbias[c] += sum_g partial[g, C + c], summed in a fixed order
// (thread j adds the partials g = j, j + FINISH_SPLIT, ...; then the FINISH_SPLIT sums in order of j)
extern "C" __global__ void layernorm_finish(const float* __restrict__ partial, gradT* __restrict__ dweight,
                                            gradT* __restrict__ dbias, int G, int C) {
    __shared__ float sums[FINISH_SPLIT][32];
    const int c = blockIdx.x * 32 + threadIdx.x, j = threadIdx.y;
    float s = 0.0f;
    if (c < 2 * C)
        for (int g = j; g < G; g += FINISH_SPLIT) s += partial[(long long)g * 2 * C + c];
    sums[j][threadIdx.x] = s;
    __syncthreads();
    if (j != 0 || c >= 2 * C) return;
    float total = 0.0f;
    for (int i = 0; i < FINISH_SPLIT; i++) total += sums[i][threadIdx.x];
    gradT* dst = c < C ? dweight + c : dbias + (c - C);
    *dst = from_f32<gradT>(to_f32(*dst) + total);
}
