// Host-side check of backends/cupy_raw/matmul_layout.cuh: the index maps of the tensor-core GEMMs,
// run on the CPU against emulations of what the GPU does with them (no GPU needed). Built and run by
// tests/test_cupy_raw_matmul.py with `nvcc` as a host program; prints one line per failure and
// "ok <checks>" at the end, exit status 1 on any failure.
//
// The emulations follow the PTX ISA:
//   ldmatrix.m8n8.x4 (.trans)  lanes 8j..8j+7 address the 8 rows (16 bytes each) of matrix j; lane l
//                              receives, in register j, row l/4 elements 2(l%4), 2(l%4)+1 of matrix j
//                              (.trans: elements [2(l%4)][l/4] and [2(l%4)+1][l/4]); the lower element
//                              in the low half.
//   mma.m16n8k16 .row.col      a0..a3 = A rows g / g+8, k 2t.. / 2t+8.. (g = lane/4, t = lane%4), b0, b1 =
//                              B k 2t.., 2t+8.. at n = g, c0..c3 = C rows g / g+8, n 2t, 2t+1.
//   TMA, 128-byte swizzle      box element (x innermost, y) at y*128 + 16*((x/8) ^ (y%8)) + 2*(x%8), the
//                              destination 1024-byte aligned.
//   wgmma descriptors          K-major element (mn, k) at start + (mn/8)*SBO + (mn%8)*128 + 2k; MN-major
//                              at start + (mn/64)*LBO + (k/8)*SBO + (k%8)*128 + 2*(mn%64); then the
//                              swizzle XORs address bits 4-6 with bits 7-9.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../backends/cupy_raw/matmul_layout.cuh"

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                 \
    do {                                                 \
        ++checks;                                        \
        if (!(cond)) {                                   \
            if (failures < 40) {                         \
                std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
                std::printf(__VA_ARGS__);                \
                std::printf("\n");                       \
            }                                            \
            ++failures;                                  \
        }                                                \
    } while (0)

// operands hold small integers stored as int16 "elements": products and sums stay exact in float
using Elem = short;

struct Operand {  // logical BMN x 64 operand tile, element (mn, k)
    int bmn;
    std::vector<Elem> v;
    explicit Operand(int bmn_, unsigned seed) : bmn(bmn_), v(bmn_ * TILE_K) {
        for (auto& e : v) { seed = seed * 1103515245u + 12345u; e = (Elem)((seed >> 16) % 7) - 3; }
    }
    Elem at(int mn, int k) const { return v[mn * TILE_K + k]; }
};

// shared memory image of a tile as the cp.async / element loaders of gemm_mma write it
static std::vector<unsigned char> smem_by_loader(const Operand& op, bool kmajor) {
    std::vector<unsigned char> s(op.bmn * TILE_ROW_BYTES, 0xEE);
    std::vector<int> written(op.bmn * TILE_ROW_BYTES / 16, 0);
    for (int q = 0; q < op.bmn * TILE_K / 8; ++q) {
        int mn, k;
        chunk_origin(kmajor, op.bmn, q, mn, k);
        const unsigned off = tile_offset(kmajor, mn, k);
        CHECK(off % 16 == 0 && off < s.size(), "chunk %d of a %s tile at offset %u", q, kmajor ? "K" : "MN", off);
        if (off >= s.size()) continue;
        written[off / 16]++;
        for (int e = 0; e < 8; ++e) {
            const Elem x = kmajor ? op.at(mn, k + e) : op.at(mn + e, k);
            std::memcpy(&s[off + 2 * e], &x, 2);
        }
    }
    for (size_t i = 0; i < written.size(); ++i)
        CHECK(written[i] == 1, "%s tile (%d rows): chunk slot %zu written %d times", kmajor ? "K" : "MN", op.bmn, i,
              written[i]);
    return s;
}

static Elem read16(const std::vector<unsigned char>& s, unsigned off) {
    Elem x;
    std::memcpy(&x, &s[off], 2);
    return x;
}

// ldmatrix.x4: regs[lane][j][half]
static void ldmatrix_x4(const std::vector<unsigned char>& s, const unsigned (&addr)[32], bool trans,
                        Elem (&regs)[32][4][2]) {
    for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) {
                int row, col;
                if (!trans) { row = lane / 4; col = 2 * (lane % 4) + h; }
                else { row = 2 * (lane % 4) + h; col = lane / 4; }
                regs[lane][j][h] = read16(s, addr[8 * j + row] + 2 * col);
            }
}

// the warp tile (wm rows x wn cols) that gemm_mma's loop computes for one 64-deep tile
static void check_mma(bool a_kmajor, bool b_kmajor, int bm, int bn, int warps_m, int warps_n) {
    const Operand A(bm, 7u + a_kmajor), B(bn, 99u + b_kmajor);
    const auto sa = smem_by_loader(A, a_kmajor), sb = smem_by_loader(B, b_kmajor);
    const int wm_rows = bm / warps_m, wn_cols = bn / warps_n, mts = wm_rows / 16, nts = wn_cols / 8;
    for (int wm = 0; wm < warps_m; ++wm)
        for (int wn = 0; wn < warps_n; ++wn) {
            std::vector<float> acc(mts * nts * 4 * 32, 0.0f);  // [mt][nt][lane][reg]
            for (int kk = 0; kk < TILE_K / 16; ++kk) {
                std::vector<Elem> af(mts * 32 * 8), bf(nts * 32 * 4);  // a[mt][lane][reg*2+h], b[nt][lane][reg*2+h]
                for (int mt = 0; mt < mts; ++mt) {
                    unsigned addr[32];
                    for (int lane = 0; lane < 32; ++lane) {
                        int mn, k;
                        ldsm_a_coords(a_kmajor, lane, wm * wm_rows + mt * 16, kk * 16, mn, k);
                        addr[lane] = tile_offset(a_kmajor, mn, k);
                    }
                    Elem r[32][4][2];
                    ldmatrix_x4(sa, addr, !a_kmajor, r);
                    for (int lane = 0; lane < 32; ++lane)
                        for (int j = 0; j < 4; ++j)
                            for (int h = 0; h < 2; ++h) af[(mt * 32 + lane) * 8 + j * 2 + h] = r[lane][j][h];
                }
                for (int np = 0; np < nts / 2; ++np) {
                    unsigned addr[32];
                    for (int lane = 0; lane < 32; ++lane) {
                        int mn, k;
                        ldsm_b_coords(b_kmajor, lane, wn * wn_cols + np * 16, kk * 16, mn, k);
                        addr[lane] = tile_offset(b_kmajor, mn, k);
                    }
                    Elem r[32][4][2];
                    ldmatrix_x4(sb, addr, !b_kmajor, r);
                    for (int lane = 0; lane < 32; ++lane)
                        for (int h = 0; h < 2; ++h) {  // registers 0, 1 -> tile 2np; 2, 3 -> tile 2np + 1
                            bf[((2 * np) * 32 + lane) * 4 + 0 + h] = r[lane][0][h];
                            bf[((2 * np) * 32 + lane) * 4 + 2 + h] = r[lane][1][h];
                            bf[((2 * np + 1) * 32 + lane) * 4 + 0 + h] = r[lane][2][h];
                            bf[((2 * np + 1) * 32 + lane) * 4 + 2 + h] = r[lane][3][h];
                        }
                }
                // mma.m16n8k16 from the fragments
                for (int mt = 0; mt < mts; ++mt)
                    for (int nt = 0; nt < nts; ++nt) {
                        float a16[16][16], b16[16][8];
                        for (int lane = 0; lane < 32; ++lane) {
                            const int g = lane / 4, t = lane % 4;
                            for (int h = 0; h < 2; ++h) {
                                const Elem* a = &af[(mt * 32 + lane) * 8];
                                a16[g][2 * t + h] = a[0 * 2 + h];
                                a16[g + 8][2 * t + h] = a[1 * 2 + h];
                                a16[g][2 * t + 8 + h] = a[2 * 2 + h];
                                a16[g + 8][2 * t + 8 + h] = a[3 * 2 + h];
                                const Elem* b = &bf[(nt * 32 + lane) * 4];
                                b16[2 * t + h][g] = b[0 + h];
                                b16[2 * t + 8 + h][g] = b[2 + h];
                            }
                        }
                        for (int lane = 0; lane < 32; ++lane)
                            for (int reg = 0; reg < 4; ++reg) {
                                const int row = lane / 4 + 8 * (reg / 2), col = 2 * (lane % 4) + reg % 2;
                                float s = 0.0f;
                                for (int k = 0; k < 16; ++k) s += a16[row][k] * b16[k][col];
                                acc[((mt * nts + nt) * 32 + lane) * 4 + reg] += s;
                            }
                    }
            }
            // the epilogue's staging: register -> (row, col) of the block tile
            for (int mt = 0; mt < mts; ++mt)
                for (int nt = 0; nt < nts; ++nt)
                    for (int lane = 0; lane < 32; ++lane)
                        for (int reg = 0; reg < 4; ++reg) {
                            int r, c;
                            mma_acc_coords(lane, reg, r, c);
                            r += wm * wm_rows + mt * 16;
                            c += wn * wn_cols + nt * 8;
                            float want = 0.0f;
                            for (int k = 0; k < TILE_K; ++k) want += (float)A.at(r, k) * B.at(c, k);
                            const float got = acc[((mt * nts + nt) * 32 + lane) * 4 + reg];
                            CHECK(got == want, "mma A %s B %s tile %dx%d: C[%d][%d] = %g, want %g", a_kmajor ? "K" : "MN",
                                  b_kmajor ? "K" : "MN", bm, bn, r, c, got, want);
                        }
        }
}

// TMA's 128-byte-swizzled boxes land where the layout says (tile at a 1024-aligned address)
static void check_tma_layout(bool kmajor, int bmn) {
    for (int mn = 0; mn < bmn; ++mn)
        for (int k = 0; k < TILE_K; ++k) {
            unsigned tma;
            if (kmajor) {  // one box {64 k, bmn rows}: x = k, y = mn
                tma = mn * 128 + 16 * ((k / 8) ^ (mn % 8)) + 2 * (k % 8);
            } else {  // boxes {64 mn, 64 k} one panel apart: x = mn % 64, y = k
                const int x = mn % 64;
                tma = (mn / 64) * PANEL_BYTES + k * 128 + 16 * ((x / 8) ^ (k % 8)) + 2 * (x % 8);
            }
            CHECK(element_offset(kmajor, mn, k) == tma, "%s tile: element (%d, %d) at %u, TMA puts it at %u",
                  kmajor ? "K" : "MN", mn, k, element_offset(kmajor, mn, k), tma);
        }
}

// the address wgmma reads operand element (mn, k) of one 16-deep slice from, given its descriptor
static unsigned wgmma_address(unsigned long long desc, bool kmajor, int mn, int k) {
    const unsigned start = (unsigned)(desc & 0x3FFF) << 4;
    const unsigned lbo = (unsigned)((desc >> 16) & 0x3FFF) << 4;
    const unsigned sbo = (unsigned)((desc >> 32) & 0x3FFF) << 4;
    unsigned addr;
    if (kmajor) addr = start + (mn / 8) * sbo + (mn % 8) * 128 + 2 * k;
    else addr = start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + 2 * (mn % 64);
    return addr ^ (((addr >> 7) & 7) << 4);
}

static void check_wgmma(bool a_kmajor, bool b_kmajor, int bn) {
    const unsigned base = 3 * 16384;  // a 1024-aligned shared address, not 0
    const Operand A(128, 5u + a_kmajor), B(bn, 77u + b_kmajor);
    std::vector<unsigned char> s(base + (128 + bn) * TILE_ROW_BYTES);
    const unsigned a_tile = base, b_tile = base + 128 * TILE_ROW_BYTES;
    for (int mn = 0; mn < 128; ++mn)
        for (int k = 0; k < TILE_K; ++k) std::memcpy(&s[a_tile + element_offset(a_kmajor, mn, k)], &A.v[mn * TILE_K + k], 2);
    for (int mn = 0; mn < bn; ++mn)
        for (int k = 0; k < TILE_K; ++k) std::memcpy(&s[b_tile + element_offset(b_kmajor, mn, k)], &B.v[mn * TILE_K + k], 2);
    const unsigned long long d = wgmma_desc(base + 4096, 8192, 1024);
    CHECK(((d & 0x3FFF) << 4) == base + 4096 && (((d >> 16) & 0x3FFF) << 4) == 8192 &&
              (((d >> 32) & 0x3FFF) << 4) == 1024 && (d >> 62) == 1 && ((d >> 49) & 7) == 0,
          "wgmma_desc packs its fields wrongly: %llx", d);
    for (int wg = 0; wg < 2; ++wg) {
        std::vector<float> acc(64 * bn, 0.0f);  // [row][col] of this warpgroup's 64 x bn
        for (int kk = 0; kk < TILE_K / 16; ++kk) {
            const unsigned long long da = wgmma_operand_desc(a_kmajor, a_tile, 64 * wg, kk);
            const unsigned long long db = wgmma_operand_desc(b_kmajor, b_tile, 0, kk);
            for (int r = 0; r < 64; ++r)
                for (int c = 0; c < bn; ++c) {
                    float sum = 0.0f;
                    for (int k = 0; k < 16; ++k)
                        sum += (float)read16(s, wgmma_address(da, a_kmajor, r, k)) * read16(s, wgmma_address(db, b_kmajor, c, k));
                    acc[r * bn + c] += sum;
                }
        }
        for (int t = 0; t < 128; ++t)
            for (int reg = 0; reg < bn / 2; ++reg) {
                int r, c;
                wgmma_acc_coords(t, reg, r, c);
                CHECK(r >= 0 && r < 64 && c >= 0 && c < bn, "wgmma accumulator %d of thread %d at (%d, %d)", reg, t, r, c);
                float want = 0.0f;
                for (int k = 0; k < TILE_K; ++k) want += (float)A.at(64 * wg + r, k) * B.at(c, k);
                CHECK(acc[r * bn + c] == want, "wgmma A %s B %s n%d: C[%d][%d] = %g, want %g", a_kmajor ? "K" : "MN",
                      b_kmajor ? "K" : "MN", bn, 64 * wg + r, c, acc[r * bn + c], want);
            }
        // gemm_wgmma's epilogue walks register 4j + 2h + e as (row r + 8h, column cc + 8j + e), (r, cc) those of register 0
        for (int t = 0; t < 128; ++t) {
            int r0, c0;
            wgmma_acc_coords(t, 0, r0, c0);
            for (int reg = 0; reg < bn / 2; ++reg) {
                int r, c;
                wgmma_acc_coords(t, reg, r, c);
                const int j = reg / 4, h = (reg / 2) % 2, e = reg % 2;
                CHECK(r == r0 + 8 * h && c == c0 + 8 * j + e, "wgmma register %d of thread %d at (%d, %d), the epilogue "
                      "takes it for (%d, %d)", reg, t, r, c, r0 + 8 * h, c0 + 8 * j + e);
            }
        }
        // every (row, col) of the 64 x bn tile belongs to exactly one (thread, register)
        std::vector<int> owner(64 * bn, 0);
        for (int t = 0; t < 128; ++t)
            for (int reg = 0; reg < bn / 2; ++reg) {
                int r, c;
                wgmma_acc_coords(t, reg, r, c);
                owner[r * bn + c]++;
            }
        for (int i = 0; i < 64 * bn; ++i) CHECK(owner[i] == 1, "wgmma n%d: C element %d owned %d times", bn, i, owner[i]);
    }
}

static void check_tile_order() {
    const int shapes[][3] = {{1, 1, 8}, {7, 3, 8}, {128, 18, 8}, {9, 5, 4}, {393, 3, 32}, {3, 50, 8}, {16, 16, 1}};
    for (const auto& sh : shapes) {
        const int tiles_m = sh[0], tiles_n = sh[1], group = sh[2];
        std::vector<int> seen(tiles_m * tiles_n, 0);
        for (int t = 0; t < tiles_m * tiles_n; ++t) {
            int tm, tn;
            tile_of(t, tiles_m, tiles_n, group, tm, tn);
            CHECK(tm >= 0 && tm < tiles_m && tn >= 0 && tn < tiles_n, "tile_of(%d) of %dx%d -> (%d, %d)", t, tiles_m,
                  tiles_n, tm, tn);
            if (tm >= 0 && tm < tiles_m && tn >= 0 && tn < tiles_n) seen[tm * tiles_n + tn]++;
        }
        for (int i = 0; i < tiles_m * tiles_n; ++i)
            CHECK(seen[i] == 1, "tile_of over %dx%d (group %d): tile %d visited %d times", tiles_m, tiles_n, group, i, seen[i]);
    }
}

// an ldmatrix (8 rows of 16 bytes at one logical chunk) touches 8 distinct bank groups
static void check_conflicts(bool kmajor, int bmn) {
    for (int m0 = 0; m0 < bmn; m0 += 16)
        for (int kk = 0; kk < 4; ++kk)
            for (int which = 0; which < 2; ++which)
                for (int j = 0; j < 4; ++j) {  // matrix j: lanes 8j..8j+7
                    int groups[8];
                    for (int r = 0; r < 8; ++r) {
                        int mn, k;
                        if (which == 0) ldsm_a_coords(kmajor, 8 * j + r, m0, 16 * kk, mn, k);
                        else ldsm_b_coords(kmajor, 8 * j + r, m0, 16 * kk, mn, k);
                        groups[r] = (tile_offset(kmajor, mn, k) / 16) % 8;
                    }
                    for (int x = 0; x < 8; ++x)
                        for (int y = x + 1; y < 8; ++y)
                            CHECK(groups[x] != groups[y], "%s tile: ldmatrix %c at m0 %d kk %d matrix %d: rows %d and %d share banks",
                                  kmajor ? "K" : "MN", which ? 'B' : 'A', m0, kk, j, x, y);
                }
}

int main() {
    for (int kmajor = 0; kmajor < 2; ++kmajor)
        for (int bmn : {64, 128, 256}) {
            check_tma_layout(kmajor, bmn);
            check_conflicts(kmajor, bmn);
        }
    for (int ak = 0; ak < 2; ++ak)
        for (int bk = 0; bk < 2; ++bk) {
            check_mma(ak, bk, 128, 128, 2, 4);
            check_mma(ak, bk, 64, 128, 1, 4);
            check_wgmma(ak, bk, 128);
            check_wgmma(ak, bk, 256);
        }
    check_tile_order();
    if (failures) {
        std::printf("%d of %d checks failed\n", failures, checks);
        return 1;
    }
    std::printf("ok %d\n", checks);
    return 0;
}
