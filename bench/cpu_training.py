"""CPU training benchmark: NanoEuler's naive and numba backends against PyTorch CPU eager, one run.

    python bench/cpu_training.py --torch-python TORCH_VENV/bin/python   # writes reports/cpu-training/
    python bench/cpu_training.py --rounds 1 --models baby --impls numba,naive

What it measures, per model (the `euler train` default CPU config, and nanoGPT's "baby GPT":
6 layers, 6 heads, 384 channels, T=256, B=12, vocabulary 65) and per implementation:

- training tokens/s: a full optimizer step (euler_core.step.TrainStep, as `euler train` takes it:
  zero_grad, forward, backward, gradient norm and clipping, AdamW) on random tokens, float32,
  median over the measured steps and rounds;
- peak memory: the worker process's peak resident set size (VmHWM), so it includes the
  interpreter and libraries (PyTorch's are larger than NumPy's);
- cold start: wall time from launching the process to the end of its first training step, with an
  empty Numba cache (every kernel compiled); warm start: the same with the cache filled by the cold
  run. naive and torch compile nothing: their one start time is shown in both columns;
- per-op times for one step (numba against naive): each kernel call timed by a watcher of the
  dispatcher (euler_core.kernels.Kernel.watchers), median over the measured steps.

Every implementation runs in its own subprocess, one after the other (never two at once), rounds
interleaved so that background load spreads over all of them; the load average is recorded before
and after each run. PyTorch runs from its own virtual environment (--torch-python) as the reference
GPT-2 of bench/euler-torch-reference (euler_torch_reference.gpt2, float32 eager on the CPU): it is
never a NanoEuler dependency. Before timing, the numba step is
checked against the naive step on the same inputs (loss and gradient norm; validate before timing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T_START = time.time()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from euler_core.measure.workers import peak_rss_mb, reference_command, reference_env  # noqa: E402  (light: no GPU, no torch)
from euler_core.hostmem import GLIBC_TUNABLES, keep_freed_memory  # noqa: E402  (light: ctypes only)

BABY = {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "vocab_size": 65, "vocab_multiple": 1,
        "B": 12, "T": 256}


def model_settings(name: str) -> dict:
    """The model config plus B and T: 'default' is what `euler train` trains with no arguments."""
    if name == "baby":
        return dict(BABY)
    if name == "default":
        import importlib
        train = importlib.import_module("euler_core.train")  # the module (euler_core.train is also a function)
        cfg = train.TrainConfig()
        # the default corpus trains a BPE of DEFAULT_VOCAB tokens (bytes before that constant existed)
        vocab = cfg.vocab_size or getattr(train, "DEFAULT_VOCAB", 256)
        mc = train.model_config(cfg, vocab)
        return {**mc.to_dict(), "B": cfg.batch_size, "T": cfg.seq_len or mc.block_size}
    raise ValueError(f"unknown model {name!r}: default or baby")


# ---- the worker: one implementation, one process ---------------------------------------------
def _batch(rng, B, T, V):
    return rng.integers(0, V, (B, T)).astype("int32"), rng.integers(0, V, (B, T)).astype("int32")


def worker(args) -> dict:
    import numpy as np
    from euler_core.config import GPTConfig
    from euler_core.kernels import Kernel, Kernels
    from euler_core.model import GPT
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep

    keep_freed_memory()                  # as euler train does (euler_core.train.run_loop)
    s = json.loads(args.settings)
    B, T = s.pop("B"), s.pop("T")
    config = GPTConfig(**s)
    kernels = Kernels(args.backend, dtype="float32")
    model = GPT(config, kernels, dtype="float32", seed=0)
    step = TrainStep(model, AdamW(model), batch_size=B, seq_len=T, grad_clip=1.0)  # euler train's step
    per_op: dict = {}

    def timed(kernel, direction, call):  # a stopwatch on every kernel call (per-op times)
        t = time.perf_counter()
        result = call()
        key = f"{kernel.spec.name}.{direction}"
        per_op[key] = per_op.get(key, 0.0) + time.perf_counter() - t
        return result

    if args.per_op:
        Kernel.watchers.append(timed)
    rng = np.random.default_rng(0)
    step_times, op_steps, losses, first_step_end = [], [], [], None
    for i in range(1 + args.warmup + args.steps):
        x, y = _batch(rng, B, T, config.vocab_size)
        per_op.clear()
        t0 = time.perf_counter()
        loss = step.run([(x, y)], 1e-4).loss
        dt = time.perf_counter() - t0
        losses.append(loss)
        if i == 0:
            first_step_end = time.time()
        elif i > args.warmup:
            step_times.append(dt)
            op_steps.append(dict(per_op))
    ops = {k: statistics.median(d.get(k, 0.0) for d in op_steps) for k in (op_steps[0] if op_steps else {})}
    return {"impl": args.backend, "variants": {op: v.qualname for op, v in kernels.variants.items()},
            "t_start": T_START, "t_first_step_end": first_step_end, "step_times": step_times,
            "losses": losses, "per_op_s": ops, "maxrss_mb": peak_rss_mb(),
            "num_parameters": model.num_parameters}


def validate(settings: dict, selection: str) -> dict:
    """One step of `selection` against naive on the same inputs, in this process: loss and grad norm."""
    import numpy as np
    from euler_core.config import GPTConfig
    from euler_core.kernels import Kernels
    from euler_core.model import GPT

    s = dict(settings)
    B, T = s.pop("B"), s.pop("T")
    config = GPTConfig(**s)
    x, y = _batch(np.random.default_rng(1), B, T, config.vocab_size)
    out = {}
    for sel in ("naive", selection):
        model = GPT(config, Kernels(sel, dtype="float32"), dtype="float32", seed=0)
        model.zero_grad()
        _, loss = model.forward(x, y)
        model.backward()
        out[sel] = (loss, model.grad_norm(), model.flat_grads.copy())
    (l0, n0, g0), (l1, n1, g1) = out["naive"], out[selection]
    rel = float(np.abs(g1 - g0).max() / np.abs(g0).max())
    ok = abs(l1 - l0) <= 1e-4 * abs(l0) and abs(n1 - n0) <= 1e-3 * n0 and rel < 1e-3
    return {"selection": selection, "loss": [l0, l1], "grad_norm": [n0, n1], "max_grad_diff_rel": rel, "ok": ok}


# ---- the driver ------------------------------------------------------------------------------
IMPLS = {  # name -> (kind, --backend selection)
    "naive": ("euler", "naive"),
    "numba": ("euler", "numba"),
    "numba-blocked": ("euler", "numba,matmul=numba:blocked,attention=numba:rows"),
    "torch": ("torch", None),
}


def run_one(impl: str, model: str, settings: dict, args, env_extra: dict | None = None, steps=None) -> dict:
    kind, selection = IMPLS[impl]
    steps = args.steps if steps is None else steps
    reference = {}
    if kind == "torch":  # the PyTorch reference GPT-2, fp32 eager on the CPU (bench/euler-torch-reference)
        cmd = reference_command(args.torch_python, settings, settings["B"], settings["T"], compile=False,
                                warmup=args.warmup, steps=steps, device="cpu")
        reference = reference_env()
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--backend", selection,
               "--settings", json.dumps(settings), "--warmup", str(args.warmup), "--steps", str(steps)]
        if impl in ("naive", "numba") and steps > 0:
            cmd.append("--per-op")
    # The allocator setting `euler train` makes for itself (euler_core/hostmem.py), given to PyTorch
    # too, from outside, so that neither side gains by it alone.
    env = {**os.environ, "GLIBC_TUNABLES": GLIBC_TUNABLES, **reference, **(env_extra or {})}
    load_before = os.getloadavg()
    t_launch = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    load_after = os.getloadavg()
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} on {model} failed:\n{proc.stderr[-3000:]}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    rec.update(impl=impl, model=model, start_s=rec["t_first_step_end"] - t_launch,
               load_before=load_before, load_after=load_after, env=env_extra or {})
    print(f"  {model:8} {impl:14} start {rec['start_s']:6.2f} s  "
          + (f"step {statistics.median(rec['step_times']) * 1e3:8.1f} ms  " if rec["step_times"] else "")
          + f"rss {rec['maxrss_mb']:7.0f} MB  load {load_before[0]:.2f}->{load_after[0]:.2f}", flush=True)
    return rec


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import numpy
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "backends/numba", "bench"],
                                capture_output=True, text=True, cwd=ROOT).stdout.strip())
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": numpy.__version__, "numba": numba.__version__, "git_sha": sha, "git_dirty": dirty,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def summarise(records: list[dict], models: list[str], impls: list[str]) -> dict:
    out = {}
    for model in models:
        rows = {}
        for impl in impls:
            recs = [r for r in records if r["model"] == model and r["impl"] == impl]
            if not recs:
                continue
            steps = [t for r in recs if r.get("phase") != "cold" for t in r["step_times"]]
            tokens = recs[0]["tokens_per_step"]
            cold = [r["start_s"] for r in recs if r.get("phase") in ("cold", "only")]
            warm = [r["start_s"] for r in recs if r.get("phase") in ("warm", "only")]
            ops = {}
            for r in recs:
                for k, v in r.get("per_op_s", {}).items():
                    ops.setdefault(k, []).append(v)
            rows[impl] = {"tokens_per_s": tokens / statistics.median(steps) if steps else None,
                          "step_ms_median": statistics.median(steps) * 1e3 if steps else None,
                          "step_ms_min": min(steps) * 1e3 if steps else None,
                          "steps_measured": len(steps),
                          "peak_rss_mb": max(r["maxrss_mb"] for r in recs),
                          "cold_start_s": statistics.median(cold) if cold else None,
                          "warm_start_s": statistics.median(warm) if warm else None,
                          "per_op_ms": {k: statistics.median(v) * 1e3 for k, v in ops.items()}}
        out[model] = rows
    return out


def markdown(info: dict, summary: dict, settings: dict, validation: dict, args, records) -> str:
    L = ["# CPU training: numba vs naive vs PyTorch eager", "",
         f"Machine: {info['cpu']}, {info['cores']} cores; {info['platform']}; Python {info['python']}, "
         f"NumPy {info['numpy']}, Numba {info['numba']}, PyTorch {info.get('torch', '?')}.  ",
         f"Commit {info['git_sha'][:12]}{' (with uncommitted changes)' if info['git_dirty'] else ''}, {info['date']}.  ",
         f"Produced by `bench/cpu_training.py --rounds {args.rounds} --steps {args.steps} --warmup {args.warmup}`: "
         "every implementation in its own process, one at a time, rounds interleaved; float32; median over "
         "the measured steps of every round.", ""]
    loads = [r["load_before"][0] for r in records] + [r["load_after"][0] for r in records]
    L += [f"Load average (1 min) seen before/after the runs: min {min(loads):.2f}, median "
          f"{statistics.median(loads):.2f}, max {max(loads):.2f} (on {info['cores']} cores). The load average counts this "
          "benchmark's own threads too (up to 2 while a step runs); above that, other work on the machine "
          "(other engineers share it) overlapped the runs. Every run's load is in the JSON; rounds are "
          "interleaved so that such overlap falls on all implementations alike.", ""]
    for model, rows in summary.items():
        s = settings[model]
        torch_tps = rows.get("torch", {}).get("tokens_per_s")
        naive_tps = rows.get("naive", {}).get("tokens_per_s")
        L += [f"## {model}: {s['n_layer']} layers, {s['n_head']} heads, {s['n_embd']} channels, "
              f"vocabulary {s['vocab_size']}, B={s['B']}, T={s['T']} ({s['B'] * s['T']} tokens a step)", "",
              "| implementation | tokens/s (median step) | tokens/s (best step) | step (ms, median) | vs PyTorch | vs naive | peak RSS (MB) | cold start (s) | warm start (s) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for impl, r in rows.items():
            tps = r["tokens_per_s"]
            best = s["B"] * s["T"] / (r["step_ms_min"] / 1e3)
            vs_t = f"{tps / torch_tps:.2f}x" if torch_tps else "-"
            vs_n = f"{tps / naive_tps:.2f}x" if naive_tps else "-"
            L.append(f"| {impl} | {tps:,.0f} | {best:,.0f} | {r['step_ms_median']:,.1f} | {vs_t} | {vs_n} | "
                     f"{r['peak_rss_mb']:,.0f} | {r['cold_start_s']:.2f} | {r['warm_start_s']:.2f} |")
        if torch_tps and "numba" in rows:
            nb, tt = rows["numba"], rows["torch"]
            nb_best = s["B"] * s["T"] / (nb["step_ms_min"] / 1e3)
            tt_best = s["B"] * s["T"] / (tt["step_ms_min"] / 1e3)
            L += ["", f"numba against PyTorch eager: {nb['tokens_per_s'] / torch_tps:.2f}x at the median step, "
                  f"{nb_best / tt_best:.2f}x at each one's best step (the best step is the one least disturbed "
                  "by other work on the machine)."]
        val = validation.get(model)
        if val:
            L += ["", f"Validated before timing: one step of `{val['selection']}` against naive on the same "
                  f"inputs: loss {val['loss'][0]:.6f} vs {val['loss'][1]:.6f}, gradient norm "
                  f"{val['grad_norm'][0]:.6f} vs {val['grad_norm'][1]:.6f}, largest gradient difference "
                  f"{val['max_grad_diff_rel']:.1e} of the largest gradient: {'OK' if val['ok'] else 'MISMATCH'}."]
        if "naive" in rows and "numba" in rows:
            a, b = rows["naive"]["per_op_ms"], rows["numba"]["per_op_ms"]
            alt = rows.get("numba-blocked", {}).get("per_op_ms", {})
            L += ["", f"Per-op time in one training step ({model}), summed over the step's calls, ms:", "",
                  "| op | naive | numba | speedup |" + (" numba, blocked matmul + rows attention |" if alt else ""),
                  "|---|---:|---:|---:|" + ("---:|" if alt else "")]
            for k in sorted(a, key=lambda k: -a[k]):
                L.append(f"| {k} | {a[k]:,.1f} | {b.get(k, float('nan')):,.1f} | {a[k] / b[k]:.1f}x |"
                         + (f" {alt[k]:,.1f} |" if k in alt else (" - |" if alt else "")))
            ta, tb = sum(a.values()), sum(b.values())
            L.append(f"| **all ops** | {ta:,.1f} | {tb:,.1f} | {ta / tb:.1f}x |"
                     + (f" {sum(alt.values()):,.1f} |" if alt else ""))
            L.append(f"| step (median) | {rows['naive']['step_ms_median']:,.1f} | {rows['numba']['step_ms_median']:,.1f} | "
                     f"{rows['naive']['step_ms_median'] / rows['numba']['step_ms_median']:.1f}x |"
                     + (f" {rows['numba-blocked']['step_ms_median']:,.1f} |" if alt else ""))
        L.append("")
    L += ["Notes:",
          "- cold start: process launch to the end of the first training step, numba's cache empty "
          "(NUMBA_CACHE_DIR pointed at a new folder), so every kernel is compiled; warm start: the next "
          "process, same cache. naive and torch compile nothing: one start time in both columns.",
          "- peak RSS is the whole process (interpreter, NumPy/Numba or PyTorch libraries, activations).",
          "- the step includes the gradient norm and clipping, as `euler train` does, and so does PyTorch's "
          "(clip_grad_norm_).",
          "- per-op rows sum each op's calls over one step; the step is longer by the Python glue between ops.",
          ""]
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", default="numba", help=argparse.SUPPRESS)
    ap.add_argument("--settings", help=argparse.SUPPRESS)
    ap.add_argument("--per-op", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="default,baby")
    ap.add_argument("--impls", default="naive,numba,numba-blocked,torch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--torch-python", default=None, metavar="PYTHON",
                    help="an interpreter with torch and numpy installed, for the torch rows (without it: left out)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "cpu-training"))
    ap.add_argument("--render", metavar="JSON", help="only rewrite README.md next to JSON from its records")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.render:
        rep = json.loads(Path(args.render).read_text())
        run_args = argparse.Namespace(**rep["args"])
        text = markdown(rep["machine"], rep["summary"], rep["settings"], rep["validation"], run_args, rep["runs"])
        (Path(args.render).parent / "README.md").write_text(text)
        print(text)
        return 0

    models, impls = args.models.split(","), args.impls.split(",")
    if "torch" in impls and (args.torch_python is None or not Path(args.torch_python).exists()):
        where = "no --torch-python given" if args.torch_python is None else f"no interpreter at {args.torch_python}"
        print(f"{where}: leaving torch out (python3 -m venv venv-torch && venv-torch/bin/pip install "
              "torch==2.13.0 numpy, then --torch-python venv-torch/bin/python)")
        impls.remove("torch")
    info = machine_info()
    if "torch" in impls:
        info["torch"] = subprocess.run([args.torch_python, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True).stdout.strip()
    settings = {m: model_settings(m) for m in models}
    print(f"{info['cpu']}, {info['cores']} cores; load {os.getloadavg()}")
    validation = {}
    for m in models:
        validation[m] = validate(settings[m], "numba")
        print(f"validate {m}: {validation[m]}")
        if not validation[m]["ok"]:
            raise SystemExit(f"numba does not match naive on {m}: refusing to time it")
    records = []
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds}")
        for m in models:
            s = settings[m]
            for impl in impls:
                if IMPLS[impl][0] == "euler" and impl != "naive":
                    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
                        env = {"NUMBA_CACHE_DIR": cache}
                        cold = run_one(impl, m, s, args, env, steps=0)
                        cold["phase"] = "cold"
                        warm = run_one(impl, m, s, args, env)
                        warm["phase"] = "warm"
                        records += [cold, warm]
                else:
                    r = run_one(impl, m, s, args)
                    r["phase"] = "only"
                    records.append(r)
                for r in records:
                    r.setdefault("round", rnd)
                    r.setdefault("tokens_per_step", s["B"] * s["T"] if r["model"] == m else None)
    summary = summarise(records, models, impls)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": info, "args": vars(args), "settings": settings, "validation": validation,
              "summary": summary, "runs": records}
    (out / "cpu_training.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "README.md").write_text(markdown(info, summary, settings, validation, args, records))
    print(f"wrote {out / 'README.md'} and {out / 'cpu_training.json'}")
    print((out / "README.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
