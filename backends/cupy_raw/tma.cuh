// tma.cuh: Hopper's asynchronous copies and the barriers they complete, shared by matmul.cu's
// gemm_wgmma and attention.cu's wgmma kernels (after tensor_core.cuh, whose smem_at the emulator uses;
// TmaDescriptor, the kernel parameter, is common.cuh's):
//
//   mbar_init(bar, n)          an mbarrier (8 bytes of shared memory at address bar) whose phases
//                              complete after n arrivals and every expected transaction byte
//   MBAR_FENCE_INIT()          the initialisations made visible to the async proxy (TMA) before any
//                              copy completes on them; then __syncthreads before anyone waits
//   mbar_expect_tx(bar, b)     one arrival that also announces b bytes still to come (TMA's)
//   mbar_arrive(bar)           one arrival
//   mbar_wait(bar, parity)     wait until the phase of that parity has completed; a fresh barrier
//                              counts its phase of parity 1 as complete, so the first pass of a
//                              producer over a ring of "empty" barriers does not wait
//   tma_load_2d / 3d           one box of a tensor map (_tma.py encodes them) into shared memory at
//                              dst, coordinates innermost first, elements outside the array as
//                              zeros; its bytes complete the transactions `bar` expects. A box
//                              starts on 16 bytes of global memory (its first column's address: an
//                              unaligned start is an illegal instruction, seen on the H200)
//   tma_store_3d               the other way: one box of shared memory (laid out as a load of the
//                              same map would leave it) written to the array at (c0, c1, c2); the
//                              parts of the box outside the array are not written.
//                              tma_reduce_add_3d: the same box added to the array's elements instead
//                              (float32 maps: one rounded addition per element, old + box, as a
//                              thread's own += would do it). Asynchronous: the issuing thread closes
//                              its stores into a group (tma_store_commit), and waits with
//                              tma_store_wait_read<N> until all but the N newest groups have read
//                              their shared memory (it may then be overwritten) or with
//                              tma_store_wait_all until they are done. Shared-memory writes of the generic proxy must be fenced first
//                              (WG_FENCE_PROXY_ASYNC, wgmma.cuh) by the threads that made them.
//
// In a cluster of blocks (gemm_wgmma's WG_CLUSTER; in the emulator the cluster's blocks run together,
// another block's shared address carrying its rank + 1 in bits 24 and up: emu_mapa):
//   cluster_ctarank()          this block's rank in its cluster
//   cluster_sync()             a barrier over every thread of the cluster's blocks (release / acquire)
//   mbar_arrive_cluster(bar, r)  one arrival at the mbarrier at offset bar of rank r's shared memory
//   tma_load_2d_multicast      tma_load_2d into every block of `mask` at the same offset dst, the
//                              bytes completing each one's mbarrier at offset bar
//
// The pattern both users follow: a ring of slots, each with a "full" barrier (one expect_tx arrival
// by the issuing thread; the copies complete it) and an "empty" barrier (an arrival by every thread
// that reads the slot). Pass u over slot s waits on full[s] for parity u & 1, and the issuer of
// pass u + 1 waits on empty[s] for parity u & 1 (so for parity 1 on the first pass: at once).
#ifdef CUPY_RAW_EMULATOR
// On the CPU (backends/cupy_raw/_emulator.py), by the PTX ISA's definitions:
//   mbarrier   the arrival count (bit 15: the current phase's parity), the arrivals still pending,
//              the transaction bytes still expected; a phase completes when both reach zero (then the
//              pending count is reset and the parity flips); try_wait.parity P succeeds once the phase
//              of parity P has completed (at once for P = 1 on a fresh one)
//   TMA        the box copied at once, element by element, zeros outside the array; with the 128-byte
//              swizzle 16-byte chunk c of box row y lands at chunk c ^ (y % 8) of 128-byte row y, else
//              the box rows are packed; then its bytes complete
struct EmuMbar {
    unsigned short count_phase, pending;
    int tx;
};
struct EmuTensorMap {  // what _tma.tiled encodes in emulation
    unsigned long long base, row_stride_bytes, plane_stride_bytes;
    unsigned elem_bytes, cols, rows, planes, box_cols, box_rows, swizzle_128b;
};

__device__ __forceinline__ EmuMbar& emu_mbar(unsigned bar) { return *reinterpret_cast<EmuMbar*>(smem_at(bar)); }
__device__ __forceinline__ void emu_mbar_complete(EmuMbar& m) {  // (after every change: progress)
    emu::progress++;
    if (m.pending == 0 && m.tx == 0) {
        m.count_phase ^= 0x8000;
        m.pending = m.count_phase & 0x7fff;
    }
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) { emu_mbar(bar) = {(unsigned short)count, (unsigned short)count, 0}; }
#define MBAR_FENCE_INIT()
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    EmuMbar& m = emu_mbar(bar);
    m.tx += (int)bytes;
    m.pending--;
    emu_mbar_complete(m);
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    EmuMbar& m = emu_mbar(bar);
    m.pending--;
    emu_mbar_complete(m);
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    for (emu::Spin spin; (unsigned)(emu_mbar(bar).count_phase >> 15) == parity;) {
        if (spin.stalled()) {  // nothing will ever complete it: report instead of spinning forever
            EMU_FAIL("tma.cuh (emulated): thread %d of block %d waits forever on the mbarrier at %u for parity %u",
                     (int)threadIdx.x, (int)blockIdx.x, bar, parity);
        }
        emu::yield_to_scheduler();
    }
}
// One box between shared memory at `smem` and the array, element by element, at once: loaded (the
// elements outside the array as zeros), stored or added (only the elements inside the array)
enum EmuBoxOp { EMU_BOX_LOAD, EMU_BOX_STORE, EMU_BOX_ADD };
__device__ __forceinline__ void emu_tma_box(EmuBoxOp op, unsigned smem, const TmaDescriptor* map, int c0, int c1, int c2) {
    const EmuTensorMap& m = *reinterpret_cast<const EmuTensorMap*>(map);
    if (((long)c0 * m.elem_bytes) % 16 != 0) {  // the GPU faults on it (an illegal instruction)
        EMU_FAIL("tma.cuh (emulated): thread %d moves a box at column %d of %u-byte elements: not on 16 bytes",
                 (int)threadIdx.x, c0, m.elem_bytes);
    }
    if (op == EMU_BOX_ADD && m.elem_bytes != 4) {
        EMU_FAIL("tma.cuh (emulated): a reduce-add of %u-byte elements: only float32 maps here", m.elem_bytes);
    }
    unsigned char* box = smem_at(smem);
    const unsigned box_row_bytes = m.box_cols * m.elem_bytes;
    for (int y = 0; y < (int)m.box_rows; ++y)
        for (int x = 0; x < (int)m.box_cols; ++x) {
            const long gx = (long)c0 + x, gy = (long)c1 + y;
            const unsigned byte = x * m.elem_bytes;
            unsigned char* s = m.swizzle_128b ? box + y * 128 + (((byte >> 4) ^ (y & 7)) << 4) + (byte & 15)
                                              : box + y * box_row_bytes + byte;
            const bool inside = gx >= 0 && gx < (long)m.cols && gy >= 0 && gy < (long)m.rows && c2 >= 0 && c2 < (int)m.planes;
            unsigned char* g = reinterpret_cast<unsigned char*>(m.base) + c2 * m.plane_stride_bytes +
                               gy * m.row_stride_bytes + gx * m.elem_bytes;
            if (op == EMU_BOX_LOAD) {
                if (inside) memcpy(s, g, m.elem_bytes);
                else memset(s, 0, m.elem_bytes);
            } else if (inside && op == EMU_BOX_STORE) {
                memcpy(g, s, m.elem_bytes);
            } else if (inside) {
                float old, v;
                memcpy(&old, g, 4);
                memcpy(&v, s, 4);
                old += v;
                memcpy(g, &old, 4);
            }
        }
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDescriptor* map, int c0, int c1, int c2,
                                            unsigned bar) {
    emu_tma_box(EMU_BOX_LOAD, dst, map, c0, c1, c2);
    const EmuTensorMap& m = *reinterpret_cast<const EmuTensorMap*>(map);
    EmuMbar& b = emu_mbar(bar);
    b.tx -= (int)(m.box_rows * m.box_cols * m.elem_bytes);
    emu_mbar_complete(b);
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDescriptor* map, int c0, int c1, unsigned bar) {
    tma_load_3d(dst, map, c0, c1, 0, bar);
}
// stores and reduce-adds: nothing left to wait for
__device__ __forceinline__ void tma_store_3d(const TmaDescriptor* map, unsigned src, int c0, int c1, int c2) {
    emu_tma_box(EMU_BOX_STORE, src, map, c0, c1, c2);
}
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* map, unsigned src, int c0, int c1, int c2) {
    emu_tma_box(EMU_BOX_ADD, src, map, c0, c1, c2);
}
__device__ __forceinline__ unsigned emu_mapa(unsigned addr, unsigned rank) { return (addr & 0xffffffu) | ((rank + 1u) << 24); }
__device__ __forceinline__ unsigned cluster_ctarank() { return (unsigned)emu::block_rank; }
__device__ __forceinline__ void cluster_sync() { emu::cluster_barrier(); }
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) { mbar_arrive(emu_mapa(bar, rank)); }
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDescriptor* map, int c0, int c1,
                                                      unsigned bar, unsigned short mask) {
    for (unsigned r = 0; r < 16; ++r)
        if (mask >> r & 1u) tma_load_3d(emu_mapa(dst, r), map, c0, c1, 0, emu_mapa(bar, r));
}
__device__ __forceinline__ void tma_store_commit() {}
template <int N = 0> __device__ __forceinline__ void tma_store_wait_read() {}
__device__ __forceinline__ void tma_store_wait_all() {}
#else
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
#define MBAR_FENCE_INIT() asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory")
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_AGAIN:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_AGAIN;\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDescriptor* map, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDescriptor* map, int c0, int c1, int c2,
                                            unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const TmaDescriptor* map, unsigned src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");
}
__device__ __forceinline__ void tma_reduce_add_3d(const TmaDescriptor* map, unsigned src, int c0, int c1, int c2) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");
}
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    // (CTA-scoped release, the default: what it orders are this block's own reads of its slot, done
    // before the arrival; .release.cluster made every clustered GEMM 0.54-0.63x cuBLASLt instead of
    // 0.85-1.09x, reports/train-h100/fe8f063/clusters)
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDescriptor* map, int c0, int c1,
                                                      unsigned bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N = 0> __device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
#endif  // CUPY_RAW_EMULATOR
