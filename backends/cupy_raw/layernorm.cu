// layernorm.cu: layernorm forward and backward, one warp per row (one variant, "rows").
//
//   mean = sum_c x / C,  rstd = 1 / sqrt(sum_c (x - mean)^2 / C + eps),  xhat = (x - mean) rstd
//   y = xhat * w + b
//   g = dout * w:  dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dw += sum_n dout xhat,  db += sum_n dout
//
// Compile-time defines: floatX (x, w, b, y, dout, dx), gradT (dweight, dbias: float for 16-bit
// inputs under mixed precision, else floatX), ELEMS (elements per load: 16 bytes' worth, or 1 where
// C is not a multiple of that or a pointer is not 16-byte aligned) and PACKS (loads per lane:
// ceil(C / (32 ELEMS))). A lane owns columns (p*32 + lane)*ELEMS .. +ELEMS-1 for p < PACKS, so a
// whole row sits in the warp's registers (PACKS*ELEMS floats a lane, at most 64: C <= 2048) and
// is read from memory once; the mean and the variance are two passes over the registers (not
// the E[x^2] - E[x]^2 shortcut).
//
// Backward: a fixed grid of G blocks; warp w of block g takes rows (g*WARPS + w) + k*G*WARPS, so
// each lane accumulates its columns' dweight/dbias sums over those rows in registers. At the end
// the warps of a block add theirs into one shared row, one warp after another (a fixed order),
// and the block writes its (2C) partial; layernorm_finish sums the G partials in order of g and
// adds them to dweight/dbias. No atomics: bitwise repeatable.
#include "common.cuh"

struct Row {  // one lane's share of a row, in float32
    float v[PACKS][ELEMS];
};

__device__ __forceinline__ int column(int p, int lane) { return (p * 32 + lane) * ELEMS; }

template <typename T> __device__ __forceinline__ void load_row(const T* __restrict__ src, int C, int lane, Row& r) {
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int c = column(p, lane);
        if (c < C) {
            if (ELEMS == Pack<T>::N) {
                const Pack<T> pk = load_pack(src + c);
#pragma unroll
                for (int k = 0; k < ELEMS; k++) r.v[p][k] = to_f32(pk.v[k % Pack<T>::N]);
            } else {
#pragma unroll
                for (int k = 0; k < ELEMS; k++) r.v[p][k] = to_f32(src[c + k]);
            }
        } else {
#pragma unroll
            for (int k = 0; k < ELEMS; k++) r.v[p][k] = 0.0f;
        }
    }
}

template <typename T> __device__ __forceinline__ void store_row(T* __restrict__ dst, int C, int lane, const Row& r) {
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int c = column(p, lane);
        if (c >= C) continue;
        if (ELEMS == Pack<T>::N) {
            Pack<T> pk;
#pragma unroll
            for (int k = 0; k < Pack<T>::N; k++) pk.v[k] = from_f32<T>(r.v[p][k % ELEMS]);
            store_pack(dst + c, pk);
        } else {
#pragma unroll
            for (int k = 0; k < ELEMS; k++) dst[c + k] = from_f32<T>(r.v[p][k]);
        }
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
    Row r, w, b;
    load_row(x + row * C, C, lane, r);
    load_row(weight, C, lane, w);
    load_row(bias, C, lane, b);
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) sum += r.v[p][k];
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) {
            const float d = column(p, lane) < C ? r.v[p][k] - mean : 0.0f;
            sq += d * d;
        }
    const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) r.v[p][k] = (r.v[p][k] - mean) * rstd * w.v[p][k] + b.v[p][k];
    store_row(y + row * C, C, lane, r);
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// grid G, block 32*WARPS, dynamic shared memory 2*C floats; partial (G, 2C) float32
extern "C" __global__ void layernorm_backward(const floatX* __restrict__ x, const floatX* __restrict__ weight,
                                              const floatX* __restrict__ dout, const float* __restrict__ mean,
                                              const float* __restrict__ rstd, floatX* __restrict__ dx,
                                              float* __restrict__ partial, int N, int C) {
    extern __shared__ float block_part[];  // (2C): dweight sums then dbias sums of this block
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    Row w, dw, db;
    load_row(weight, C, lane, w);
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dw.v[p][k] = db.v[p][k] = 0.0f;
    const long long step = (long long)gridDim.x * warps;
    for (long long row = (long long)blockIdx.x * warps + warp; row < N; row += step) {
        Row xr, dr;
        load_row(x + row * C, C, lane, xr);
        load_row(dout + row * C, C, lane, dr);
        const float m = mean[row], rs = rstd[row];
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; p++)
#pragma unroll
            for (int k = 0; k < ELEMS; k++) {
                const float xhat = column(p, lane) < C ? (xr.v[p][k] - m) * rs : 0.0f;
                const float g = dr.v[p][k] * w.v[p][k];
                xr.v[p][k] = xhat;
                sum_g += g;
                sum_gx += g * xhat;
                dw.v[p][k] += dr.v[p][k] * xhat;
                db.v[p][k] += dr.v[p][k];
            }
        const float mean_g = warp_sum(sum_g) / C, mean_gx = warp_sum(sum_gx) / C;
#pragma unroll
        for (int p = 0; p < PACKS; p++)
#pragma unroll
            for (int k = 0; k < ELEMS; k++)
                xr.v[p][k] = rs * (dr.v[p][k] * w.v[p][k] - mean_g - xr.v[p][k] * mean_gx);
        store_row(dx + row * C, C, lane, xr);
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
                        block_part[c] = (turn ? block_part[c] : 0.0f) + dw.v[p][k];
                        block_part[C + c] = (turn ? block_part[C + c] : 0.0f) + db.v[p][k];
                    }
                }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) partial[(long long)blockIdx.x * 2 * C + c] = block_part[c];
}

// grid cdiv(2C, 256), block 256: dweight[c] += sum_g partial[g, c], dbias[c] += sum_g partial[g, C + c]
extern "C" __global__ void layernorm_finish(const float* __restrict__ partial, gradT* __restrict__ dweight,
                                            gradT* __restrict__ dbias, int G, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= 2 * C) return;
    float s = 0.0f;
    for (int g = 0; g < G; g++) s += partial[(long long)g * 2 * C + c];
    gradT* dst = c < C ? dweight + c : dbias + (c - C);
    *dst = from_f32<gradT>(to_f32(*dst) + s);
}
