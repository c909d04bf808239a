"""cupy_raw's attention variants beside PyTorch SDPA (cuDNN, FlashAttention-2) and triton's attention on one
GPU, in one process: the wgmma kernels' block shapes and rings of TMA slots, and flash.

    python3 bench/tune/cupy_raw_attention_probe.py --out DIR      # the H200, ~1 min

1. Check: each variant of ours (cupy_raw wgmma as shipped; wgmma with two and with one warpgroup a block
   in both directions (--sweeps groups), the forward's 128-key stages (keys), and with other rings of TMA slots (rings), "rings F/f, B/b": WG_RING / WG_AHEAD of
   the forward, then of the backward, or with a producer warp issuing the copies (WG_PRODUCER); the forward
   overlapped (schedule: persistent blocks, each warpgroup's softmax under its last stage's P V); cupy_raw flash with 128-query forward blocks, the default at
   heads of up to 64 other than 64; triton's attention) on fresh random inputs with NaN-poisoned
   outputs and gradient buffers, forward and backward, against SDPA's math backend in float64 on the
   same rounded inputs: attention_tiles.py's check (GPT-2's shape B=2, T=1024, 12 heads of 64 in bf16,
   ragged T=1000, T=257 in fp16, heads of 128 and of 5). Pass: relative L2 error under
   attention_tiles.REL_L2 and every element written. A variant that fails is not timed.
2. Time: bf16, causal, B in {16, 32}, T=1024, 12 heads of 64, qkv packed (B,T,3C): forward, backward
   (on one saved forward) and forward+backward, with attention_tiles.timeit (median of batches of
   back-to-back calls between CUDA events); SDPA on strided (B,NH,T,HS) views of the same packed qkv.

Writes DIR/attention_probe.json and prints a table: ms, TFLOP/s (the causal forward's 2 B T^2 C, x2.5
backward, x3.5 both) and the ratio to cuDNN's time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch  # before backends.triton: its runtime then leaves torch to Triton's type checks

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attention_tiles as tiles  # noqa: E402  the check, the timer and the torch <-> CuPy views

T, C, NH = 1024, 768, 12
BATCHES = (16, 32)
CHECK_SHAPES = [(2, 1024, 768, 12, "bfloat16"), (2, 1000, 768, 12, "bfloat16"), (1, 257, 768, 12, "float16"),
                (2, 1024, 768, 6, "bfloat16"), (1, 77, 20, 4, "bfloat16")]


class _FlashWithMTiles:
    """cupy_raw's flash variant with the forward's FWD_M_TILES forced (the backward is unchanged)."""

    def __init__(self, m_tiles: int):
        from backends.cupy_raw import attention
        self.attention, self.m_tiles = attention, m_tiles

    def _forced(self):
        a, m = self.attention, self.m_tiles
        original = a._flash_defines

        class Forced:
            def __enter__(self):
                a._flash_defines = lambda *args: {**original(*args), "FWD_M_TILES": m}

            def __exit__(self, *exc):
                a._flash_defines = original
        return Forced()

    def forward(self, inputs, attrs, out=None):
        with self._forced():
            return self.attention.flash.forward(inputs, attrs, out)

    def backward(self, saved, dout, grads):
        return self.attention.flash.backward(saved, dout, grads)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sweeps", default="groups,rings,keys,schedule",
                    help="which variants of wgmma beside the shipped one, comma-separated: groups (one and two "
                         "warpgroups a block), rings (rings of TMA slots, a producer warp), keys (the forward's "
                         "128-key stages with one and two warpgroups and rings of 2 and 3), schedule (the "
                         "overlapped forward, forward_schedule 'overlapped', with rings of 3, 4 and 5); none: "
                         "the shipped variant alone")
    args = ap.parse_args()
    sweeps = set(args.sweeps.split(","))
    os.makedirs(args.out, exist_ok=True)
    from backends.triton import attention as tri
    from backends.cupy_raw import attention as raw
    ours = {"cupy_raw wgmma (as shipped)": raw.wgmma}
    for groups in (2, 1) if "groups" in sweeps else ():
        v = raw.Wgmma()
        v.forward_groups = v.backward_groups = groups
        ours[f"cupy_raw wgmma ({groups} warpgroup{'s' * (groups > 1)} a block)"] = v
    for keys, groups, ring in (((128, 1, (2, 1)), (128, 1, (3, 1)), (128, 2, (3, 1)), (64, 2, (4, 2)))
                               if "keys" in sweeps else ()):
        v = raw.Wgmma()
        v.forward_keys, v.forward_groups, v.forward_ring = keys, groups, ring
        ours[f"cupy_raw wgmma (forward: {keys} keys a stage, {groups} warpgroup{'s' * (groups > 1)}, ring {ring[0]}/{ring[1]})"] = v
    for ring in (3, 4, 5) if "schedule" in sweeps else ():
        v = raw.Wgmma()
        v.forward_schedule, v.forward_ring = "overlapped", (ring, 1)
        ours[f"cupy_raw wgmma (forward overlapped: one persistent block an SM, ring {ring})"] = v
    for forward_ring, backward_ring, producer in ((((2, 1), (2, 1), False), ((3, 1), (3, 1), False),
                                                   ((4, 3), (4, 3), False), ((4, 3), (3, 2), True), ((4, 3), (4, 3), True))
                                                  if "rings" in sweeps else ()):
        v = raw.Wgmma()
        v.forward_ring, v.backward_ring, v.producer = forward_ring, backward_ring, producer
        rings = (f"rings {forward_ring[0]}, {backward_ring[0]}, a producer warp" if producer else
                 f"rings {forward_ring[0]}/{forward_ring[1]}, {backward_ring[0]}/{backward_ring[1]}")
        ours[f"cupy_raw wgmma ({rings})"] = v
    ours.update({"cupy_raw flash (128-query forward blocks)": _FlashWithMTiles(2), "triton": tri})
    records, ok = [], {}
    for name, impl in ours.items():
        for i, (B, T_, C_, nh, dt) in enumerate(CHECK_SHAPES):
            try:
                r = tiles.check(impl, None, B, T_, C_, nh, dt, seed=300 + i)
                good = all(v[1] <= tiles.REL_L2[dt] for v in r.values())
                detail = " ".join(f"{k} rel {v[1]:.2e} (max/tol {v[0]:.2f})" for k, v in r.items())
            except Exception as ex:  # a launch that fails: reported, not timed
                good, detail = False, f"{type(ex).__name__}: {str(ex)[:300]}"
            ok[name] = ok.get(name, True) and good
            print(f"check {name:52s} B{B} T{T_} C{C_} NH{nh} {dt:8s} {'ok  ' if good else 'FAIL'} {detail}", flush=True)
            records.append(dict(kind="check", name=name, B=B, T=T_, C=C_, NH=nh, dtype=dt, passed=good, detail=detail))

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    table = []
    factor = {"forward": 1.0, "backward": 2.5, "forward+backward": 3.5}

    def add(B, name, what, sec):
        tflops = 2 * B * T * T * C * factor[what] / sec / 1e12
        table.append((B, name, what, sec))
        print(f"time B{B} {name:52s} {what:17s} {sec * 1e3:8.4f} ms {tflops:6.1f} TFLOP/s", flush=True)
        records.append(dict(kind="time", B=B, T=T, C=C, NH=NH, dtype="bfloat16", name=name, direction=what,
                            seconds=sec, tflops=tflops))

    for B in BATCHES:
        g = torch.Generator(device="cuda").manual_seed(B)
        qkv_t = torch.randn(B, T, 3 * C, device="cuda", generator=g).to(torch.bfloat16)
        dy_t = torch.randn(B, T, C, device="cuda", generator=g).to(torch.bfloat16)
        qkv, dy = tiles.to_cupy(qkv_t), tiles.to_cupy(dy_t)
        attrs = {"n_head": NH}
        for name, impl in ours.items():
            if not ok[name]:
                continue
            add(B, name, "forward", tiles.timeit(lambda: impl.forward({"qkv": qkv}, attrs)))
            saved = impl.forward({"qkv": qkv}, attrs)[1]
            add(B, name, "backward", tiles.timeit(lambda: impl.backward(saved, dy, {})))
            add(B, name, "forward+backward",
                tiles.timeit(lambda: impl.backward(impl.forward({"qkv": qkv}, attrs)[1], dy, {})))
        x = qkv_t.view(B, T, 3, NH, C // NH)
        q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
        dyv = torch.randn(B, NH, T, C // NH, device="cuda", generator=g).to(torch.bfloat16)
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            name = "SDPA " + str(backend).split(".")[-1]
            try:
                with sdpa_kernel([backend]):
                    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                    add(B, name, "forward", tiles.timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))

                    def fb():
                        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                        torch.autograd.grad(o, (qq, kk, vv), dyv)
                    add(B, name, "forward+backward", tiles.timeit(fb))
                    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                    add(B, name, "backward",
                        tiles.timeit(lambda: torch.autograd.grad(o, (qq, kk, vv), dyv, retain_graph=True)))
            except Exception as ex:  # a backend this build or shape lacks
                print(f"{name}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)

    Path(args.out, "attention_probe.json").write_text(json.dumps(
        dict(device=torch.cuda.get_device_name(), torch=torch.__version__, git_sha=os.environ.get("GIT_SHA", ""),
             records=records), indent=1))
    print("\n== checks: " + ", ".join(f"{n} {'ok' if g else 'FAIL'}" for n, g in ok.items()))
    print("\n| B | variant | direction | ms | TFLOP/s | vs cuDNN |")
    print("|---|---|---|---:|---:|---:|")
    for B, name, what, sec in table:
        cudnn = [s for b, n, w, s in table if b == B and w == what and n == "SDPA CUDNN_ATTENTION"]
        ratio = f"{cudnn[0] / sec:.2f}x" if cudnn else "-"
        print(f"| {B} | {name} | {what} | {sec * 1e3:.3f} | {2 * B * T * T * C * factor[what] / sec / 1e12:.0f} | {ratio} |")
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
