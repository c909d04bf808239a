// emulator.hpp: just enough of CUDA to run this backend's kernels on the CPU, for tests on machines
// with no GPU (backends/cupy_raw/_emulator.py compiles a .cu source with g++ after this header).
//
// A launch runs the grid's blocks one after another; the threads of a block are fibers on one OS
// thread, switched at every barrier, so __syncthreads, warp shuffles and mma.sync are met by all of
// them together, as on the GPU (and deterministically: the same interleaving on every run):
//   __syncthreads()            a barrier over the block's threads that have not returned yet; one
//                              that some threads never reach is reported (the launch fails), not hung
//   __shfl_xor/up_sync         each lane publishes its value, a barrier over its warp, reads its partner's
//   __shfl_sync, __match_any_sync  the same exchange: one lane's value, or which lanes hold mine
//   __threadfence              nothing to order: blocks run one after another
//   atomicAdd                  a real atomic add
//   __shared__ x[n]            a static local: one copy, shared by the block's threads (blocks run
//                              one at a time); `extern __shared__` (dynamic) is rewritten by
//                              _emulator.py into a pointer to a buffer filled with 0xFF bytes (NaN as
//                              floats) before each block, so a read of shared memory never written shows
//   __nv_bfloat16, __half      16-bit storage with round-to-nearest-even conversions
//   mma.sync.m16n8k16          emu_mma16816: the warp's fragments gathered by the layout of the PTX
//                              ISA (the same table attention.cu's header quotes), multiplied in float
// What it does not emulate: timing, the memory model beyond barriers, bank conflicts, cp.async,
// ldmatrix, wgmma, TMA. It checks a kernel's index arithmetic, bounds, masks and barriers against
// the reference, and catches a read of uninitialised shared memory.
#pragma once
#include <setjmp.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
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
// all threads reach), the launch stops with an error instead of hanging.
enum Wait { RUNNING = 0, AT_BLOCK_BARRIER = 1, AT_WARP_BARRIER = 2 };

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

struct Launch {
    uint3 grid, block;
    int threads = 0, block_active = 0, block_arrived = 0;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<unsigned char> dynamic;
    std::function<void()> body;
    jmp_buf scheduler;
};

inline Launch* current = nullptr;
inline int linear_tid = 0;
constexpr size_t STACK_BYTES = 64 * 1024;  // a kernel's frame here is a few KB

inline Warp& my_warp() { return current->warps[linear_tid / 32]; }
inline void* dynamic_shared() { return current->dynamic.data(); }

inline void open_block_barrier(Launch& L) {
    for (auto& f : L.fibers)
        if (f.wait == AT_BLOCK_BARRIER) f.wait = RUNNING;
    L.block_arrived = 0;
}

inline void open_warp_barrier(Launch& L, int w) {
    for (int t = w * 32; t < std::min(L.threads, w * 32 + 32); t++)
        if (L.fibers[t].wait == AT_WARP_BARRIER) L.fibers[t].wait = RUNNING;
    L.warps[w].arrived = 0;
}

// Switching is _setjmp/_longjmp between the fibers' stacks (swapcontext would make two signal-mask
// system calls per switch); makecontext/setcontext only start a fiber.
inline void yield_to_scheduler() {
    Launch& L = *current;
    if (!_setjmp(L.fibers[linear_tid].resume)) _longjmp(L.scheduler, 1);
}

inline void block_barrier() {
    Launch& L = *current;
    L.fibers[linear_tid].wait = AT_BLOCK_BARRIER;
    if (++L.block_arrived >= L.block_active) open_block_barrier(L);
    yield_to_scheduler();
}

inline void warp_barrier() {
    Launch& L = *current;
    const int w = linear_tid / 32;
    L.fibers[linear_tid].wait = AT_WARP_BARRIER;
    if (++L.warps[w].arrived >= L.warps[w].active) open_warp_barrier(L, w);
    yield_to_scheduler();
}

}  // namespace emu

inline uint3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

inline void fiber_main() {
    Launch& L = *current;
    L.body();
    const int t = linear_tid, w = t / 32;
    L.fibers[t].done = true;
    L.block_active--;
    L.warps[w].active--;
    if (L.block_arrived > 0 && L.block_arrived >= L.block_active) open_block_barrier(L);
    if (L.warps[w].arrived > 0 && L.warps[w].arrived >= L.warps[w].active) open_warp_barrier(L, w);
    _longjmp(L.scheduler, 1);  // never returns: its stack is abandoned, to be reused by the next block
}

inline void set_thread(Launch& L, int t) {
    linear_tid = t;
    threadIdx = {t % L.block.x, (t / L.block.x) % L.block.y, t / (L.block.x * L.block.y)};
}

// Runs one block; returns 0, or 1 when its threads can no longer make progress (a deadlock).
inline int run_block(Launch& L) {
    L.block_active = L.threads;
    L.block_arrived = 0;
    for (size_t w = 0; w < L.warps.size(); w++) {
        L.warps[w].active = std::min(32, L.threads - (int)w * 32);
        L.warps[w].arrived = 0;
    }
    std::memset(L.dynamic.data(), 0xff, L.dynamic.size());
    for (int t = 0; t < L.threads; t++) {
        Fiber& f = L.fibers[t];
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
        for (int t = 0; t < L.threads; t++) {
            Fiber& f = L.fibers[t];
            if (f.done) continue;
            all_done = false;
            if (f.wait != RUNNING) continue;
            set_thread(L, t);
            if (!_setjmp(L.scheduler)) {
                if (f.started) _longjmp(f.resume, 1);
                f.started = true;
                setcontext(&f.context);
            }
            ran = true;
        }
        if (all_done) return 0;
        if (!ran) return 1;
    }
}

// Returns 0, or 1 for a deadlock (a barrier some threads never reach).
inline int launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  size_t shared_bytes, std::function<void()> body) {
    Launch L;
    L.grid = {gx, gy, gz};
    L.block = {bx, by, bz};
    L.threads = (int)(bx * by * bz);
    L.fibers = std::vector<Fiber>(L.threads);
    for (auto& f : L.fibers) f.stack.reset(new char[STACK_BYTES]);
    L.warps = std::vector<Warp>((L.threads + 31) / 32);
    L.dynamic.assign(shared_bytes + 16, 0xff);
    L.body = std::move(body);
    current = &L;
    blockDim = L.block;
    gridDim = L.grid;
    int status = 0;
    for (unsigned z = 0; z < gz && !status; z++)
        for (unsigned y = 0; y < gy && !status; y++)
            for (unsigned x = 0; x < gx && !status; x++) {
                blockIdx = {x, y, z};
                status = run_block(L);
            }
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
