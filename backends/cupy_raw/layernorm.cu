// layernorm.cu: layernorm forward and backward, one warp per row (one variant, "rows"), and the same
// kernels with the residual add fused in (layernorm_residual's, the `residual` template switch).
//
//   mean = sum_c x / C,  rstd = 1 / sqrt(sum_c (x - mean)^2 / C + eps),  xhat = (x - mean) rstd
//   y = xhat * w + b
//   g = dout * w:  dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)),  dw += sum_n dout xhat,  db += sum_n dout
//
// Fused with the residual add before it (layernorm_residual_forward / _backward): the forward stages
// the rows of a and b where it staged x's, makes x = a + b (rounded to floatX, as residual.cu rounds
// it), writes x and normalizes it from shared memory: one read of a and b, one write of x and y. The
// backward stages the stream's gradient dres with each row too and writes da = dres + dx (one
// rounding, where the composed ops round dx first): one pass where the composition takes two.
//
// Compile-time defines: floatX (x, w, b, y, dout, dx), gradT (dweight, dbias: float for 16-bit
// inputs under mixed precision, else floatX), ELEMS (elements per load: 16 bytes' worth, or 1 where
// C is not a multiple of that or a pointer is not 16-byte aligned), PACKS (loads per lane:
// ceil(C / (32 ELEMS))), FORWARD_ROWS (rows a warp of the forward normalizes), and the backward's
// BACKWARD_THREADS and BACKWARD_MIN_BLOCKS (its __launch_bounds__: the blocks per SM the launcher's
// grid counts on) and BACKWARD_STAGES (rows a warp has staged in shared memory, the one it computes
// on included). A lane owns columns (p*32 + lane)*ELEMS .. +ELEMS-1 for p < PACKS, so a whole row sits
// in the warp's registers and is read from memory once; the mean and the variance are two passes over
// the registers (not the E[x^2] - E[x]^2 shortcut).
//
// What sets the speed. Both kernels are memory-bound (~2-3 bytes moved per flop); they move
//   forward:  read x (N C), write y (N C), mean and rstd (2 N float32); w and b (2 C) once per warp, from L1/L2
//   backward: read x and dout (2 N C), mean and rstd (2 N float32), write dx (N C); w (C) once per block;
//             the partials (G x 2C float32) written and read back once (~1.6 MB at G = 264: in L2)
// (the op spec's byte count, euler_core/ops/layernorm.py, counts the first two of each). HBM delivers
// its bandwidth only with enough bytes in flight: ~4.3 TB/s x ~0.8 us of loaded latency ~ 3.4 MB, 26 KB
// an SM at the very least, and a warp that loads, waits, computes and stores has bytes in flight only
// during the wait. So:
// - forward: a warp normalizes FORWARD_ROWS rows and issues the copies of all of them (cp.async into
//   shared memory, no registers held) before it computes on the first: FORWARD_ROWS x 1.5 KB of bf16
//   in flight per warp, and the block count an SM holds is set by shared memory, not registers. A row
//   is read from shared memory in each of its three passes. Holding the rows in registers instead
//   (loads issued together) took 96 registers at 2 rows in bf16: ptxas keeps them converted to float32
//   across the passes, and capping it spilled. weight and bias are staged once per block (warp 0);
//   y is stored with the evict-first hint (written once here; triton's sweep measured it at 4%).
//   The launcher takes FORWARD_ROWS = 1 (measured fastest: a 9 KB block, 16 blocks an SM, 64 warps
//   each with its row in flight; more rows a warp meant fewer warps and a longer last wave).
// - backward: a fixed grid of G blocks (registers cap it at 2 blocks of 8 warps an SM: the lane's
//   dweight/dbias sums, 2 floats a column it owns, are 48 of its 128 registers), so rows in flight
//   cannot come from more warps; they come from shared memory instead: each warp keeps a ring of
//   BACKWARD_STAGES row slots (x, dout, mean, rstd of one row, 3 KB in bf16; dres too, fused) filled by cp.async, which
//   costs no registers, and issues the copies of row i + STAGES - 1 before it computes on row i:
//   (STAGES - 1) x 3 KB in flight per warp all the time (48 KB an SM at the launcher's 2 stages, 16
//   warps; 3 and 4 stages measured slower), where
//   loading into registers gave each warp 3 KB only while it waited. mean and rstd come through the
//   ring too (a plain load of them at each row would expose a whole memory latency per row). weight
//   (float32) lives in shared memory, lane-major (`slot`) so that a warp's reads hit 32 banks, not 4.
//
// The backward's column sums: warp w of block g takes rows (g*WARPS + w) + k*G*WARPS, and each lane
// accumulates its columns' dweight/dbias over those rows in registers (float32). After the rows every
// warp writes its sums into its (now idle) ring, lane-major, and the block's threads add them up
// column by column in order of warp (all threads at once, no turn-taking), writing the block's (2C)
// partial; layernorm_finish sums the G partials in order of g and adds them to dweight/dbias. No
// atomics: bitwise repeatable. The finish is spread over many threads (FINISH_SPLIT of them per
// column, each summing every FINISH_SPLIT-th partial, then the FINISH_SPLIT sums added in order): one
// thread per column walking all G partials was a long chain of dependent L2 reads on a handful of
// blocks.
#include "common.cuh"

typedef Pack<floatX> PackX;

// ELEMS consecutive elements of a row as stored: one 16-byte load when ELEMS == PackX::N
struct alignas(16) Elems {
    floatX v[ELEMS];
};

// a row padded to whole packs of every lane (columns past C are never read)
constexpr int ROW_PAD = 32 * PACKS * ELEMS;

__device__ __forceinline__ int column(int p, int lane) { return (p * 32 + lane) * ELEMS; }

// Where the backward keeps weight[column(p, lane) + k] in shared memory: lane-major, so that the 32
// lanes reading element k of their pack p read 32 consecutive floats (one per bank). Stored as the
// row is (lane stride ELEMS floats), the lanes of a warp hit the same banks 8 ways (bf16 packs).
__device__ __forceinline__ int slot(int p, int lane, int k) { return (k * PACKS + p) * 32 + lane; }
__device__ __forceinline__ int weight_slot(int c) { return slot(c / ELEMS / 32, c / ELEMS % 32, c % ELEMS); }

__device__ __forceinline__ Elems zero_elems() {
    Elems e;
#pragma unroll
    for (int k = 0; k < ELEMS; k++) e.v[k] = from_f32<floatX>(0.0f);
    return e;
}

// src[c .. c+ELEMS-1] of a row staged in shared memory, or zeros past the row's end (c >= C)
__device__ __forceinline__ Elems shared_elems(const floatX* src, int c, int C) {
    Elems e;
    if (c >= C) {
        e = zero_elems();
    } else if constexpr (ELEMS == PackX::N) {
        e = *reinterpret_cast<const Elems*>(src + c);
    } else {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) e.v[k] = src[c + k];
    }
    return e;
}

template <bool stream> __device__ __forceinline__ void store_elems(floatX* __restrict__ dst, int c, int C, const Elems& e) {
    if (c >= C) return;
    if constexpr (ELEMS == PackX::N) {
        const PackX& pk = *reinterpret_cast<const PackX*>(&e);
        if (stream) store_pack_stream(dst + c, pk);
        else store_pack(dst + c, pk);
    } else {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dst[c + k] = e.v[k];
    }
}

// Copies src[c .. c+ELEMS-1] into dst[c ..] (shared memory): cp.async where the row is whole 16-byte
// packs, element by element (synchronous) otherwise; nothing past the row's end
__device__ __forceinline__ void stage_elems(floatX* dst, const floatX* __restrict__ src, int c, int C) {
    if (c >= C) return;
    if constexpr (ELEMS == PackX::N) {
        cp_async16(dst + c, src + c, true);
    } else {
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dst[c + k] = src[c + k];
    }
}

static_assert(FORWARD_ROWS >= 1 && FORWARD_ROWS <= 8, "cp_async_wait_upto counts up to 7 younger groups");

// e to this lane's columns c.. of a row staged in shared memory (nothing past the row's end)
__device__ __forceinline__ void put_shared_elems(floatX* dst, int c, int C, const Elems& e) {
    if (c >= C) return;
    if constexpr (ELEMS == PackX::N) *reinterpret_cast<Elems*>(dst + c) = e;
    else
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dst[c + k] = e.v[k];
}

// grid cdiv(N, FORWARD_ROWS * WARPS), block 32*WARPS, dynamic shared memory (2 + WARPS FORWARD_ROWS
// (1 + residual)) ROW_PAD elements: weight, bias, then each warp's FORWARD_ROWS row slots (x's, or
// a's and b's). Warp w of block b normalizes rows (b*WARPS + w)*FORWARD_ROWS + i, i < FORWARD_ROWS:
// it issues the copies of all of them at once (a cp.async group each), then takes them in order as
// they land, reading each row from shared memory in its three passes (sum, squares, output); with
// the residual, the first pass makes x = a + b, writes it out and leaves it in a's slot (a lane
// reads and writes only its own columns there: no barrier).
template <bool residual>
__device__ __forceinline__ void normalize_rows(const floatX* __restrict__ x, const floatX* __restrict__ b_rows,
                                               floatX* __restrict__ x_out, const floatX* __restrict__ weight,
                                               const floatX* __restrict__ bias, floatX* __restrict__ y,
                                               float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                               int N, int C, float eps) {
    constexpr int R = FORWARD_ROWS, SLOT = (1 + residual) * ROW_PAD;
    extern __shared__ float shared[];
    floatX* const sw = reinterpret_cast<floatX*>(shared);
    floatX* const sb = sw + ROW_PAD;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    floatX* const rows = sb + ROW_PAD + warp * R * SLOT;
    const long long row0 = ((long long)blockIdx.x * (blockDim.x / 32) + warp) * R;
    if (warp == 0) {  // weight and bias, for the block: one group, older than every row's
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            stage_elems(sw, weight, column(p, lane), C);
            stage_elems(sb, bias, column(p, lane), C);
        }
    }
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (row0 + i < N)
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                stage_elems(rows + i * SLOT, x + (row0 + i) * C, column(p, lane), C);
                if constexpr (residual) stage_elems(rows + i * SLOT + ROW_PAD, b_rows + (row0 + i) * C, column(p, lane), C);
            }
        cp_async_commit();  // a group per row, empty past N
    }
    cp_async_wait<R>();  // weight and bias (warp 0's copies) landed
    __syncthreads();
#pragma unroll
    for (int i = 0; i < R; i++) {
        cp_async_wait_upto(R - 1 - i);  // row i landed (this lane's columns, which it alone reads)
        const long long row = row0 + i;
        if (row >= N) break;
        floatX* const sx = rows + i * SLOT;
        float sum = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            Elems e = shared_elems(sx, column(p, lane), C);  // zeros past C
            if constexpr (residual) {
                const Elems e_b = shared_elems(sx + ROW_PAD, column(p, lane), C);
#pragma unroll
                for (int k = 0; k < ELEMS; k++) e.v[k] = from_f32<floatX>(to_f32(e.v[k]) + to_f32(e_b.v[k]));
                put_shared_elems(sx, column(p, lane), C, e);
                store_elems<false>(x_out + row * C, column(p, lane), C, e);
            }
#pragma unroll
            for (int k = 0; k < ELEMS; k++) sum += to_f32(e.v[k]);
        }
        const float mean = warp_sum(sum) / C;
        float sq = 0.0f;
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            if (column(p, lane) >= C) continue;
            const Elems e = shared_elems(sx, column(p, lane), C);
#pragma unroll
            for (int k = 0; k < ELEMS; k++) {
                const float d = to_f32(e.v[k]) - mean;
                sq += d * d;
            }
        }
        const float rstd = rsqrtf(warp_sum(sq) / C + eps);
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            const int c = column(p, lane);
            if (c >= C) continue;
            const Elems e = shared_elems(sx, c, C), w = shared_elems(sw, c, C), b = shared_elems(sb, c, C);
            Elems out;
#pragma unroll
            for (int k = 0; k < ELEMS; k++)
                out.v[k] = from_f32<floatX>((to_f32(e.v[k]) - mean) * rstd * to_f32(w.v[k]) + to_f32(b.v[k]));
            store_elems<true>(y + row * C, c, C, out);
        }
        if (lane == 0) {
            mean_out[row] = mean;
            rstd_out[row] = rstd;
        }
    }
}

extern "C" __global__ void layernorm_forward(const floatX* __restrict__ x, const floatX* __restrict__ weight,
                                             const floatX* __restrict__ bias, floatX* __restrict__ y,
                                             float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                             int N, int C, float eps) {
    normalize_rows<false>(x, nullptr, nullptr, weight, bias, y, mean_out, rstd_out, N, C, eps);
}

// x = a + b, y = layernorm(x)
extern "C" __global__ void layernorm_residual_forward(const floatX* __restrict__ a, const floatX* __restrict__ b,
                                                      floatX* __restrict__ x, const floatX* __restrict__ weight,
                                                      const floatX* __restrict__ bias, floatX* __restrict__ y,
                                                      float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                      int N, int C, float eps) {
    normalize_rows<true>(a, b, x, weight, bias, y, mean_out, rstd_out, N, C, eps);
}

// One slot of a backward warp's ring: x and dout of one row as stored (ROW_PAD each), with the
// residual the stream's gradient dres too, then its mean and rstd (16 bytes, so that every slot
// starts 16-byte aligned).
template <bool residual> __host__ __device__ constexpr int stage_bytes() { return (2 + residual) * ROW_PAD * (int)sizeof(floatX) + 16; }
// A warp's share of the backward's dynamic shared memory: its ring while it walks its rows, then its
// dweight/dbias sums (2 ROW_PAD float32, lane-major) for the block's column sums.
template <bool residual> __host__ __device__ constexpr int warp_bytes() {
    return BACKWARD_STAGES * stage_bytes<residual>() > 8 * ROW_PAD ? BACKWARD_STAGES * stage_bytes<residual>() : 8 * ROW_PAD;
}

// Copies row `row` (x, dout and dres: this lane's columns; mean, rstd: lanes 0 and 1) into a ring
// slot: cp.async where the row is whole 16-byte packs; element by element (synchronous) otherwise.
// Nothing past N.
template <bool residual>
__device__ __forceinline__ void stage_row(unsigned char* stage, const floatX* __restrict__ x,
                                          const floatX* __restrict__ dout, const floatX* __restrict__ dres,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          long long row, int N, int C, int lane) {
    if (row >= N) return;
    floatX* sx = reinterpret_cast<floatX*>(stage);
    floatX* sd = sx + ROW_PAD;
    float* st = reinterpret_cast<float*>(sd + (1 + residual) * ROW_PAD);
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        stage_elems(sx, x + row * C, column(p, lane), C);
        stage_elems(sd, dout + row * C, column(p, lane), C);
        if constexpr (residual) stage_elems(sd + ROW_PAD, dres + row * C, column(p, lane), C);
    }
    if (lane == 0) cp_async4(st, mean + row);
    if (lane == 1) cp_async4(st + 1, rstd + row);
}

// grid G, block BACKWARD_THREADS, dynamic shared memory 4 ROW_PAD + WARPS x warp_bytes bytes;
// partial (G, 2C) float32. With the residual, dx = dres + the layernorm's gradient (dres is read
// into the ring before dx's row is written: dx may be dres itself).
template <bool residual>
__device__ __forceinline__ void normalize_backward_rows(const floatX* __restrict__ x, const floatX* __restrict__ weight,
                                                        const floatX* __restrict__ dout, const floatX* dres,
                                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                                        floatX* dx, float* __restrict__ partial, int N, int C) {
    constexpr int S = BACKWARD_STAGES, STAGE = stage_bytes<residual>(), WARP = warp_bytes<residual>();
    extern __shared__ float shared[];
    float* w = shared;  // (ROW_PAD): weight in float32, read from here at every row, lane-major
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    unsigned char* const ring = reinterpret_cast<unsigned char*>(shared + ROW_PAD) + warp * WARP;
    const long long first = (long long)blockIdx.x * warps + warp, step = (long long)gridDim.x * warps;
#pragma unroll
    for (int s = 0; s < S - 1; s++) {  // the first S - 1 rows on their way before anything else
        stage_row<residual>(ring + s * STAGE, x, dout, dres, mean, rstd, first + s * step, N, C, lane);
        cp_async_commit();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) w[weight_slot(c)] = to_f32(weight[c]);
    __syncthreads();
    float dw[PACKS][ELEMS], db[PACKS][ELEMS];     // this lane's columns' sums over its rows
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) dw[p][k] = db[p][k] = 0.0f;
    int at = 0;  // the slot of `row`
    for (long long row = first; row < N; row += step) {
        __syncwarp();  // every lane is done with the slot refilled next (the previous row's, or this one's if S == 1)
        stage_row<residual>(ring + (at + S - 1) % S * STAGE, x, dout, dres, mean, rstd, row + (S - 1) * step, N, C, lane);
        cp_async_commit();  // a group per row, empty past N: the wait below counts rows
        cp_async_wait<S - 1>();
        __syncwarp();       // lanes 0 and 1 copied mean and rstd for all
        const unsigned char* stage = ring + at * STAGE;
        const floatX* sx = reinterpret_cast<const floatX*>(stage);
        const floatX* sd = sx + ROW_PAD;
        const float* st = reinterpret_cast<const float*>(sd + (1 + residual) * ROW_PAD);
        const float m = st[0], rs = st[1];
        at = at + 1 == S ? 0 : at + 1;
        Elems xr[PACKS], dr[PACKS];
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            xr[p] = shared_elems(sx, column(p, lane), C);
            dr[p] = shared_elems(sd, column(p, lane), C);
        }
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
            Elems out, r;
            if constexpr (residual) r = shared_elems(sd + ROW_PAD, column(p, lane), C);
#pragma unroll
            for (int k = 0; k < ELEMS; k++) {
                const float xhat = (to_f32(xr[p].v[k]) - m) * rs;
                const float g = to_f32(dr[p].v[k]) * w[slot(p, lane, k)];
                float grad = rs * (g - mean_g - xhat * mean_gx);
                if constexpr (residual) grad += to_f32(r.v[k]);
                out.v[k] = from_f32<floatX>(grad);
            }
            store_elems<false>(dx + row * C, column(p, lane), C, out);
        }
    }
    // the block's column sums: each warp's into its ring (lane-major: dweight, then dbias), then every
    // thread adds some columns' up over the warps in order
    cp_async_wait<0>();
    __syncthreads();
    float* const sums = reinterpret_cast<float*>(ring);
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int k = 0; k < ELEMS; k++) {
            sums[slot(p, lane, k)] = dw[p][k];
            sums[ROW_PAD + slot(p, lane, k)] = db[p][k];
        }
    __syncthreads();
    const float* const sums0 = reinterpret_cast<const float*>(shared + ROW_PAD);  // warp 0's
    for (int s = threadIdx.x; s < 2 * ROW_PAD; s += blockDim.x) {
        const int which = s / ROW_PAD, ls = s % ROW_PAD;  // ls = slot(p, lane, k)
        const int c = column(ls / 32 % PACKS, ls % 32);
        if (c >= C) continue;
        float total = 0.0f;
        for (int v = 0; v < warps; v++) total += sums0[v * (WARP / 4) + s];
        partial[(long long)blockIdx.x * 2 * C + which * C + c + ls / 32 / PACKS] = total;
    }
}

extern "C" __global__ void __launch_bounds__(BACKWARD_THREADS, BACKWARD_MIN_BLOCKS)
layernorm_backward(const floatX* __restrict__ x, const floatX* __restrict__ weight, const floatX* __restrict__ dout,
                   const float* __restrict__ mean, const float* __restrict__ rstd, floatX* __restrict__ dx,
                   float* __restrict__ partial, int N, int C) {
    normalize_backward_rows<false>(x, weight, dout, nullptr, mean, rstd, dx, partial, N, C);
}

// da = dres + layernorm's dx (dres: the residual stream's gradient from further on)
extern "C" __global__ void __launch_bounds__(BACKWARD_THREADS, BACKWARD_MIN_BLOCKS)
layernorm_residual_backward(const floatX* __restrict__ x, const floatX* __restrict__ weight,
                            const floatX* __restrict__ dout, const floatX* dres, const float* __restrict__ mean,
                            const float* __restrict__ rstd, floatX* da, float* __restrict__ partial, int N, int C) {
    normalize_backward_rows<true>(x, weight, dout, dres, mean, rstd, da, partial, N, C);
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
#pragma unroll 4
        for (int g = j; g < G; g += FINISH_SPLIT) s += partial[(long long)g * 2 * C + c];
    sums[j][threadIdx.x] = s;
    __syncthreads();
    if (j != 0 || c >= 2 * C) return;
    float total = 0.0f;
    for (int i = 0; i < FINISH_SPLIT; i++) total += sums[i][threadIdx.x];
    gradT* dst = c < C ? dweight + c : dbias + (c - C);
    *dst = from_f32<gradT>(to_f32(*dst) + total);
}
