"""Where the ordered-dQ backward's time goes (backends/triton/attention.py, variant `ordered`): the
product's source with one mechanism removed at a time, each timed beside the product's `flash` and
`ordered` backwards on the H200, one process.

    python bench/tune/attention_ordered_ablation.py [--batches 16,64]

An ablation is a list of source edits applied to a copy of attention.py (each edit must match
exactly once, so a stale ablation fails loudly instead of timing the product). Most of them make
dQ wrong or non-repeatable: they are timings of a mechanism's cost, not kernels; only `product` is
checked (bitwise equal to the product's own `ordered` result). bf16, causal, T=1024, 12 heads of
64, backward only (the same saved forward), median of batches between CUDA events
(attention_tiles.timeit).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import tempfile

import torch  # before backends.triton (see attention_tiles.py)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
C, NH, T = 768, 12, 1024

WAIT = ("            _wait_at_least(count, start_m // BLOCK_N - j, SPIN_ASM)\n", "")
PUBLISH = ("        _publish(count, SPIN_ASM)\n", "")
RED = ('        else:\n            tl.atomic_add(acc, share, mask=qmask, sem="relaxed")\n',
       '        else:\n            tl.store(acc, share, mask=qmask)\n')
BARRIER = ('"bar.sync 0; @%p_first', '"@%p_first')
DELTA = ("delta = tl.where(mmask, _read_published(delta_ptr + offs_m), 0.0)",
         "delta = tl.load(delta_ptr + offs_m, mask=mmask, other=0.0)")
ABLATIONS = {
    "product": [],
    "no order (unordered float32 atomics, FA2's dQ)": [WAIT, PUBLISH],
    "no wait (publish kept)": [WAIT],
    "plain stores for the shares (order kept)": [RED],
    "no order, plain stores (the five products and their traffic)": [WAIT, PUBLISH, RED],
    "publish without its barrier": [BARRIER],
    "delta by a plain load (no compare-and-swap)": [DELTA],
}


def load_ablation(name, edits):
    src = open(os.path.join(ROOT, "backends", "triton", "attention.py")).read()
    for old, new in edits:
        if src.count(old) != 1:
            raise SystemExit(f"ablation {name!r}: the edit {old[:60]!r} matches {src.count(old)} times, not once")
        src = src.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), "attention_ablation.py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(f"backends.triton._ablation_{len(sys.modules)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="16,64")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import attention_tiles as at
    import cupy as cp

    from backends.triton import attention
    rows = []
    for B in (int(b) for b in args.batches.split(",")):
        g = torch.Generator(device="cuda").manual_seed(B)
        qkv = at.to_cupy(torch.randn(B, T, 3 * C, device="cuda", generator=g).to(torch.bfloat16))
        dy = at.to_cupy(torch.randn(B, T, C, device="cuda", generator=g).to(torch.bfloat16))
        y, saved = attention.forward({"qkv": qkv}, {"n_head": NH})
        reference = attention.Ordered.backward(saved, dy, {})["qkv"].copy()
        flash = at.timeit(lambda: attention.backward(saved, dy, {}))
        rows.append((B, "flash (the walk, product)", flash))
        print(f"B{B} flash {flash * 1e6:.1f} us", flush=True)
        for name, edits in ABLATIONS.items():
            mod = load_ablation(name, edits)
            run = lambda: mod.Ordered.backward(saved, dy, {})  # noqa: E731
            got = run()["qkv"]
            cp.cuda.Device().synchronize()
            if name == "product" and not bool(cp.array_equal(got, reference)):
                raise SystemExit("the unedited copy differs from the product's ordered backward")
            sec = at.timeit(run)
            rows.append((B, name, sec))
            print(f"B{B} {name}: {sec * 1e6:.1f} us ({flash / sec:.3f}x flash)", flush=True)
    print("\n| B | backward | us | flash / this |\n|---:|---|---:|---:|")
    for B, name, sec in rows:
        flash = next(s for b, n, s in rows if b == B and n.startswith("flash"))
        print(f"| {B} | {name} | {sec * 1e6:.1f} | {flash / sec:.3f}x |")
    return 0 if all(math.isfinite(s) for _, _, s in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
