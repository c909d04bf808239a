"""The GPU training step on the H200: correctness of the captured graph, then its speed.

    python3 bench/device/step_check.py --out $OUT/step [--smoke]

1. equality: two identical models (a small GPT, then GPT-2 124M), one stepped eagerly, one through the
   captured CUDA graphs, on the same batches: the losses and weights must agree bit for bit (the same
   kernels in the same order; a graph only replays them).
2. speed: GPT-2 124M, T=1024, bf16, --backend triton, at each batch size: time to the first step (the
   eager one, compiling), then steps replayed from the graphs: tokens/s (median of timed windows),
   peak memory (CuPy pool) and the same eagerly for a few steps.
Writes one JSON line per measurement to step.jsonl and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def make(preset_name, B, T, backend, dtype, seed=0, graph=None, vocab=50257, recompute=False):
    from euler_core.config import preset
    from euler_core.kernels import Kernels
    from euler_core.model import GPT
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep
    config = preset(preset_name, vocab_size=vocab, block_size=max(T, 16)) if preset_name != "gpt2" else preset("gpt2")
    model = GPT(config, Kernels(backend, dtype=dtype), dtype=dtype, seed=seed, recompute=recompute)
    opt = AdamW(model)
    return model, TrainStep(model, opt, B, T, accum=1, grad_clip=1.0, graph=graph)


def batch(rng, B, T, V):
    x = rng.integers(0, V, (B, T))
    y = rng.integers(0, V, (B, T))
    return [(x, y)]


def equality(log, preset_name, B, T, steps, vocab):
    import cupy
    rng = np.random.default_rng(0)
    data = [batch(rng, B, T, vocab) for _ in range(steps)]
    results = {}
    for mode, graph in (("eager", False), ("graph", True)):
        model, step = make(preset_name, B, T, "triton", "bfloat16", graph=graph, vocab=vocab)
        losses = [step.run(d, 3e-4).loss for d in data]
        cupy.cuda.Device().synchronize()
        results[mode] = (losses, model.flat_master.get())
    same_loss = results["eager"][0] == results["graph"][0]
    same_w = bool(np.array_equal(results["eager"][1], results["graph"][1]))
    rec = {"kind": "equality", "preset": preset_name, "B": B, "T": T, "steps": steps, "losses_eager": results["eager"][0],
           "losses_graph": results["graph"][0], "same_losses": same_loss, "same_weights": same_w,
           "max_weight_diff": float(np.abs(results["eager"][1] - results["graph"][1]).max())}
    log(rec)
    return rec


def speed(log, B, T, steps, eager_steps, backend="triton", graph=True):
    import cupy
    pool = cupy.get_default_memory_pool()
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    model, step = make("gpt2", B, T, backend, "bfloat16", graph=graph)
    build = time.perf_counter() - t0
    data = [batch(rng, B, T, 50257) for _ in range(4)]
    t1 = time.perf_counter()
    first = step.run(data[0], 3e-4).loss
    first_s = time.perf_counter() - t1
    times = []
    loss = None
    for i in range(steps):
        t = time.perf_counter()
        r = step.run(data[i % 4], 3e-4)
        loss = r.loss  # waits for the device
        times.append(time.perf_counter() - t)
    warm = times[2:] or times
    med = statistics.median(warm)
    rec = {"kind": "speed", "backend": backend, "graph": graph, "B": B, "T": T, "tokens_per_s": B * T / med,
           "step_ms": med * 1e3, "p20_ms": float(np.percentile(warm, 20)) * 1e3, "p80_ms": float(np.percentile(warm, 80)) * 1e3,
           "first_step_s": first_s, "build_s": build, "first_loss": first, "last_loss": loss,
           "pool_used_gib": pool.used_bytes() / 2**30, "pool_total_gib": pool.total_bytes() / 2**30,
           "captured": step.graphs is not None}
    log(rec)
    del model, step
    pool.free_all_blocks()
    return rec


def mixed_devices(log):
    """--backend triton,gelu=naive: a CPU op inside a GPU model (eager, with the copy warning)."""
    import warnings
    rng = np.random.default_rng(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, step = make("small", 4, 64, "triton,gelu=naive", "float32", vocab=256)
    losses = [step.run(batch(rng, 4, 64, 256), 1e-3).loss for _ in range(3)]
    rec = {"kind": "mixed", "selection": "triton,gelu=naive", "graph": step.graph, "losses": losses,
           "finite": bool(np.all(np.isfinite(losses))), "warning": [str(w.message)[:120] for w in caught]}
    log(rec)
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--batches", default="16,32,64")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = open(out / "step.jsonl", "a")

    def log(rec):
        print(json.dumps(rec), flush=True)
        records.write(json.dumps(rec) + "\n")
        records.flush()

    rows = []
    try:
        rows.append(equality(log, "small", 4, 64, 4, 256))
    except Exception as e:  # keep going: the speed part tells more
        log({"kind": "error", "stage": "equality small", "error": f"{type(e).__name__}: {e}"})
    try:
        rows.append(mixed_devices(log))
    except Exception as e:
        log({"kind": "error", "stage": "mixed devices", "error": f"{type(e).__name__}: {e}"})
    unfused = "triton,layernorm_residual=none,matmul_gelu=none,classifier_crossentropy=none"
    plan = [("triton", B, True) for B in (int(b) for b in args.batches.split(","))]
    plan += [("triton", 16, False), (unfused, 16, True), (unfused, 64, True)]
    for backend, B, graph in plan:
        try:
            rows.append(speed(log, B, 1024, 4 if args.smoke else (12 if graph else 5), 0, backend=backend, graph=graph))
        except Exception as e:
            log({"kind": "error", "stage": f"speed {backend} B={B} graph={graph}", "error": f"{type(e).__name__}: {e}"})
    if not args.smoke:
        try:
            rows.append(equality(log, "gpt2", 8, 1024, 3, 50257))
        except Exception as e:
            log({"kind": "error", "stage": "equality gpt2", "error": f"{type(e).__name__}: {e}"})
    print("\n| what | B | graph | tokens/s | step ms | first step s | pool GiB | note |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "speed":
            print(f"| {'speed' if r['backend'] == 'triton' else 'unfused'} | {r['B']} | {r['graph']} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {r['first_step_s']:.1f} | "
                  f"{r['pool_total_gib']:.1f} | loss {r['first_loss']:.3f} -> {r['last_loss']:.3f} |")
        elif r["kind"] == "mixed":
            print(f"| mixed {r['selection']} | 4 | {r['graph']} | - | - | - | - | losses {r['losses']} |")
        else:
            print(f"| equality {r['preset']} | {r['B']} | - | - | - | - | - | losses equal {r['same_losses']}, "
                  f"weights equal {r['same_weights']} (max diff {r['max_weight_diff']:.2g}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
