// matmul_layout.cuh: where each element of a GEMM tile lives, for gemm_mma and gemm_wgmma (matmul.cu).
//
// Every index map the two tensor-core GEMMs use is here, as plain __host__ __device__ functions, so
// that tests/test_cupy_raw_matmul.py can compile them for the CPU and check them there against an
// emulation of ldmatrix, mma.sync, TMA and the wgmma descriptors (no GPU needed).
//
// A tile holds 64 elements of k for each of BMN rows (K-major) or 64 elements of m/n for each k
// (MN-major), 16-bit elements, as 128-byte rows of eight 16-byte chunks. The chunks of row R are
// permuted: logical chunk c sits at physical chunk c ^ (R % 8). This is the "128-byte swizzle" of
// TMA (CU_TENSOR_MAP_SWIZZLE_128B, with the tile 1024-byte aligned) and of the wgmma descriptors
// (layout type 1), and it makes every ldmatrix (8 rows, one chunk each) hit 8 different bank groups.
//
//   K-major tile   (BMN rows of 64 k):  row R = mn,                         chunk c = k / 8
//   MN-major tile  (64 k-rows of BMN):  BMN / 64 panels of 64 x 64, one after another (8 KB each):
//                                       row R = (mn / 64) * 64 + k,         chunk c = (mn % 64) / 8
//
// Within a chunk the 8 elements run along k (K-major) or along mn (MN-major).
#define TILE_K 64            // k per tile: one 128-byte row of 16-bit elements
#define TILE_ROW_BYTES 128
#define PANEL_BYTES (TILE_K * TILE_ROW_BYTES)  // one 64 x 64 panel of an MN-major tile: 8 KB

// Byte offset of logical chunk c of row R of a swizzled tile.
__host__ __device__ inline unsigned swizzled_offset(int R, int c) {
    return (unsigned)(R * TILE_ROW_BYTES + ((c ^ (R & 7)) << 4));
}

// Byte offset, within a tile, of the chunk that holds element (mn, k).
__host__ __device__ inline unsigned tile_offset(bool kmajor, int mn, int k) {
    if (kmajor) return swizzled_offset(mn, k >> 3);
    return swizzled_offset((mn >> 6) * TILE_K + k, (mn & 63) >> 3);
}

// Byte offset, within a tile, of element (mn, k) itself.
__host__ __device__ inline unsigned element_offset(bool kmajor, int mn, int k) {
    return tile_offset(kmajor, mn, k) + 2u * (unsigned)(kmajor ? (k & 7) : (mn & 7));
}

// The first element (mn, k) of chunk q (0 <= q < BMN * 8) in the order the loaders copy them:
// consecutive q walk the contiguous direction of global memory (k for K-major, mn for MN-major),
// so consecutive threads read consecutive 16 bytes.
__host__ __device__ inline void chunk_origin(bool kmajor, int bmn, int q, int& mn, int& k) {
    if (kmajor) {
        mn = q >> 3;
        k = (q & 7) << 3;
    } else {
        const int per_k = bmn >> 3;  // chunks along mn in one k-row of the tile
        k = q / per_k;
        mn = (q % per_k) << 3;
    }
}

// ldmatrix.x4 for one mma.sync A fragment (16 rows of m x 16 of k at (m0, k0)): the element whose
// row lane `lane` addresses. Non-transposed (K-major): lanes 0-15 rows m0..m0+15 at k0, lanes 16-31
// the same rows at k0+8, so registers 0..3 come out as a0..a3 of m16n8k16. Transposed (MN-major):
// lane 8q+r addresses k-row k0 + r + 8*(q/2) at m0 + 8*(q%2); .trans hands each thread the same
// (m, k) pairs as the non-transposed K-major case.
__host__ __device__ inline void ldsm_a_coords(bool kmajor, int lane, int m0, int k0, int& mn, int& k) {
    if (kmajor) {
        mn = m0 + (lane & 15);
        k = k0 + ((lane >> 4) << 3);
    } else {
        const int q = lane >> 3;
        k = k0 + (lane & 7) + ((q >> 1) << 3);
        mn = m0 + ((q & 1) << 3);
    }
}

// ldmatrix.x4 for two mma.sync B fragments (n0..n0+7 and n0+8..n0+15, 16 of k at k0): registers
// 0, 1 are b0, b1 of the first n8 tile, registers 2, 3 those of the second. Lane 8q+r addresses:
// K-major: row n0 + r + 8*(q/2) at k0 + 8*(q%2); MN-major (.trans): k-row k0 + r + 8*(q%2) at n0 + 8*(q/2).
__host__ __device__ inline void ldsm_b_coords(bool kmajor, int lane, int n0, int k0, int& mn, int& k) {
    const int q = lane >> 3;
    if (kmajor) {
        mn = n0 + (lane & 7) + ((q >> 1) << 3);
        k = k0 + ((q & 1) << 3);
    } else {
        k = k0 + (lane & 7) + ((q & 1) << 3);
        mn = n0 + ((q >> 1) << 3);
    }
}

// The accumulator of mma.sync.m16n8k16 (4 floats per lane): register reg of lane holds (row, col)
// of the 16 x 8 tile: c0, c1 = (lane/4, 2*(lane%4) + {0,1}), c2, c3 the same 8 rows further down.
__host__ __device__ inline void mma_acc_coords(int lane, int reg, int& row, int& col) {
    row = (lane >> 2) + ((reg >> 1) << 3);
    col = ((lane & 3) << 1) + (reg & 1);
}

// The accumulator of wgmma.m64nNk16 (N/2 floats per thread of the warpgroup, t = 0..127): register
// reg holds (row, col) of the 64 x N tile. Warp w of the warpgroup has rows 16w..16w+15; each group
// of 4 registers covers 8 columns in the mma.sync pattern above.
__host__ __device__ inline void wgmma_acc_coords(int t, int reg, int& row, int& col) {
    const int lane = t & 31, warp = t >> 5;
    row = (warp << 4) + (lane >> 2) + (((reg >> 1) & 1) << 3);
    col = ((reg >> 2) << 3) + ((lane & 3) << 1) + (reg & 1);
}

// Tile t (0 <= t < tiles_m * tiles_n) -> (tile row tm, tile column tn), `group` tile rows at a time:
// blocks that run together share the same few columns of B (and rows of A) in L2.
__host__ __device__ inline void tile_of(int t, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int per_group = group * tiles_n;
    const int first_m = (t / per_group) * group;
    const int rows_in_group = (tiles_m - first_m) < group ? (tiles_m - first_m) : group;
    tm = first_m + (t % per_group) % rows_in_group;
    tn = (t % per_group) / rows_in_group;
}

// A wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets (all in
// 16-byte units, 14 bits each), base offset 0, layout type 1 (128-byte swizzle) in bits 62-63.
__host__ __device__ inline unsigned long long wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

// The descriptor of the wgmma operand (64 or N rows of mn starting at mn0, a multiple of 64, by 16
// of k starting at 16 * kk) inside a tile at shared address `tile` (1024-byte aligned).
//   K-major: rows of 128 bytes, groups of 8 rows 1024 bytes apart (SBO); k steps by 32 bytes within
//            the row (the hardware applies the swizzle to the address it forms); LBO unused (16).
//   MN-major: 64-element mn groups one panel apart (LBO = 8 KB), groups of 8 k-rows 1024 bytes
//            apart (SBO); k steps by 16 rows (2 KB).
__host__ __device__ inline unsigned long long wgmma_operand_desc(bool kmajor, unsigned tile, int mn0, int kk) {
    if (kmajor) return wgmma_desc(tile + (unsigned)mn0 * TILE_ROW_BYTES + (unsigned)kk * 32u, 16u, 1024u);
    return wgmma_desc(tile + (unsigned)(mn0 >> 6) * PANEL_BYTES + (unsigned)kk * 2048u, PANEL_BYTES, 1024u);
}
