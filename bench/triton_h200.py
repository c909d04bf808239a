"""Op benchmark of the triton backend beside PyTorch's references, on one GPU (the H200).

Two processes, so that Triton here never sees torch (the backend runs with sys.modules["torch"] =
None; see backends/triton/_runtime.py) and torch's caching allocator does not share the card with
CuPy's pool mid-measurement:

    python bench/triton_h200.py --side triton --out triton.json     our kernels, on CuPy arrays
    python bench/triton_h200.py --side torch  --out torch.json      cuBLAS (torch.matmul), SDPA
                                                                   (each backend, fastest kept),
                                                                   F.layer_norm, F.gelu(tanh),
                                                                   F.cross_entropy, fused AdamW
    python bench/triton_h200.py --merge triton.json torch.json --out bench.json   (+ a table)

Shapes: GPT-2 124M, bf16 (AdamW in float32: the optimizer keeps fp32 master weights), N = B*T in
{16384, 32768} rows, C=768, 12 heads of 64, T=1024, V=50304. Timing: CUDA events around batches of
back-to-back calls after a warm-up, the median of the batches (METHOD.md: one kernel per pair of
events overstates short kernels). FLOP and byte counts come from the op specs
(euler_core/ops/*.py), the peaks from a bf16 8192^3 cupy.matmul and a 4 GiB device copy measured in
the same run. Correctness is the conformance suite's job (run first, in the same script,
bench/triton_h200.sh); this file only times.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

SIZES = {"N16k": (16, 1024), "N32k": (32, 1024)}  # label -> (B, T)
C, NH, V, NVALID = 768, 12, 50304, 50257
N_PARAMS = 124_475_904
LINEARS = {"qkv": (768, 2304, True), "attn_proj": (768, 768, True), "fc": (768, 3072, True),
           "fc_proj": (3072, 768, True), "lm_head": (768, V, False)}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# ---- triton side -------------------------------------------------------------------------------------
def run_triton(out_path):
    import cupy as cp
    import ml_dtypes
    import numpy as np

    from backends.triton import (adamw, attention, crossentropy, embedding, gelu, layernorm, matmul,
                                 residual)
    from euler_core.ops import OPS
    bf16 = ml_dtypes.bfloat16
    rng = cp.random.default_rng(0)

    def randn(shape, dtype=bf16, scale=1.0):
        return (rng.standard_normal(shape, dtype=cp.float32) * scale).astype(dtype)

    def timeit(fn, min_batch=10, target_s=0.02, batches=10):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        for _ in range(3):
            fn()
        cp.cuda.Device().synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        one = max(cp.cuda.get_elapsed_time(start, end) / 1e3, 1e-6)
        k = max(min_batch, int(target_s / one))
        times = []
        for _ in range(batches):
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / k)
        return median(times)

    records = []

    def add(op, shape, direction, seconds, inputs, attrs, dtype="bfloat16"):
        spec = OPS[op]
        fl = spec.flops(inputs, spec.fill_attrs(attrs))
        by = spec.bytes_moved(inputs, spec.fill_attrs(attrs))
        if direction == "forward+backward":
            f, b = fl["forward"] + fl["backward"], by["forward"] + by["backward"]
        else:
            f, b = fl[direction], by[direction]
        records.append({"side": "triton", "op": op, "shape": shape, "direction": direction, "dtype": dtype,
                        "seconds": seconds, "flops": f, "bytes": b})
        print(f"triton {op:12s} {shape:18s} {direction:17s} {seconds * 1e3:9.4f} ms  "
              f"{f / seconds / 1e12:7.1f} TFLOP/s {b / seconds / 1e9:8.1f} GB/s", flush=True)

    # peaks
    n = 8192
    a, b = randn((n, n)), randn((n, n))
    t = timeit(lambda: cp.matmul(a, b), min_batch=3, batches=5)
    peak_flops = 2 * n ** 3 / t
    del a, b
    src = cp.empty(1 << 32, dtype=cp.uint8)
    dst = cp.empty_like(src)
    t = timeit(lambda: cp.copyto(dst, src), min_batch=3, batches=5)
    peak_bw = 2 * src.nbytes / t
    del src, dst
    print(f"peak: bf16 matmul {peak_flops / 1e12:.1f} TFLOP/s, copy {peak_bw / 1e9:.0f} GB/s", flush=True)

    for label, (B, T) in SIZES.items():
        N = B * T
        # attention
        qkv = randn((B, T, 3 * C))
        attrs = {"n_head": NH}
        y, saved = attention.forward({"qkv": qkv}, attrs)
        dy = randn((B, T, C))
        tf = timeit(lambda: attention.forward({"qkv": qkv}, attrs))
        tb = timeit(lambda: attention.backward(saved, dy, {}))
        tfb = timeit(lambda: attention.backward(attention.forward({"qkv": qkv}, attrs)[1], dy, {}))
        add("attention", f"{label}-B{B}", "forward", tf, {"qkv": qkv}, attrs)
        add("attention", f"{label}-B{B}", "backward", tb, {"qkv": qkv}, attrs)
        add("attention", f"{label}-B{B}", "forward+backward", tfb, {"qkv": qkv}, attrs)
        del qkv, y, saved, dy
        # matmuls
        for name, (K, M, has_bias) in LINEARS.items():
            x, w = randn((N, K)), randn((M, K), scale=K ** -0.5)
            inputs = {"x": x, "weight": w}
            if has_bias:
                inputs["bias"] = randn((M,))
            y, saved = matmul.forward(inputs, {})
            dy = randn((N, M))
            grads = {"weight": cp.zeros_like(w)}
            if has_bias:
                grads["bias"] = cp.zeros((M,), dtype=bf16)
            tf = timeit(lambda: matmul.forward(inputs, {}, y))
            tb = timeit(lambda: matmul.backward(saved, dy, grads))
            add("matmul", f"{label}-{name}", "forward", tf, inputs, {})
            add("matmul", f"{label}-{name}", "backward", tb, inputs, {})
            del x, w, inputs, y, saved, dy, grads
        # layernorm, gelu, residual
        x = randn((N, C), scale=2.0)
        inputs = {"x": x, "weight": randn((C,)), "bias": randn((C,))}
        y, saved = layernorm.forward(inputs, {"eps": 1e-5})
        dy = randn((N, C))
        grads = {"weight": cp.zeros((C,), bf16), "bias": cp.zeros((C,), bf16)}
        add("layernorm", label, "forward", timeit(lambda: layernorm.forward(inputs, {"eps": 1e-5}, y)), inputs, {})
        add("layernorm", label, "backward", timeit(lambda: layernorm.backward(saved, dy, grads)), inputs, {})
        a2, b2 = randn((N, C)), randn((N, C))
        add("residual", label, "forward", timeit(lambda: residual.forward({"a": a2, "b": b2}, {}, y)),
            {"a": a2, "b": b2}, {})
        del x, inputs, y, saved, dy, grads, a2, b2
        x = randn((N, 4 * C), scale=2.0)
        y, saved = gelu.forward({"x": x}, {})
        dy = randn((N, 4 * C))
        add("gelu", label, "forward", timeit(lambda: gelu.forward({"x": x}, {}, y)), {"x": x}, {})
        add("gelu", label, "backward", timeit(lambda: gelu.backward(saved, dy, {"x": y})), {"x": x}, {})
        del x, y, saved, dy
        # crossentropy
        logits = randn((B, T, V), scale=3.0)
        targets = cp.asarray(np.random.default_rng(0).integers(0, NVALID, size=(B, T)).astype(np.int32))
        ce_attrs = {"n_valid": NVALID}
        losses, saved = crossentropy.forward({"logits": logits, "targets": targets}, ce_attrs)
        dl = cp.full((B, T), 1.0 / N, dtype=cp.float32)
        dlogits = cp.empty_like(logits)
        ci = {"logits": logits, "targets": targets}
        add("crossentropy", label, "forward", timeit(lambda: crossentropy.forward(ci, ce_attrs, losses)), ci, ce_attrs)
        add("crossentropy", label, "backward",
            timeit(lambda: crossentropy.backward(saved, dl, {"logits": dlogits})), ci, ce_attrs)
        del logits, dlogits, saved, losses
        # embedding
        tokens = cp.asarray(np.random.default_rng(1).integers(0, NVALID, size=(B, T)).astype(np.int32))
        ei = {"tokens": tokens, "wte": randn((V, C)), "wpe": randn((T, C))}
        y, saved = embedding.forward(ei, {})
        dy = randn((B, T, C))
        eg = {"wte": cp.zeros((V, C), bf16), "wpe": cp.zeros((T, C), bf16)}
        add("embedding", label, "forward", timeit(lambda: embedding.forward(ei, {}, y)), ei, {})
        add("embedding", label, "backward", timeit(lambda: embedding.backward(saved, dy, eg)), ei, {})
        del ei, y, saved, dy, eg
        cp.get_default_memory_pool().free_all_blocks()
    # adamw over GPT-2's parameters, float32
    p = randn((N_PARAMS,), cp.float32)
    ai = {"param": p, "grad": randn((N_PARAMS,), cp.float32), "m": cp.zeros_like(p), "v": cp.zeros_like(p)}
    aattrs = {"lr": 1e-4, "weight_decay": 0.1, "step": 1}
    add("adamw", "124M", "forward", timeit(lambda: adamw.forward(ai, {**aattrs, "beta1": 0.9, "beta2": 0.95,
                                                                    "eps": 1e-8, "grad_scale": 1.0})),
        ai, aattrs, dtype="float32")
    json.dump({"peak_flops": peak_flops, "peak_bw": peak_bw, "records": records}, open(out_path, "w"), indent=1)


# ---- GEMM tile sweep ---------------------------------------------------------------------------------
SWEEP = [(128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3),
         (128, 128, 64, 4, 4), (64, 256, 64, 4, 4), (128, 128, 128, 8, 3)]


def run_sweep(out_path):
    """Time the forward and backward of the GPT-2 linears (N=16384) at each bf16 tile of SWEEP."""
    import cupy as cp
    import ml_dtypes

    from backends.triton import matmul
    bf16 = ml_dtypes.bfloat16
    rng = cp.random.default_rng(0)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def timeit(fn, k=20, batches=7):
        for _ in range(3):
            fn()
        times = []
        for _ in range(batches):
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / k)
        return median(times)

    rows = []
    N = 16384
    default = matmul.TILE16
    for tile in SWEEP:
        matmul.TILE16 = tile
        for name, (K, M, has_bias) in LINEARS.items():
            if name == "lm_head":
                continue
            x = rng.standard_normal((N, K), dtype=cp.float32).astype(bf16)
            w = (rng.standard_normal((M, K), dtype=cp.float32) * K ** -0.5).astype(bf16)
            inputs = {"x": x, "weight": w, "bias": cp.zeros((M,), bf16)}
            y, saved = matmul.forward(inputs, {})
            dy = rng.standard_normal((N, M), dtype=cp.float32).astype(bf16)
            grads = {"weight": cp.zeros_like(w), "bias": cp.zeros((M,), bf16)}
            try:
                tf = timeit(lambda: matmul.forward(inputs, {}, y))
                tb = timeit(lambda: matmul.backward(saved, dy, grads))
            except Exception as e:
                print(f"sweep {tile} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            fl = 2 * N * K * M
            rows.append({"tile": tile, "linear": name, "forward_s": tf, "backward_s": tb,
                         "forward_tflops": fl / tf / 1e12, "backward_tflops": 2 * fl / tb / 1e12})
            print(f"sweep {str(tile):24s} {name:10s} fwd {tf * 1e3:.4f} ms {fl / tf / 1e12:6.1f} TFLOP/s   "
                  f"bwd {tb * 1e3:.4f} ms {2 * fl / tb / 1e12:6.1f} TFLOP/s", flush=True)
    matmul.TILE16 = default
    json.dump(rows, open(out_path, "w"), indent=1)


# ---- torch side --------------------------------------------------------------------------------------
def run_torch(out_path):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = "cuda"
    bf16 = torch.bfloat16
    torch.manual_seed(0)

    def timeit(fn, min_batch=10, target_s=0.02, batches=10):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        one = max(s.elapsed_time(e) / 1e3, 1e-6)
        k = max(min_batch, int(target_s / one))
        times = []
        for _ in range(batches):
            s.record()
            for _ in range(k):
                fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3 / k)
        return median(times)

    records = []

    def add(op, shape, direction, seconds, ref, dtype="bfloat16"):
        records.append({"side": "torch", "op": op, "shape": shape, "direction": direction, "dtype": dtype,
                        "seconds": seconds, "reference": ref})
        print(f"torch  {op:12s} {shape:18s} {direction:17s} {seconds * 1e3:9.4f} ms  ({ref})", flush=True)

    for label, (B, T) in SIZES.items():
        N = B * T
        qkv = torch.randn(B, T, 3, NH, C // NH, device=dev, dtype=bf16)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B,NH,T,HS) strided views, as from qkv
        dy = torch.randn(B, NH, T, C // NH, device=dev, dtype=bf16)
        best = {}
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
            try:
                with sdpa_kernel([backend]):
                    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                    tf = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)

                    def fb():
                        o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                        torch.autograd.grad(o, (qq, kk, vv), dy)
                    tfb = timeit(fb)
                    del out
                name = str(backend).split(".")[-1]
                add("attention", f"{label}-B{B}", "forward", tf, f"SDPA {name}")
                add("attention", f"{label}-B{B}", "forward+backward", tfb, f"SDPA {name}")
                best[name] = tfb
            except Exception as e:  # a backend this build or shape does not have
                print(f"torch SDPA {backend}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        del qkv, q, k, v, dy
        for name, (K, M, has_bias) in LINEARS.items():
            x = torch.randn(N, K, device=dev, dtype=bf16)
            w = torch.randn(M, K, device=dev, dtype=bf16) * K ** -0.5
            bias = torch.randn(M, device=dev, dtype=bf16) if has_bias else None
            dy = torch.randn(N, M, device=dev, dtype=bf16)
            y = torch.empty(N, M, device=dev, dtype=bf16)
            if bias is not None:
                tf = timeit(lambda: torch.addmm(bias, x, w.t(), out=y))
            else:
                tf = timeit(lambda: torch.matmul(x, w.t(), out=y))
            dw = torch.zeros_like(w)
            dx = torch.empty_like(x)
            db = torch.zeros(M, device=dev, dtype=bf16)

            def bwd():
                torch.matmul(dy, w, out=dx)
                dw.addmm_(dy.t(), x)
                if has_bias:
                    db.add_(dy.sum(0))
            tb = timeit(bwd)
            add("matmul", f"{label}-{name}", "forward", tf, "cuBLAS torch.matmul/addmm")
            add("matmul", f"{label}-{name}", "backward", tb, "cuBLAS: matmul, addmm_, sum")
            del x, w, bias, dy, y, dw, dx, db
        x = (torch.randn(N, C, device=dev, dtype=bf16) * 2).requires_grad_()
        ln = torch.nn.LayerNorm(C, device=dev, dtype=bf16)
        dy = torch.randn(N, C, device=dev, dtype=bf16)
        add("layernorm", label, "forward", timeit(lambda: F.layer_norm(x.detach(), (C,), ln.weight.detach(), ln.bias.detach())),
            "F.layer_norm")
        yln = ln(x)
        add("layernorm", label, "backward",
            timeit(lambda: torch.autograd.grad(yln, (x, ln.weight, ln.bias), dy, retain_graph=True)), "F.layer_norm autograd")
        a2, b2 = torch.randn(N, C, device=dev, dtype=bf16), torch.randn(N, C, device=dev, dtype=bf16)
        o2 = torch.empty_like(a2)
        add("residual", label, "forward", timeit(lambda: torch.add(a2, b2, out=o2)), "torch.add")
        del x, ln, dy, yln, a2, b2, o2
        x = (torch.randn(N, 4 * C, device=dev, dtype=bf16) * 2).requires_grad_()
        dy = torch.randn(N, 4 * C, device=dev, dtype=bf16)
        add("gelu", label, "forward", timeit(lambda: F.gelu(x.detach(), approximate="tanh")), "F.gelu(tanh)")
        yg = F.gelu(x, approximate="tanh")
        add("gelu", label, "backward", timeit(lambda: torch.autograd.grad(yg, x, dy, retain_graph=True)),
            "F.gelu(tanh) autograd")
        del x, dy, yg
        logits = (torch.randn(N, V, device=dev, dtype=bf16) * 3).requires_grad_()
        targets = torch.randint(0, NVALID, (N,), device=dev)
        add("crossentropy", label, "forward",
            timeit(lambda: F.cross_entropy(logits.detach(), targets, reduction="none")), "F.cross_entropy")
        loss = F.cross_entropy(logits, targets, reduction="none")
        dl = torch.full((N,), 1.0 / N, device=dev)
        add("crossentropy", label, "backward",
            timeit(lambda: torch.autograd.grad(loss, logits, dl, retain_graph=True)), "F.cross_entropy autograd")
        del logits, loss
        torch.cuda.empty_cache()
    p = torch.nn.Parameter(torch.randn(N_PARAMS, device=dev))
    p.grad = torch.randn(N_PARAMS, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.1, fused=True)
    add("adamw", "124M", "forward", timeit(opt.step), "torch.optim.AdamW(fused=True)", dtype="float32")
    json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "records": records},
              open(out_path, "w"), indent=1)


# ---- merge -------------------------------------------------------------------------------------------
def merge(tri_path, torch_path, out_path):
    tri = json.load(open(tri_path))
    tor = json.load(open(torch_path)) if torch_path else {"records": []}
    pf, pb = tri["peak_flops"], tri["peak_bw"]
    rows = []
    for r in tri["records"]:
        refs = [x for x in tor["records"] if (x["op"], x["shape"], x["direction"]) == (r["op"], r["shape"], r["direction"])]
        best = min(refs, key=lambda x: x["seconds"]) if refs else None
        t = r["seconds"]
        ideal = max(r["flops"] / pf, r["bytes"] / pb)
        row = {**r, "tflops": r["flops"] / t / 1e12, "gbps": r["bytes"] / t / 1e9,
               "roofline_fraction": ideal / t, "bound": "compute" if r["flops"] / pf > r["bytes"] / pb else "memory",
               "torch_seconds": best["seconds"] if best else None, "torch_reference": best["reference"] if best else None,
               "speed_vs_torch": best["seconds"] / t if best else None,
               "torch_all": {x["reference"]: x["seconds"] for x in refs}}
        rows.append(row)
    json.dump({"peak_flops": pf, "peak_bw": pb, "torch": tor.get("torch"), "cudnn": tor.get("cudnn"),
               "rows": rows}, open(out_path, "w"), indent=1)
    lines = [f"peaks measured in this run: bf16 matmul {pf / 1e12:.0f} TFLOP/s, copy {pb / 1e9:.0f} GB/s",
             "| op | shape | direction | triton ms | TFLOP/s | GB/s | % of roofline | PyTorch ms (fastest) | triton speed vs PyTorch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tt = f"{r['torch_seconds'] * 1e3:.4f} ({r['torch_reference']})" if r["torch_seconds"] else "-"
        sp = f"{r['speed_vs_torch']:.2f}x" if r["speed_vs_torch"] else "-"
        lines.append(f"| {r['op']} | {r['shape']} | {r['direction']} | {r['seconds'] * 1e3:.4f} | {r['tflops']:.1f} | "
                     f"{r['gbps']:.0f} | {100 * r['roofline_fraction']:.0f}% ({r['bound']}) | {tt} | {sp} |")
    text = "\n".join(lines)
    print(text)
    open(out_path.replace(".json", ".md"), "w").write(text + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=("triton", "torch", "sweep"))
    ap.add_argument("--merge", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.time()
    if a.merge:
        merge(a.merge[0], a.merge[1] if len(a.merge) > 1 else None, a.out)
    elif a.side == "triton":
        run_triton(a.out)
    elif a.side == "sweep":
        run_sweep(a.out)
    else:
        run_torch(a.out)
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)
