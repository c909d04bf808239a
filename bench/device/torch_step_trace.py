"""The PyTorch reference's training step kernel by kernel, and its GEMMs alone: is a GEMM slower
inside a whole step than alone for cuBLAS too, or only for ours?

    python3 bench/device/torch_step_trace.py --out DIR [--B 64] [--eager] [--steps 3]

Our traces (step_trace.py) show the triton backward GEMMs 10-20% slower in the step than in the
sweeps that time them alone, where they are within 0.94-0.98x of cuBLAS. If cuBLAS's GEMMs lose as
much inside the reference's step (the card held at its power limit through a whole step, clocks
lower than in a short sweep), the loss is the card's; if they do not, it is ours to find.

1. The reference model (euler_torch_reference.gpt2: bf16 autocast, SDPA, fused AdamW; torch.compile
   unless --eager) at B x 1024, warmed up, then --steps steps under the profiler (CUPTI): every
   GPU kernel of one step with its grid and duration (median over the steps, by position).
   GEMMs are told apart from the rest by name; each GEMM kernel of a layer is matched to the
   product it computes by its M x N x K from the profiler's input shapes of aten::mm/addmm (eager)
   or by its place in the step.
2. The same GEMM products alone (torch.mm on bf16 operands laid out as the step lays them out),
   each timed over 20 back-to-back calls with CUDA events, median.
Prints a table (product, in-step us, alone us, ratio) and writes DIR/torch-step.json and
DIR/torch-step.md. torch is the reference here, on the device only (never part of the product).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from euler_torch_reference.gpt2 import GPT, optimizer

CONFIG = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257, padded_vocab=50304)


def gemm_products(rows: int, C: int = 768, V: int = 50304) -> dict[str, tuple]:
    """name -> (a shape, b shape, transpose a?, transpose b?): the products of one step's linears
    as autograd computes them (y = x W^T; dx = dy W; dW = dy^T x)."""
    products = {}
    for name, k, n in (("qkv", C, 3 * C), ("attn_proj", C, C), ("fc", C, 4 * C), ("fc_proj", 4 * C, C),
                       ("lm_head", C, V)):
        products[f"{name} fwd"] = ((rows, k), (n, k), False, True)      # x (rows,k) @ W^T (k,n)
        products[f"{name} dx"] = ((rows, n), (n, k), False, False)      # dy (rows,n) @ W (n,k)
        products[f"{name} dW"] = ((rows, n), (rows, k), True, False)    # dy^T (n,rows) @ x (rows,k)
    return products


def flops(a, b, ta, tb) -> float:
    m = a[1] if ta else a[0]
    kk = a[0] if ta else a[1]
    n = b[0] if tb else b[1]
    return 2.0 * m * n * kk


def time_alone(products: dict, reps: int = 20) -> dict[str, float]:
    out = {}
    for name, (a_shape, b_shape, ta, tb) in products.items():
        a = torch.randn(a_shape, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(b_shape, device="cuda", dtype=torch.bfloat16)
        aa = a.t() if ta else a
        bb = b.t() if tb else b
        for _ in range(3):
            torch.mm(aa, bb)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        torch.cuda.synchronize()
        for s, e in zip(starts, ends):
            s.record()
            torch.mm(aa, bb)
            e.record()
        torch.cuda.synchronize()
        out[name] = statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
        del a, b
    return out


def step_kernels(B: int, compile_: bool, steps: int, out: Path) -> tuple[list[dict], dict, list[float]]:
    torch.manual_seed(0)
    model = GPT(**CONFIG).cuda()
    run = torch.compile(model) if compile_ else model
    opt = optimizer(model, 3e-4, 0.1, fused=True)
    params = list(model.parameters())
    x = torch.randint(0, CONFIG["vocab_size"], (B, 1024), device="cuda")
    y = torch.randint(0, CONFIG["vocab_size"], (B, 1024), device="cuda")

    def one():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    for _ in range(4):
        one()
    torch.cuda.synchronize()
    walls = []
    shapes: dict = {}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                                record_shapes=True) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            one().item()
            walls.append(time.perf_counter() - t0)
    for evt in prof.key_averages(group_by_input_shape=True):
        if evt.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm"):
            dev_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0.0)
            shapes[f"{evt.key} {evt.input_shapes}"] = {"calls": evt.count, "device_us_total": dev_us}
    path = out / "torch-trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    path.unlink()
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    per = len(gpu) // steps
    kernels = []
    for i in range(per):
        durs = [float(gpu[s * per + i]["dur"]) for s in range(steps)]
        e = gpu[i]
        kernels.append({"name": e["name"], "grid": (e.get("args") or {}).get("grid"), "us": statistics.median(durs)})
    return kernels, shapes, walls


def is_gemm(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in ("gemm", "xmma", "cutlass", "sm90_", "nvjet", "cublas"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--eager", action="store_true", help="the eager model (default: torch.compile)")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    kernels, shapes, walls = step_kernels(args.B, not args.eager, args.steps, out)
    products = gemm_products(args.B * 1024)
    alone = time_alone(products)
    gemms = [k for k in kernels if is_gemm(k["name"])]
    total = sum(k["us"] for k in kernels)
    lines = [f"# The PyTorch reference's step, B={args.B}, {'eager' if args.eager else 'torch.compile'}",
             "", f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}",
             f"wall per step (ms): {[round(w * 1e3, 2) for w in walls]}; kernels {total / 1e3:.2f} ms, "
             f"{len(kernels)} a step, GEMM kernels {sum(k['us'] for k in gemms) / 1e3:.2f} ms ({len(gemms)})", "",
             "## GEMM products alone (torch.mm, median of 20)", "", "| product | us | TFLOP/s |", "|---|---:|---:|"]
    for name, us in alone.items():
        a, b, ta, tb = products[name]
        lines.append(f"| {name} | {us:.1f} | {flops(a, b, ta, tb) / us / 1e6:.0f} |")
    lines += ["", "## aten GEMM ops in the step (profiler, by input shape)", "", "| op and shapes | calls | us a call |",
              "|---|---:|---:|"]
    for key, v in sorted(shapes.items(), key=lambda kv: -kv[1]["device_us_total"]):
        lines.append(f"| {key} | {v['calls']} | {v['device_us_total'] / max(1, v['calls']):.1f} |")
    lines += ["", "## Every kernel of one step (median over the profiled steps)", "", "| # | kernel | grid | us |",
              "|---:|---|---|---:|"]
    for i, k in enumerate(kernels):
        lines.append(f"| {i} | `{k['name'][:90]}` | {k['grid']} | {k['us']:.1f} |")
    (out / "torch-step.md").write_text("\n".join(lines) + "\n")
    (out / "torch-step.json").write_text(json.dumps({"B": args.B, "compile": not args.eager, "walls_s": walls,
                                                      "kernels": kernels, "aten_gemms": shapes, "alone_us": alone,
                                                      "device": torch.cuda.get_device_name(),
                                                      "torch": torch.__version__}, indent=1))
    print("\n".join(lines[:40]))


if __name__ == "__main__":
    main()
