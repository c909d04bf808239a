// emulator.hpp: just enough of CUDA to run this backend's kernels on the CPU, for tests on machines
// with no GPU (backends/cupy_raw/_emulator.py compiles a .cu source with g++ after this header).
//
// A launch runs the grid's blocks one after another (or a cluster of them at a time: a module that
// defines EMU_CLUSTER_X launches in clusters of that many blocks along x, as __cluster_dims__ would;
// each block its own shared memory, the cluster's fibers in one scheduler); the threads of a block are
// fibers on one OS thread, switched at every barrier, so __syncthreads, warp shuffles and mma.sync are
// met by all of them together, as on the GPU (and deterministically: the same interleaving on every run):
//   __syncthreads()            a barrier over the block's threads that have not returned yet; one
//                              that some threads never reach is reported (the launch fails), not hung
//   __shfl_xor/up_sync         each lane publishes its value, a barrier over its warp, reads its partner's
//   __shfl_sync, __match_any_sync  the same exchange: one lane's value, or which lanes hold mine
//   __threadfence              nothing to order: blocks run one after another
//   atomicAdd                  a real atomic add
//   __shared__ x[n]            a static local: one copy, shared by the block's threads (blocks run
//                              one at a time: not for clustered kernels); `extern __shared__` (dynamic) is rewritten by
//                              _emulator.py into a pointer to a buffer filled with 0xFF bytes (NaN as
//                              floats) before each block, so a read of shared memory never written shows
//   __nv_bfloat16, __half      16-bit storage with round-to-nearest-even conversions
//   mma.sync.m16n8k16          emu_mma16816: the warp's fragments gathered by the layout of the PTX
//                              ISA (the same table attention.cu's header quotes), multiplied in float
//   cluster_barrier            barrier.cluster: over every thread of the cluster's blocks
// What it does not emulate here: timing, the memory model beyond barriers, bank conflicts, cp.async
// (ldmatrix, wgmma, TMA and mbarriers: tensor_core.cuh, wgmma.cuh, tma.cuh). It checks a kernel's index arithmetic, bounds, masks and barriers against
// the reference, and catches a read of uninitialised shared memory.
#pragma once
#include <setjmp.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __cluster_dims__(...)  // a module sets EMU_CLUSTER_X instead (below)
#define __align__(n) alignas(n)
#define CUPY_RAW_EMULATOR 1

struct uint3 {
    unsigned x, y, z;
};

// ---- 16-bit floats ------------------------------------------------------------------------------
struct __nv_bfloat16 {
    unsigned short bits;
};
struct __half {
    unsigned short bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.bits = 0x7fc0;  // NaN
    } else {
        h.bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return h;
}
inline float __half2float(__half h) {
    _Float16 v;
    std::memcpy(&v, &h.bits, 2);
    return (float)v;
}
inline __half __float2half_rn(float f) {
    _Float16 v = (_Float16)f;
    __half h;
    std::memcpy(&h.bits, &v, 2);
    return h;
}

// ---- math and intrinsics ------------------------------------------------------------------------
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
using std::isfinite;
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

namespace emu {

// Each CUDA thread of a block is a fiber (ucontext) on this one OS thread; a scheduler runs them in
// turn, each until it reaches a barrier (or returns). A barrier opens when every thread that has not
// returned has reached it; if none can run and some have not returned (a __syncthreads that not
// all threads reach), the launch stops with an error instead of hanging. A cluster's blocks (a
// module's EMU_CLUSTER_X, below) run together: their fibers in one scheduler, each block with its own
// shared memory, barrier and warps, the cluster barrier over all of them.
enum Wait { RUNNING = 0, AT_BLOCK_BARRIER = 1, AT_WARP_BARRIER = 2, AT_CLUSTER_BARRIER = 3 };

struct Fiber {
    ucontext_t context;             // its start (makecontext); afterwards it is resumed by jump
    jmp_buf resume;
    bool started = false;
    std::unique_ptr<char[]> stack;  // not zero-filled: only the pages a fiber uses are ever touched
    int wait = RUNNING;
    bool done = false;
};

struct Warp {
    int active = 0, arrived = 0;
    unsigned long long lanes[32];     // shuffle exchange
    unsigned a[32][4], b[32][2];      // mma fragments
};

struct Block {                        // one block of the running cluster
    uint3 index;
    int active = 0, arrived = 0;      // its threads not returned; those at its barrier
    std::vector<unsigned char> dynamic;
};

struct Launch {
    uint3 grid, block;
    int threads = 0, cluster = 1, warps_per_block = 0, cluster_active = 0, cluster_arrived = 0;
    std::vector<Fiber> fibers;        // block r's thread t: fiber r threads + t
    std::vector<Warp> warps;          // block r's warp w: r warps_per_block + w
    std::vector<Block> blocks;        // the cluster's
    std::function<void()> body;
    jmp_buf scheduler;
};

inline Launch* current = nullptr;
// Bumped by every barrier arrival and returned thread (and tma.cuh's and matmul.cu's emulated mbarrier
// and named-barrier changes). A thread that waits by spinning (an mbarrier, a named barrier: each spin
// one turn for every other runnable thread) through STALLED_SPINS spins in which it did not move is in a
// deadlock, reported at once rather than after minutes of spinning.
inline unsigned long long progress = 0;
constexpr long STALLED_SPINS = 20000;
struct Spin {
    unsigned long long seen = ~0ull;
    long still = 0;
    bool stalled() {
        if (progress != seen) {
            seen = progress;
            still = 0;
            return false;
        }
        return ++still > STALLED_SPINS;
    }
};
// A launch that can never finish (a wait nobody will end, tma.cuh's and matmul.cu's emulated ones) or
// a copy the GPU would fault on stops with a message: EMU_FAIL records it and jumps back to launch(),
// which returns 2; the launcher's module exports it as emu_last_error (_emulator.py raises it).
inline char last_error[512] = "";
inline jmp_buf* abort_point = nullptr;
#define EMU_FAIL(...)                                                        \
    do {                                                                     \
        std::snprintf(emu::last_error, sizeof emu::last_error, __VA_ARGS__); \
        _longjmp(*emu::abort_point, 1);                                      \
    } while (0)
inline int linear_tid = 0;  // the running thread's index in its block
inline int block_rank = 0;  // its block's rank in the cluster
constexpr size_t STACK_BYTES = 64 * 1024;  // a kernel's frame here is a few KB

inline int fiber_of(int rank, int t) { return rank * current->threads + t; }  // block rank's thread t
inline Warp& warp_of(int rank, int w) { return current->warps[rank * current->warps_per_block + w]; }
inline Warp& my_warp() { return warp_of(block_rank, linear_tid / 32); }
inline void* dynamic_shared_of(int rank) { return current->blocks[rank].dynamic.data(); }
inline void* dynamic_shared() { return dynamic_shared_of(block_rank); }

inline void open_block_barrier(Launch& L, int rank) {
    for (int t = 0; t < L.threads; t++)
        if (L.fibers[fiber_of(rank, t)].wait == AT_BLOCK_BARRIER) L.fibers[fiber_of(rank, t)].wait = RUNNING;
    L.blocks[rank].arrived = 0;
}

inline void open_warp_barrier(Launch& L, int rank, int w) {
    for (int t = w * 32; t < std::min(L.threads, w * 32 + 32); t++)
        if (L.fibers[fiber_of(rank, t)].wait == AT_WARP_BARRIER) L.fibers[fiber_of(rank, t)].wait = RUNNING;
    warp_of(rank, w).arrived = 0;
}

inline void open_cluster_barrier(Launch& L) {
    for (auto& f : L.fibers)
        if (f.wait == AT_CLUSTER_BARRIER) f.wait = RUNNING;
    L.cluster_arrived = 0;
}

// Switching is _setjmp/_longjmp between the fibers' stacks (swapcontext would make two signal-mask
// system calls per switch); makecontext/setcontext only start a fiber.
inline void yield_to_scheduler() {
    Launch& L = *current;
    if (!_setjmp(L.fibers[fiber_of(block_rank, linear_tid)].resume)) _longjmp(L.scheduler, 1);
}

inline void block_barrier() {
    Launch& L = *current;
    progress++;
    Block& b = L.blocks[block_rank];
    L.fibers[fiber_of(block_rank, linear_tid)].wait = AT_BLOCK_BARRIER;
    if (++b.arrived >= b.active) open_block_barrier(L, block_rank);
    yield_to_scheduler();
}

inline void warp_barrier() {
    Launch& L = *current;
    progress++;
    const int w = linear_tid / 32;
    Warp& warp = my_warp();
    L.fibers[fiber_of(block_rank, linear_tid)].wait = AT_WARP_BARRIER;
    if (++warp.arrived >= warp.active) open_warp_barrier(L, block_rank, w);
    yield_to_scheduler();
}

// barrier.cluster.arrive + wait: every thread of the cluster's blocks that has not returned
inline void cluster_barrier() {
    Launch& L = *current;
    progress++;
    L.fibers[fiber_of(block_rank, linear_tid)].wait = AT_CLUSTER_BARRIER;
    if (++L.cluster_arrived >= L.cluster_active) open_cluster_barrier(L);
    yield_to_scheduler();
}

}  // namespace emu

inline uint3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

inline void fiber_main() {
    Launch& L = *current;
    L.body();
    progress++;
    const int rank = block_rank, t = linear_tid, w = t / 32;
    Block& b = L.blocks[rank];
    Warp& warp = warp_of(rank, w);
    L.fibers[fiber_of(rank, t)].done = true;
    b.active--;
    warp.active--;
    L.cluster_active--;
    if (b.arrived > 0 && b.arrived >= b.active) open_block_barrier(L, rank);
    if (warp.arrived > 0 && warp.arrived >= warp.active) open_warp_barrier(L, rank, w);
    if (L.cluster_arrived > 0 && L.cluster_arrived >= L.cluster_active) open_cluster_barrier(L);
    _longjmp(L.scheduler, 1);  // never returns: its stack is abandoned, to be reused by the next cluster
}

inline void set_thread(Launch& L, int f) {
    block_rank = f / L.threads;
    linear_tid = f % L.threads;
    const int t = linear_tid;
    threadIdx = {t % L.block.x, (t / L.block.x) % L.block.y, t / (L.block.x * L.block.y)};
    blockIdx = L.blocks[block_rank].index;
}

// Runs the cluster of blocks whose first is (x0, y, z); returns 0, or 1 when its threads can no
// longer make progress (a deadlock).
inline int run_cluster(Launch& L, unsigned x0, unsigned y, unsigned z) {
    L.cluster_active = L.cluster * L.threads;
    L.cluster_arrived = 0;
    for (int r = 0; r < L.cluster; r++) {
        Block& b = L.blocks[r];
        b.index = {x0 + r, y, z};
        b.active = L.threads;
        b.arrived = 0;
        std::memset(b.dynamic.data(), 0xff, b.dynamic.size());
        for (int w = 0; w < L.warps_per_block; w++) {
            warp_of(r, w).active = std::min(32, L.threads - w * 32);
            warp_of(r, w).arrived = 0;
        }
    }
    for (auto& f : L.fibers) {
        f.wait = RUNNING;
        f.done = false;
        f.started = false;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack.get();
        f.context.uc_stack.ss_size = STACK_BYTES;
        f.context.uc_link = nullptr;
        makecontext(&f.context, fiber_main, 0);
    }
    for (;;) {
        bool all_done = true, ran = false;
        for (int f = 0; f < (int)L.fibers.size(); f++) {
            Fiber& fiber = L.fibers[f];
            if (fiber.done) continue;
            all_done = false;
            if (fiber.wait != RUNNING) continue;
            set_thread(L, f);
            if (!_setjmp(L.scheduler)) {
                if (fiber.started) _longjmp(fiber.resume, 1);
                fiber.started = true;
                setcontext(&fiber.context);
            }
            ran = true;
        }
        if (all_done) return 0;
        if (!ran) return 1;
    }
}

// Returns 0, 1 for a deadlock (a barrier some threads never reach), or 2 for a failure with a message
// (EMU_FAIL: last_error). cluster: blocks along x run together (gx a multiple of it).
inline int launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  size_t shared_bytes, int cluster, std::function<void()> body) {
    if (cluster < 1 || gx % cluster != 0) return 1;
    Launch L;
    L.grid = {gx, gy, gz};
    L.block = {bx, by, bz};
    L.threads = (int)(bx * by * bz);
    L.cluster = cluster;
    L.warps_per_block = (L.threads + 31) / 32;
    L.fibers = std::vector<Fiber>(cluster * L.threads);
    for (auto& f : L.fibers) f.stack.reset(new char[STACK_BYTES]);
    L.warps = std::vector<Warp>(cluster * L.warps_per_block);
    L.blocks = std::vector<Block>(cluster);
    for (auto& b : L.blocks) b.dynamic.assign(shared_bytes + 16, 0xff);
    L.body = std::move(body);
    current = &L;
    blockDim = L.block;
    gridDim = L.grid;
    last_error[0] = 0;
    jmp_buf failed;
    abort_point = &failed;
    if (_setjmp(failed)) {  // (EMU_FAIL, from some fiber's stack)
        current = nullptr;
        return 2;
    }
    int status = 0;
    for (unsigned z = 0; z < gz && !status; z++)
        for (unsigned y = 0; y < gy && !status; y++)
            for (unsigned x = 0; x < gx && !status; x += cluster) status = run_cluster(L, x, y, z);
    current = nullptr;
    return status;
}

}  // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barrier(); }

template <typename T> inline T emu_shuffle(T v, int source_lane_xor, bool up) {
    emu::Warp& w = emu::my_warp();
    const int lane = emu::linear_tid % 32;
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    w.lanes[lane] = bits;
    emu::warp_barrier();
    const int src = up ? lane - source_lane_xor : lane ^ source_lane_xor;
    T r = v;
    if (src >= 0 && src < 32) std::memcpy(&r, &w.lanes[src], sizeof(T));
    emu::warp_barrier();
    return r;
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask) { return emu_shuffle(v, mask, false); }
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d) { return emu_shuffle(v, (int)d, true); }
// every lane of the warp takes part, as in this backend's kernels
template <typename T> inline T __shfl_sync(unsigned, T v, int src) {
    return emu_shuffle(v, (emu::linear_tid % 32) ^ (src % 32), false);  // lane ^ (lane ^ src) = src
}
inline unsigned __match_any_sync(unsigned, int v) {
    emu::Warp& w = emu::my_warp();
    const int lanes = std::min(32, emu::current->threads - emu::linear_tid / 32 * 32);
    w.lanes[emu::linear_tid % 32] = (unsigned)v;
    emu::warp_barrier();
    unsigned r = 0;
    for (int i = 0; i < lanes; i++) r |= (unsigned)((int)(unsigned)w.lanes[i] == v) << i;
    emu::warp_barrier();
    return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline void __threadfence() {}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: D = A B + C for the whole warp
inline float emu_half_value(unsigned short bits, bool fp16) {
    if (fp16) {
        __half h;
        h.bits = bits;
        return __half2float(h);
    }
    __nv_bfloat16 h;
    h.bits = bits;
    return __bfloat162float(h);
}

inline void emu_mma16816(float* c, const unsigned* a, const unsigned* b, bool fp16) {
    emu::Warp& w = emu::my_warp();
    const int lane = emu::linear_tid % 32;
    std::memcpy(w.a[lane], a, 16);
    std::memcpy(w.b[lane], b, 8);
    emu::warp_barrier();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, q = l % 4;
        for (int half = 0; half < 2; half++) {
            const int shift = 16 * half;
            A[g][2 * q + half] = emu_half_value((unsigned short)(w.a[l][0] >> shift), fp16);
            A[g + 8][2 * q + half] = emu_half_value((unsigned short)(w.a[l][1] >> shift), fp16);
            A[g][8 + 2 * q + half] = emu_half_value((unsigned short)(w.a[l][2] >> shift), fp16);
            A[g + 8][8 + 2 * q + half] = emu_half_value((unsigned short)(w.a[l][3] >> shift), fp16);
            B[2 * q + half][g] = emu_half_value((unsigned short)(w.b[l][0] >> shift), fp16);
            B[8 + 2 * q + half][g] = emu_half_value((unsigned short)(w.b[l][1] >> shift), fp16);
        }
    }
    emu::warp_barrier();
    const int g = lane / 4, q = lane % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + (e >= 2 ? 8 : 0), col = 2 * q + (e & 1);
        float acc = c[e];
        for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
        c[e] = acc;
    }
}
