// crossentropy_onepass.cu: the loss and dlogits of each row from one read of its logits, one block
// per row (one variant, "staged"); the math is crossentropy.cu's:
//
//   lse = log sum_{v < n_valid} exp(z_v)   loss = lse - z[target]  (0 where target = -1)
//   dz_v = dloss (exp(z_v - lse) - [v == target])  for v < n_valid; 0 in padded columns, ignored rows
//
// with dloss, the gradient of the step's loss with respect to this row's loss, given ahead.
//
// Walk 1 reads the row (16-byte packs where vec = 1, UNROLL of them a group). With staged = 1 each
// thread first copies all its packs into shared memory by cp.async (a commit group per group: the
// whole row in flight at once, no registers held), then, group by group as they land, turns the
// logits in place into their exponentials: for each group its max g (over the valid values), then
// e = 2^15 exp(z - g) for every value of the group (one exp an element), stored as floatE (half for
// 16-bit logits: 11 bits, finer than the bf16 gradient they become, and the 2^15 keeps e down to 2^-24
// of g's exp in half's normal range; float for float32 logits), g in a slot of its own per (group,
// thread), and the thread's running (m, s) updated once per group.
// The block merges its threads' (m, s) into lse in a fixed order. Walk 2 reads back the very packs
// its thread wrote (the reductions' barriers are all the synchronisation it needs) and scales them:
//
//   dz_v = dloss exp(z_v - lse) = e_v * (dloss 2^-15 exp(g - lse))     one multiply an element
//
// so each logit costs one exp in all (and a few a group) where it cost two. What made the kernel fast,
// though, was the copy: with each thread's packs loaded four at a time into registers and worked on
// before the next four, it moved 68% of the copy rate (one exp a logit alone changed nothing: it was
// waiting on memory with too few bytes in flight, not on the SFU); with the whole row in flight by
// cp.async, 88% (3,522 us at GPT-2 124M's 65536 x 50304 logits, B=64; reports/cupy_raw-h200/
// onepass-a06107a). The logits cross the memory bus once and dlogits once: crossentropy.cu's forward
// and backward read the row twice. With staged = 0 (a row too large for shared memory) walk 1 keeps
// (m, s) a pack at a time (pack_update) and walk 2 reads the row from memory again and takes
// exp(z - lse). Values past the packs (V not a multiple of the pack, or vec = 0) take online_update
// and are read again in walk 2 either way.
// A target outside [-1, n_valid) gives NaN (loss and gradient row), as in crossentropy.cu.
#include "common.cuh"

// what walk 1 keeps of a logit in shared memory when staged: half for 16-bit logits, float for float32
template <typename T> struct ExpStorage { typedef __half type; };
template <> struct ExpStorage<float> { typedef float type; };

typedef Pack<floatX> PackX;
constexpr float LOG2E = 1.4426950408889634f;
// UNROLL (a define, crossentropy_onepass.py's): the packs of a group, which share one max g in the
// staged walks (UNROLL 2 measured as fast as 4; 8 spills) and are loaded together when not staged
typedef typename ExpStorage<floatX>::type floatE;
typedef Pack<floatE> PackE;  // as many values as PackX: floatE is as wide as floatX
static_assert(PackE::N == PackX::N, "e is stored as wide as the logits");
constexpr float E_LOG2 = 15.0f;  // e = 2^15 exp(z - g) <= 32768: half's largest finite is 65504
constexpr float G_FLOOR = -1.0e30f;  // g where a group's values are all -inf: z - g stays -inf, not NaN

// (m, s) meet a pack of values z at once: its max first, then one exp per value and one to rescale s
// (9 exps for 8 values, against crossentropy.cu's 8 with two selects each; fewer instructions here,
// where at 4.3 TB/s an SM has ~32 issue slots per bf16 element for both walks together)
template <int N> __device__ __forceinline__ void pack_update(float& m, float& s, const float (&z)[N]) {
    float top = z[0];
#pragma unroll
    for (int k = 1; k < N; k++) top = fmaxf(top, z[k]);
    const float m_new = fmaxf(m, top);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) sum += exp2f((z[k] - m_new) * LOG2E);
    s = s * exp2f((m - m_new) * LOG2E) + sum;
    m = m_new;
}

// grid N, block 512 threads (crossentropy_onepass.py's THREADS); dynamic shared memory when staged: V
// floatE rounded up to 16 bytes, then a float per (group, thread) (crossentropy_onepass.py's
// staged_bytes). Two blocks an SM, so that one's walk 2 overlaps the other's walk 1: their two 106 KB
// rows fit in shared memory and __launch_bounds__ holds the registers to 64 a thread (one block of
// 1024 threads at 55 registers left each SM one row at a time: 4.76 ms at 65536 rows, 66% of copy)
extern "C" __global__ void __launch_bounds__(512, 2) crossentropy_onepass(const floatX* __restrict__ logits, const int* __restrict__ targets,
                                                const float* __restrict__ dlosses, float* __restrict__ losses,
                                                floatX* __restrict__ dlogits, int V, int n_valid, int vec,
                                                int staged) {
    extern __shared__ __align__(16) unsigned char row_smem[];
    __shared__ float scratch[32];
    floatE* exps = reinterpret_cast<floatE*>(row_smem);  // staged: e of every pack, where its logits were
    float* group_max = reinterpret_cast<float*>(row_smem + ((V * (int)sizeof(floatE) + 15) & ~15));  // [group][thread]
    const long long row = blockIdx.x;
    const floatX* z = logits + row * V;
    floatX* dz = dlogits + row * V;
    const int packs = vec ? V / PackX::N : 0;
    const int whole = vec ? n_valid / PackX::N : 0;  // packs wholly below n_valid
    const int stride = UNROLL * blockDim.x;          // packs between a thread's groups

    // walk 1: (m, s) per thread over the first n_valid logits, UNROLL packs (a group) at a time
    float m = -3.0e38f, s = 0.0f;  // m finite, so that z - m is never -inf - (-inf)
    if (staged) {
        // every pack of the thread's groups copied into shared memory at once (a cp.async group each:
        // the row's bytes in flight without registers), then each group, once landed, turned in place
        // into its exps
        int groups = 0;
        for (int p0 = threadIdx.x; p0 < packs; p0 += stride, groups++) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int p = p0 + u * blockDim.x;
                if (p < packs) cp_async16(exps + p * PackX::N, z + p * PackX::N, true);
            }
            cp_async_commit();
        }
        for (int p0 = threadIdx.x, group = 0; p0 < packs; p0 += stride, group++) {
            cp_async_wait_upto(groups - 1 - group);  // this group landed (its packs: this thread's alone)
            PackX pk[UNROLL];
            float g = -3.0e38f;  // the group's max over its valid values
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int p = p0 + u * blockDim.x;
                if (p >= packs) break;
                pk[u] = load_pack(reinterpret_cast<const floatX*>(exps + p * PackX::N));
#pragma unroll
                for (int k = 0; k < PackX::N; k++)
                    if (p < whole || p * PackX::N + k < n_valid) g = fmaxf(g, to_f32(pk[u].v[k]));
            }
            const float shift = E_LOG2 - fmaxf(g, G_FLOOR) * LOG2E;  // e = 2^(z log2(e) + shift)
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int p = p0 + u * blockDim.x;
                if (p >= packs) break;
                PackE pe;
#pragma unroll
                for (int k = 0; k < PackX::N; k++) {
                    const bool valid = p < whole || p * PackX::N + k < n_valid;
                    const float e = valid ? exp2f(fmaf(to_f32(pk[u].v[k]), LOG2E, shift)) : 0.0f;
                    sum += e;
                    pe.v[k] = from_f32<floatE>(e);
                }
                store_pack(exps + p * PackX::N, pe);  // over the logits it came from
            }
            group_max[group * blockDim.x + threadIdx.x] = g;
            const float m_new = fmaxf(m, g);  // sum is 2^15 sum exp(z - g): rescaled to m_new
            s = s * exp2f((m - m_new) * LOG2E) + sum * exp2f((g - m_new) * LOG2E - E_LOG2);
            m = m_new;
        }
    } else {
        for (int p0 = threadIdx.x; p0 < packs; p0 += stride) {
            PackX pk[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int p = p0 + u * blockDim.x;
                if (p < packs) pk[u] = load_pack(z + p * PackX::N);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int p = p0 + u * blockDim.x;
                if (p >= packs) break;
                if (p < whole) {
                    float x[PackX::N];
#pragma unroll
                    for (int k = 0; k < PackX::N; k++) x[k] = to_f32(pk[u].v[k]);
                    pack_update(m, s, x);
                } else {  // the pack across n_valid (and the padding past it)
#pragma unroll
                    for (int k = 0; k < PackX::N; k++)
                        if (p * PackX::N + k < n_valid) online_update(m, s, to_f32(pk[u].v[k]));
                }
            }
        }
    }
    for (int v = packs * PackX::N + threadIdx.x; v < n_valid; v += blockDim.x) online_update(m, s, to_f32(z[v]));
    const float M = block_max(m, scratch);
    const float lse = M + logf(block_sum(s * __expf(m - M), scratch));
    const int target = targets[row];
    const bool known = target < n_valid;  // a target past n_valid: NaN, never a read outside the row
    if (threadIdx.x == 0)
        losses[row] = target < 0 ? 0.0f : known ? lse - to_f32(z[target]) : __int_as_float(0x7fc00000);
    const float dloss = target < 0 ? 0.0f : known ? dlosses[row] : __int_as_float(0x7fc00000);

    // walk 2: dz = dloss exp(z - lse), every column written: staged, from the group's kept exps (one
    // multiply an element), else from the row read again; the target's -dloss and the zeros past
    // n_valid only in the pack that holds them
    const float lse2 = lse * LOG2E;
    for (int p0 = threadIdx.x, group = 0; p0 < packs; p0 += stride, group++) {
        // staged: dz = e * dloss 2^-15 exp(g - lse); a group with no valid value has e = 0 throughout
        const float scale = staged ? dloss * exp2f(fmaxf(group_max[group * blockDim.x + threadIdx.x], G_FLOOR) * LOG2E
                                                   - lse2 - E_LOG2) : 0.0f;
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int p = p0 + u * blockDim.x;
            if (p >= packs) break;
            const int v0 = p * PackX::N;
            float d[PackX::N];
            if (staged) {
                const PackE pe = load_pack(exps + v0);
#pragma unroll
                for (int k = 0; k < PackX::N; k++) d[k] = to_f32(pe.v[k]) * scale;
            } else {
                const PackX pk = load_pack(z + v0);
#pragma unroll
                for (int k = 0; k < PackX::N; k++) d[k] = dloss * exp2f(fmaf(to_f32(pk.v[k]), LOG2E, -lse2));
            }
            if ((unsigned)(target - v0) < (unsigned)PackX::N) {
#pragma unroll
                for (int k = 0; k < PackX::N; k++) d[k] -= v0 + k == target ? dloss : 0.0f;
            }
            if (v0 + PackX::N > n_valid) {
#pragma unroll
                for (int k = 0; k < PackX::N; k++) d[k] = v0 + k < n_valid ? d[k] : 0.0f;
            }
            PackX out;
#pragma unroll
            for (int k = 0; k < PackX::N; k++) out.v[k] = from_f32<floatX>(d[k]);
            store_pack(dz + v0, out);
        }
    }
    for (int v = packs * PackX::N + threadIdx.x; v < V; v += blockDim.x) {
        const float d = v < n_valid ? dloss * (__expf(to_f32(z[v]) - lse) - (v == target ? 1.0f : 0.0f)) : 0.0f;
        dz[v] = from_f32<floatX>(d);
    }
}
