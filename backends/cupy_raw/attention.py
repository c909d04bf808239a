"""attention, cupy_raw: causal multi-head attention from qkv (B,T,3C), three variants (attention.cu
has the kernels, the math and the mma fragment layouts).

    simple   one block per (query row, head, batch), float32 throughout, no tensor cores; the
             readable step between naive and flash. Saved: the logsumexp (B,NH,T).
    flash    FlashAttention-2 on tensor cores (mma.sync m16n8k16, operands by ldmatrix), online
             softmax in base 2; 64-key tiles of K and V stream through two stages of shared memory
             by cp.async, the next tile's copies under the current tile's math; a forward block
             takes 128 queries at head sizes up to 64 (32 a warp: each fragment read feeds two
             multiplies), 64 above. Backward as a delta pass, a dK/dV kernel over key tiles and a dQ
             kernel over query tiles (no atomics: bitwise repeatable). Head sizes up to 128
             (padded to a multiple of 16 in shared memory). float32 inputs run the simple kernels
             (tensor cores take 16-bit inputs here).
    wgmma    flash's schedule on Hopper's wgmma.mma_async (sm_90a), for 16-bit heads of exactly 64
             on 16-byte-aligned rows (the GPT-2 shapes): the tensor cores read K, V, Q and dY from
             128-byte-swizzled shared tiles through descriptors instead of each warp loading
             fragments; the tiles come by TMA into a ring of slots behind mbarriers, so no
             block-wide barrier a tile; in the forward a block's two warpgroups (128 queries) share
             every K and V stage they stream, 128 keys a stage (the backward keeps one warpgroup a
             block and 64-key tiles: registers). No delta pass: the dQ kernel makes delta for its
             own rows before its first tile (from y, res and dy read while its first copies are in
             flight), exactly as the pass would, and writes it for the dK/dV kernel, which runs after
             it (one pass over 3 B T C 16-bit values and one launch less).
             Other heads run flash's kernels, float32 the simple ones; the saved tensors are flash's.
             forward_schedule "overlapped" (not the default until timed) runs the forward as one
             persistent block an SM with a producer warp, each warpgroup's softmax under its
             previous stage's P V (attention.cu's FWD_OVERLAPPED): the same results bit for bit.

Saved by flash for 16-bit inputs: L (B,NH,l_stride(T)) float32 (T padded to whole 16 bytes a row;
the padding is never written nor read) and res = o - y in the input dtype. delta =
rowsum(dy * o) from the rounded y alone is off by about |dy||y| 2^-9, which dS = P (dP - delta)
turns into dq errors beyond the bf16 tolerance where dP and delta nearly cancel (the triton variant
met this on the GPU); y + res restores o to about 16 significant bits. The backward reads the
caller's y, which must not be overwritten between forward and backward (the model never does).
"""

import math
from dataclasses import dataclass

import numpy as np

from . import _common, _tma
from . import _runtime as rt

SIMPLE_THREADS = 128
FLASH_KEYS, FLASH_THREADS, FLASH_MAX_HS = 64, 128, 128  # as attention.cu's KEYS, FLASH_THREADS
LOG2E = 1.4426950408889634


def _shape(qkv, n_head):
    _common.check_float("attention", "qkv", qkv)
    _common.check_contiguous("attention", qkv=qkv)
    B, T, C3 = qkv.shape
    C = C3 // 3
    return B, T, C, C // n_head


# ---- simple ------------------------------------------------------------------------------------
@dataclass
class SimpleSaved:
    qkv: object   # (B,T,3C) the input
    lse: object   # (B,NH,T) float32, natural log-sum-exp of each row's scaled scores
    n_head: int


def _simple_shared(T: int, HS: int, arrays: int) -> int:
    nbytes = arrays * (HS + T) * 4
    if nbytes > rt.MAX_SHARED_PER_BLOCK:
        raise ValueError(f"attention: the cupy_raw simple variant keeps a row of T scores in shared memory; "
                         f"T={T} needs {nbytes} bytes, more than {rt.MAX_SHARED_PER_BLOCK}")
    return nbytes


class Simple:
    """One block per query row; the readable CUDA version (attention.cu, the simple variant)."""

    name = "simple"

    def forward(self, inputs, attrs, out=None):
        qkv, n_head = inputs["qkv"], attrs["n_head"]
        B, T, C, HS = _shape(qkv, n_head)
        xp = _common.xp_of(qkv)
        y = _common.output("attention", xp, out, (B, T, C), str(qkv.dtype))
        lse = xp.empty((B, n_head, T), dtype=np.float32)
        k = rt.function("attention", "attention_simple_forward", {"floatX": _common.ctype(qkv)})
        rt.launch(k, (T, n_head, B), SIMPLE_THREADS,
                  (qkv, y, lse, _common.i32(T), _common.i32(C), _common.i32(n_head), _common.f32(1 / math.sqrt(HS))),
                  shared_mem=_simple_shared(T, HS, 1))
        return y, SimpleSaved(qkv, lse, n_head)

    def backward(self, saved, dout, grads):
        qkv, n_head = saved.qkv, saved.n_head
        B, T, C, HS = _shape(qkv, n_head)
        _common.check_contiguous("attention", dout=dout)
        xp = _common.xp_of(qkv)
        dqkv = _common.grad_buffer("attention", grads, "qkv", qkv, xp)
        delta = xp.empty((B, n_head, T), dtype=np.float32)
        defines = {"floatX": _common.ctype(qkv)}
        args = (_common.i32(T), _common.i32(C), _common.i32(n_head), _common.f32(1 / math.sqrt(HS)))
        shared = _simple_shared(T, HS, 2)
        rt.launch(rt.function("attention", "attention_simple_backward_query", defines), (T, n_head, B), SIMPLE_THREADS,
                  (qkv, dout, saved.lse, delta, dqkv) + args, shared_mem=shared)
        rt.launch(rt.function("attention", "attention_simple_backward_key", defines), (T, n_head, B), SIMPLE_THREADS,
                  (qkv, dout, saved.lse, delta, dqkv) + args, shared_mem=shared)
        return {"qkv": dqkv}


simple = Simple()


# ---- flash -------------------------------------------------------------------------------------
@dataclass
class FlashSaved:
    qkv: object   # (B,T,3C) the input
    y: object     # (B,T,C) the output (the caller's array)
    res: object   # (B,T,C) o - y in the input dtype
    lse: object   # (B,NH,l_stride(T)) float32: log2-sum-exp2 of each row's scores scaled by log2(e)/sqrt(HS)
    n_head: int


def l_stride(T: int) -> int:
    """The row stride of flash's L and delta arrays (attention.cu's L_STRIDE): T padded to a multiple
    of 4 floats, so that each head's row starts on 16 bytes, as a TMA box must."""
    return -(-T // 4) * 4


def _flash_defines(qkv, HS: int, *arrays) -> dict:
    C = qkv.shape[-1] // 3
    vec = HS % 8 == 0 and C % 8 == 0 and _common.vector_ok(qkv, *arrays)
    head_dim = -(-HS // 16) * 16
    defines = {"floatX": _common.ctype(qkv), "HEAD_DIM": head_dim, "VEC": int(vec),
               "FWD_M_TILES": 2 if head_dim <= 64 else 1}
    if vec:  # the delta pass's lanes a (row, head): 16 bytes each across the head, a power of two
        defines["DELTA_LANES"] = 1 << (head_dim // 8 - 1).bit_length()
    if str(qkv.dtype) == "float16":
        defines["MMA_FP16"] = 1
    return defines


def _flash_shared(defines: dict, tiles: int, floats: int = 0) -> int:
    """Bytes of dynamic shared memory: `tiles` tiles of 64 rows (HEAD_DIM + 8 16-bit elements a row),
    then `floats` floats."""
    return 2 * tiles * FLASH_KEYS * (defines["HEAD_DIM"] + 8) + 4 * floats


class Flash:
    """FlashAttention-2 on tensor cores for fp16/bf16; float32 inputs take the simple kernels."""

    name = "flash"

    def _check(self, qkv, n_head):
        B, T, C, HS = _shape(qkv, n_head)
        if HS > FLASH_MAX_HS:
            raise ValueError(f"attention: the cupy_raw {self.name} variant takes head sizes up to {FLASH_MAX_HS}, "
                             f"got HS={HS} (C={C}, n_head={n_head})")
        return B, T, C, HS

    # What a subclass changes: the module's defines and architecture, and which kernels it launches.
    def _defines(self, qkv, HS: int, *arrays, backward: bool = False) -> dict:
        return _flash_defines(qkv, HS, *arrays)

    def _arch(self, defines: dict) -> str:
        return "sm_90"

    def _forward_kernel(self, defines: dict):
        """(kernel, queries a block, threads, dynamic shared bytes): the Q tile, two stages of K and V."""
        m_tiles = defines["FWD_M_TILES"]
        return "attention_flash_forward", FLASH_KEYS * m_tiles, FLASH_THREADS, _flash_shared(defines, m_tiles + 4)

    def _operands(self, kernel: str, defines: dict, qkv, dout=None, lse=None, delta=None, saved=None) -> tuple:
        """A kernel's leading arguments: the arrays it reads (the forward: qkv alone; `saved`, the
        forward's FlashSaved, for a backward kernel that reads y and res)."""
        return (qkv,) if dout is None else (qkv, dout, lse, delta)

    def _forward_grid(self, defines: dict, qkv, n_head: int, rows: int) -> tuple:
        """The forward's grid: a block per (query tile, head, batch)."""
        B, T, _ = qkv.shape
        return (rt.cdiv(T, rows), n_head, B)

    def _delta_pass(self, defines: dict) -> bool:
        """Whether the backward's kernels read delta from the delta pass (flash's do)."""
        return True

    def _backward_kernels(self, defines: dict):
        """The backward's kernels in launch order, dK/dV then dQ: (kernel, keys or queries a block,
        threads, shared bytes) each."""
        return (("attention_flash_backward_dkdv", FLASH_KEYS, FLASH_THREADS,
                 _flash_shared(defines, 6, 4 * FLASH_KEYS)),  # K, V; 2 x (Q, dY); 2 x (L, delta)
                ("attention_flash_backward_dq", FLASH_KEYS, FLASH_THREADS, _flash_shared(defines, 6)))  # Q, dY; 2 x (K, V)

    def forward(self, inputs, attrs, out=None):
        qkv, n_head = inputs["qkv"], attrs["n_head"]
        if str(qkv.dtype) == "float32":
            return simple.forward(inputs, attrs, out)
        B, T, C, HS = self._check(qkv, n_head)
        xp = _common.xp_of(qkv)
        y = _common.output("attention", xp, out, (B, T, C), str(qkv.dtype))
        res = xp.empty((B, T, C), dtype=qkv.dtype)
        lse = xp.empty((B, n_head, l_stride(T)), dtype=np.float32)
        defines = self._defines(qkv, HS, y, res)
        kernel, rows, threads, shared = self._forward_kernel(defines)
        rt.launch(rt.function("attention", kernel, defines, arch=self._arch(defines)),
                  self._forward_grid(defines, qkv, n_head, rows), threads,
                  self._operands(kernel, defines, qkv) + (y, res, lse, _common.i32(T), _common.i32(C),
                                                          _common.i32(n_head), _common.f32(LOG2E / math.sqrt(HS))),
                  shared_mem=shared)
        return y, FlashSaved(qkv, y, res, lse, n_head)

    def backward(self, saved, dout, grads):
        if isinstance(saved, SimpleSaved):
            return simple.backward(saved, dout, grads)
        qkv, n_head = saved.qkv, saved.n_head
        B, T, C, HS = self._check(qkv, n_head)
        _common.check_contiguous("attention", dout=dout)
        xp = _common.xp_of(qkv)
        dqkv = _common.grad_buffer("attention", grads, "qkv", qkv, xp)
        delta = xp.empty((B, n_head, l_stride(T)), dtype=np.float32)
        defines = self._defines(qkv, HS, dout, dqkv, saved.y, saved.res, backward=True)
        arch = self._arch(defines)
        dims = (_common.i32(T), _common.i32(C), _common.i32(n_head))
        if self._delta_pass(defines):
            lanes = defines.get("DELTA_LANES", 32)  # a (row, head)'s lanes in the delta pass: a warp without VEC
            rt.launch(rt.function("attention", "attention_flash_delta", defines, arch=arch),
                      rt.cdiv(B * T * n_head * lanes, 128), 128, (saved.y, saved.res, dout, delta, _common.i32(B)) + dims)
        scales = (_common.f32(LOG2E / math.sqrt(HS)), _common.f32(1 / math.sqrt(HS)))
        for kernel, rows, threads, shared in self._backward_kernels(defines):
            rt.launch(rt.function("attention", kernel, defines, arch=arch), (rt.cdiv(T, rows), n_head, B), threads,
                      self._operands(kernel, defines, qkv, dout, saved.lse, delta, saved) + (dqkv,) + dims + scales,
                      shared_mem=shared)
        return {"qkv": dqkv}


flash = Flash()


class Wgmma(Flash):
    """flash's schedule on Hopper's wgmma (attention.cu's wgmma section, sm_90a) for 16-bit heads of
    exactly 64 on 16-byte-aligned rows; every other head runs flash's kernels (and float32 the simple
    ones). The same saved tensors as flash, so either backward takes either forward's. The tiles come
    by TMA through tensor maps (_tma.py) over qkv and dy as (B, T, columns) arrays and over L and
    delta as (B NH, T) arrays."""

    name = "wgmma"
    #: warpgroups a block (attention.cu's WG_GROUPS), forward and backward: two share each streamed
    #: tile among 128 rows. Measured on the H200 (bf16, T=1024, B=32; reports/cupy_raw-h200/wgmma-attention/d052702):
    #: forward 289 us with two, 305 with one; backward 935 with two (185 registers in dK/dV: one block
    #: an SM), 844 with one (three blocks an SM). Each walk takes its tiles in turn (the products, then
    #: the softmax that needs them): FlashAttention-3's overlap within a warpgroup (the next tile's
    #: scores issued with this tile's P V, a third stage of tiles) measured no faster twice
    #: (wgmma-attention/2ed8b77, 7f124a6: forward 252 against 239 us, backward 707 against 704), and
    #: FlashAttention-3's ping-pong, the block's two warpgroups taking turns to issue their products
    #: by named barriers, was slower (wgmma-attention/a886f81: forward 236 against 222 us).
    forward_groups, backward_groups = 2, 1
    #: the ring of streamed tiles (attention.cu's WG_RING slots, WG_AHEAD tiles issued ahead of the
    #: one multiplied), forward and backward (a forward slot of 128 keys is 32 KB: two slots keep two
    #: blocks an SM; with 64 keys it was (4, 2))
    forward_ring, backward_ring = (2, 1), (3, 2)
    #: a producer warp issues the copies (attention.cu's WG_PRODUCER), else thread 0 between its tiles
    producer = False
    #: keys a forward stage (attention.cu's FWD_KEYS): 64, or 128 (the scores one m64n128k16 product
    #: a k-step, half the products and row reductions a key, as cuDNN's forward tiles them). Measured
    #: on the H200 (reports/cupy_raw-h200/attention-a2717d2, bf16, T=1024): B=32 0.204 ms against
    #: 0.223 with 64 keys, B=16 level; in the B=64 training step 5.63 against 6.28 ms. dQ in 128-key
    #: stages was slower (218 registers, two blocks an SM where 64 keys leave three: 922e687).
    forward_keys = 128
    #: the forward's schedule: "in_turn" (a block per item, each warpgroup's products and softmax one
    #: after the other, two blocks an SM) or "overlapped" (attention.cu's FWD_OVERLAPPED: one persistent
    #: block an SM, two warpgroups and a producer warp, each warpgroup's softmax under its previous
    #: stage's P V; 128-key stages in forward_ring's slots). Not yet timed: the `schedule` sweep of
    #: bench/tune/cupy_raw_attention_probe.py measures it beside the in-turn one.
    forward_schedule = "in_turn"

    def _defines(self, qkv, HS: int, *arrays, backward: bool = False) -> dict:
        defines = _flash_defines(qkv, HS, *arrays)
        if HS == 64 and defines["VEC"]:
            ring, ahead = self.backward_ring if backward else self.forward_ring
            defines.update(FLASH_WGMMA=1, WG_GROUPS=self.backward_groups if backward else self.forward_groups,
                           WG_RING=ring, WG_AHEAD=ahead, WG_PRODUCER=int(self.producer))
            if backward:
                return defines
            if self.forward_schedule not in ("in_turn", "overlapped"):
                raise ValueError(f"attention: the cupy_raw wgmma forward's schedule is 'in_turn' or 'overlapped', "
                                 f"got {self.forward_schedule!r}")
            if self.forward_schedule == "overlapped":
                defines.update(FWD_OVERLAPPED=1, WG_GROUPS=2, WG_PRODUCER=1, FWD_KEYS=128)
            elif self.forward_keys != FLASH_KEYS:
                defines["FWD_KEYS"] = self.forward_keys
        return defines

    def _arch(self, defines: dict) -> str:
        return "sm_90a" if "FLASH_WGMMA" in defines else "sm_90"

    def _operands(self, kernel: str, defines: dict, qkv, dout=None, lse=None, delta=None, saved=None) -> tuple:
        if "FLASH_WGMMA" not in defines:
            return super()._operands(kernel, defines, qkv, dout, lse, delta, saved)
        B, T, C3 = qkv.shape
        tile = (FLASH_KEYS, FLASH_KEYS, 1)  # 64 head columns of 64 rows of one batch: one swizzled tile
        qkv_map = _tma.tiled(qkv, (C3, T, B), (C3, T * C3), tile)
        if dout is None:  # (the overlapped forward walks the items itself: it takes B)
            return (qkv_map, _common.i32(B)) if "FWD_OVERLAPPED" in defines else (qkv_map,)
        C = C3 // 3
        dy_map = _tma.tiled(dout, (C, T, B), (C, T * C), tile)
        if kernel == "attention_wgmma_backward_dq":  # (it makes delta from y, res and dy, and writes it)
            return qkv_map, dy_map, lse, delta, saved.y, saved.res, dout
        rows = [_tma.tiled(v, (T, B * v.shape[1]), (v.shape[2],), (FLASH_KEYS, 1), swizzle=False) for v in (lse, delta)]
        return (qkv_map, dy_map, *rows)

    def _forward_kernel(self, defines: dict):
        if "FLASH_WGMMA" not in defines:
            return super()._forward_kernel(defines)
        g, ring = defines["WG_GROUPS"], defines["WG_RING"]  # a Q tile a warpgroup; the ring of (K, V)
        tiles = defines.get("FWD_KEYS", FLASH_KEYS) // FLASH_KEYS  # 64-row tiles of K (and of V) a stage
        if "FWD_OVERLAPPED" in defines:  # two Q slots, and their full and empty mbarriers
            return ("attention_wgmma_forward_overlapped", 64 * g, _wgmma_threads(defines),
                    _wgmma_shared(2 * g + 2 * tiles * ring, ring, bars=4))
        return "attention_wgmma_forward", 64 * g, _wgmma_threads(defines), _wgmma_shared(g + 2 * tiles * ring, ring)

    def _forward_grid(self, defines: dict, qkv, n_head: int, rows: int) -> tuple:
        if "FWD_OVERLAPPED" not in defines:
            return super()._forward_grid(defines, qkv, n_head, rows)
        B, T, _ = qkv.shape  # one persistent block an SM (fewer where there are fewer items)
        return (min(rt.cdiv(T, rows) * n_head * B, _common.num_sms(_common.xp_of(qkv))),)

    # No delta pass: the dQ kernel makes delta and runs first. Measured on the H200
    # (reports/cupy_raw-h200/attention-78b8267, bf16, T=1024, B=32): backward 0.529 against 0.534 ms
    # with the pass. Persistent forward and dQ kernels (blocks taking the (query tile, head, batch)
    # items from a counter, the next item's first copies under the last one's products) were slower
    # in the same run: forward 0.234 against 0.208 ms, backward 0.615 against 0.534 (78b8267 has them).
    def _delta_pass(self, defines: dict) -> bool:
        return "FLASH_WGMMA" not in defines

    def _backward_kernels(self, defines: dict):
        if "FLASH_WGMMA" not in defines:
            return super()._backward_kernels(defines)
        g, ring = defines["WG_GROUPS"], defines["WG_RING"]
        threads = _wgmma_threads(defines)
        dkdv = ("attention_wgmma_backward_dkdv", 64 * g, threads,  # K, V a warpgroup; the ring of (Q, dY, L, delta)
                _wgmma_shared(2 * g + 2 * ring, ring, 2 * FLASH_KEYS * ring))
        dq = ("attention_wgmma_backward_dq", 64 * g, threads,      # Q, dY a warpgroup; the ring of (K, V)
              _wgmma_shared(2 * g + 2 * ring, ring))
        return dq, dkdv  # (dK/dV reads the delta dQ writes)


def _wgmma_threads(defines: dict) -> int:
    """A wgmma block's threads (attention.cu's WG_BLOCK_THREADS): its warpgroups, then the producer warp."""
    return 128 * defines["WG_GROUPS"] + 32 * defines["WG_PRODUCER"]


def _wgmma_shared(tiles: int, ring: int, floats: int = 0, bars: int = 0) -> int:
    """Dynamic shared bytes of a wgmma kernel: 1 KB of slack to align the swizzled tiles to 1024 bytes,
    `tiles` 64 x 64 16-bit tiles (8 KB each), `floats` floats, then the mbarriers of a ring of `ring`
    slots (attention.cu's WG_BARS_BYTES: `once`, full and empty, 8 bytes each) and `bars` more."""
    return 1024 + tiles * 8192 + 4 * floats + 8 * (1 + 2 * ring + bars)


wgmma = Wgmma()

