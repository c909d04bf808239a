"""`euler bench quality`: does our training step train as PyTorch's does? The same model trained by
each system from identical initial weights on identical batches, and the loss curves compared.

    euler bench quality --backend triton --reference eager --preset gpt2 --batch-size 16 --steps 300 \\
                        --data ".h200/pydocs/pydocs_train_*.bin" --out reports/quality-h200
    euler bench quality --backend naive --backend numba --preset micro --tokenizer bytes --steps 30 --out runs/q

The driver (this process, which never touches the GPU) makes a *plan* first: for every step the B
windows of T+1 tokens (TokenSource.batch(step, B, T, seed): the batches `euler train` would draw)
and the learning rate (linear warmup, then cosine decay to a tenth: optim.learning_rate). Then each
system trains through the whole plan in a worker process of its own (workers.py), one after another:

- ours, per --backend: GPT(config, Kernels(selection), dtype, seed) and euler_core.step.TrainStep
  (AdamW with weight decay 0.1 on the 2-D weights, betas (0.9, 0.95), eps 1e-8, the gradient
  clipped to norm 1.0). The first one writes its initial parameters (float32, by name); every later
  system loads them, so all start from the same weights;
- the PyTorch reference, per --reference mode (eager, compile): euler_torch_reference.gpt2 with
  --init (those weights, mapped by name) and --plan, the same optimizer settings, bf16 autocast on
  the GPU (float32 on the CPU).

Every system records its loss and gradient norm at every step. Each later system is compared with
the first: the relative difference |loss_other - loss_first| / loss_other at every step, its mean
over the run (the number the training-quality goal bounds: under 1%), over the last tenth of the
steps, and its largest. --budget caps the first system's seconds of training; the plan is then cut to
the steps it finished, so every system runs exactly those.

Records (kinds "quality_curve", one per system, and "quality_compare", one per pair) go to
OUT/records.jsonl; render() makes OUT/quality.md and OUT/quality-loss.png (both curves, and the
relative difference per step) from the records alone (`euler bench report OUT --out OUT` re-makes them).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import records as rec
from .train import GRAD_CLIP, REFERENCE_MODES, WEIGHT_DECAY, _headline, _kernel_cache
from .workers import kernel_cache_env, launch, ours_command, reference_command, reference_env, reference_python

QUALITY_KINDS = ("quality_curve", "quality_compare")
PLAN_FILE = "plan.npz"
INIT_FILE = "init.npz"


@dataclass
class QualityConfig:
    backends: list[str] = field(default_factory=lambda: ["triton"])  # ours; the first is compared with the rest
    references: list[str] = field(default_factory=list)              # "eager", "compile"
    preset: str = "gpt2"
    batch_size: int = 16
    seq_len: int | None = None         # default: the preset's block size
    steps: int = 300
    lr: float = 6e-4
    warmup: int = 30                   # learning-rate warmup steps
    min_lr_frac: float = 0.1
    dtype: str | None = None           # default: bfloat16 for a selection on the GPU, float32 on the CPU
    graph: bool | None = None
    data: str | None = None            # glob of llm.c shards; None: the embedded default corpus
    tokenizer: str = "gpt2"            # tokenises the default corpus (and sets the vocabulary)
    torch_python: str | None = None
    seed: int = 0
    budget_s: float | None = None      # seconds of training for the first system (the plan is cut to them)
    kernel_cache: str | None = None    # DIR: each system's kernel caches in DIR/<system>, as bench train keeps them
    timeout_s: float = 1800.0          # per worker process


# ---- the worker side --------------------------------------------------------------------------------------
def worker_quality(spec: dict) -> dict:
    """Train one of our selections through the plan (see the module docstring)."""
    from euler_core.config import GPTConfig
    from euler_core.kernels import Kernels
    from euler_core.model import GPT
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep
    with np.load(spec["plan"], allow_pickle=False) as f:
        tokens, lrs = f["tokens"], f["lr"]
    config = GPTConfig.from_dict(spec["config"])
    model = GPT(config, Kernels(spec["selection"], dtype=spec["dtype"]), dtype=spec["dtype"], seed=spec["seed"])
    if spec["write_init"]:
        np.savez(spec["init"], **{k: v.astype(np.float32) for k, v in model.named_parameters().items()})
    else:
        with np.load(spec["init"], allow_pickle=False) as f:
            model.load_parameters({k: f[k] for k in f.files})
    optimizer = AdamW(model, weight_decay=WEIGHT_DECAY)
    B, T = tokens.shape[1], tokens.shape[2] - 1
    step = TrainStep(model, optimizer, batch_size=B, seq_len=T, accum=1, grad_clip=GRAD_CLIP, graph=spec["graph"])
    losses, norms, times = [], [], []
    start = time.perf_counter()
    for s in range(len(tokens)):
        x, y = np.ascontiguousarray(tokens[s, :, :-1]), np.ascontiguousarray(tokens[s, :, 1:])
        t0 = time.perf_counter()
        result = step.run([(x, y)], float(lrs[s]))
        losses.append(float(result.loss))
        norms.append(float(result.grad_norm))
        times.append(time.perf_counter() - t0)
        if spec["budget_s"] is not None and time.perf_counter() - start > spec["budget_s"]:
            break
    return {"losses": losses, "grad_norms": norms, "step_times": times[1:], "device": model.device,
            "variants": {op: v.qualname for op, v in model.kernels.variants.items()}}


# ---- the driver ---------------------------------------------------------------------------------------------
def make_plan(cfg: QualityConfig, log=print):
    """(model config, tokens (S,B,T+1) int32, lr (S,), what the data is) for the run."""
    from euler_core.config import preset
    from euler_core.data.loader import TokenSource
    from euler_core.optim import learning_rate
    if cfg.data:
        source = TokenSource.from_shards(cfg.data, "train")
        if cfg.preset.startswith("gpt2"):
            config = preset(cfg.preset)
        else:
            from euler_core.tokenizer import load_tokenizer
            config = preset(cfg.preset, vocab_size=load_tokenizer(cfg.tokenizer).n_vocab)
        about = f"{source.name} matching {cfg.data!r}, {len(source):,} tokens"
    else:
        from euler_core.corpus import default_corpus
        from euler_core.tokenizer import load_tokenizer
        tokenizer = load_tokenizer(cfg.tokenizer)
        text = default_corpus()
        ids = np.array(tokenizer.encode(text), dtype=np.int32)
        source = TokenSource([ids], "default corpus")
        config = preset(cfg.preset, vocab_size=tokenizer.n_vocab)
        about = (f"the embedded default corpus (the Python standard library's source), {len(text) / 1e6:.1f} MB, "
                 f"{len(ids):,} tokens with tokenizer {cfg.tokenizer}")
    T = cfg.seq_len or config.block_size
    if T > config.block_size:
        config = preset(cfg.preset, vocab_size=config.vocab_size, block_size=T)
    B = cfg.batch_size
    tokens = np.empty((cfg.steps, B, T + 1), dtype=np.int32)
    for s in range(cfg.steps):
        x, y = source.batch(s, B, T, cfg.seed)
        tokens[s, :, :-1], tokens[s, :, -1] = x, y[:, -1]
    lrs = np.array([learning_rate(s, cfg.lr, cfg.warmup, cfg.steps, cfg.min_lr_frac) for s in range(cfg.steps)])
    log(f"plan: {cfg.steps} steps of {B} x {T} tokens from {about}; lr {cfg.lr:g} (warmup {cfg.warmup}, cosine to "
        f"{cfg.min_lr_frac:g} of it)")
    return config, tokens, lrs, about


def relative_difference(losses: list[float], reference: list[float]) -> dict:
    """|losses - reference| / |reference| step by step over the steps both have: mean, last tenth, max."""
    n = min(len(losses), len(reference))
    a, b = np.asarray(losses[:n], dtype=np.float64), np.asarray(reference[:n], dtype=np.float64)
    rel = np.abs(a - b) / np.abs(b)
    tail = rel[-max(1, n // 10):]
    return {"steps_compared": n, "mean_rel_diff": float(rel.mean()), "last_tenth_mean_rel_diff": float(tail.mean()),
            "max_rel_diff": float(rel.max()), "max_rel_diff_step": int(rel.argmax()), "rel_diff": rel.tolist()}


def run(cfg: QualityConfig, out_dir, log=print, argv=None) -> list[dict]:
    """Plan, train every system through it, compare, write records and the report to `out_dir`."""
    if not cfg.backends:
        raise ValueError("bench quality: give at least one --backend (ours: it writes the initial weights)")
    bad = [m for m in cfg.references if m not in REFERENCE_MODES]
    if bad:
        raise ValueError(f"bench quality: unknown --reference {bad}; expected {', '.join(REFERENCE_MODES)}")
    if cfg.steps < 2 or cfg.batch_size < 1:
        raise ValueError(f"bench quality: need steps >= 2 and batch size >= 1, got {cfg.steps}, {cfg.batch_size}")
    python = reference_python(cfg.torch_python, cfg.references, "bench quality")
    writer = rec.RecordWriter(out_dir)
    started = rec.now_iso()
    config, tokens, lrs, about = make_plan(cfg, log)
    B, T = tokens.shape[1], tokens.shape[2] - 1
    probe = launch(ours_command({"role": "peaks", "selections": cfg.backends, "dtype": cfg.dtype,
                                 "reference": False, "measure": False}), timeout_s=cfg.timeout_s)
    if probe.result is None:
        raise ValueError(f"bench quality: the selections could not be resolved: {_headline(probe.error)}")
    systems, envs = probe.result["systems"], probe.result["environments"]
    device = "cuda" if "cuda" in envs else "cpu"
    run_id = rec.new_run_id(envs[device]["device_key"])
    common = {"schema": rec.SCHEMA, "run_id": run_id, "preset": cfg.preset, "config": config.to_dict(), "B": B, "T": T,
              "lr": cfg.lr, "warmup": cfg.warmup, "min_lr_frac": cfg.min_lr_frac, "data": about, "seed": cfg.seed}
    curves = []
    with tempfile.TemporaryDirectory(prefix="euler-quality-") as tmp:
        plan, init = str(Path(tmp) / PLAN_FILE), str(Path(tmp) / INIT_FILE)
        np.savez(plan, tokens=tokens, lr=lrs)
        for i, selection in enumerate(cfg.backends):
            dev = systems[selection]["device"]
            dtype = cfg.dtype or ("bfloat16" if dev == "cuda" else "float32")
            spec = {"role": "quality", "selection": selection, "config": config.to_dict(), "dtype": dtype,
                    "graph": cfg.graph, "seed": cfg.seed, "plan": plan, "init": init, "write_init": i == 0,
                    "budget_s": cfg.budget_s if i == 0 else None}
            system = f"nanoeuler {selection}" + (" (no graph)" if cfg.graph is False else "")
            log(f"{system}: training {len(tokens)} steps ({dtype})")
            o = launch(ours_command(spec), _cache_env(cfg, system), timeout_s=cfg.timeout_s)
            curve = _curve(writer, {**common, **envs[dev]}, system, "nanoeuler", selection, None, dtype, cfg.graph, o, log)
            curves.append(curve)
            if i == 0 and curve["status"] != "ok":
                break  # no initial weights for the others
            if i == 0 and len(curve["losses"]) < len(tokens):  # --budget: every system runs the steps it finished
                tokens, lrs = tokens[:len(curve["losses"])], lrs[:len(curve["losses"])]
                np.savez(plan, tokens=tokens, lr=lrs)
                log(f"{system}: {len(tokens)} steps within the budget; the plan is cut to them")
        if curves[0]["status"] == "ok":
            for mode in cfg.references:
                system = f"torch {mode}"
                dtype = "bfloat16 autocast" if device == "cuda" else "float32"
                log(f"{system}: training {len(tokens)} steps ({dtype})")
                cmd = reference_command(python, config.to_dict(), B, T, compile=mode == "compile", init=init, plan=plan,
                                        seed=cfg.seed, device=device)
                o = launch(cmd, {**_cache_env(cfg, system), **reference_env()}, timeout_s=cfg.timeout_s)
                curves.append(_curve(writer, {**common, **envs[device]}, system, "torch", None, mode, dtype, None, o, log))
    first = curves[0]
    for other in curves[1:]:
        if first["status"] != "ok" or other["status"] != "ok":
            continue
        d = relative_difference(first["losses"], other["losses"])
        writer.write({**common, **envs[device], "kind": "quality_compare", "time": rec.now_iso(), "system": first["system"],
                      "against": other["system"], **d, "final_loss": first["losses"][d["steps_compared"] - 1],
                      "final_loss_against": other["losses"][d["steps_compared"] - 1]})
        log(f"{first['system']} against {other['system']}: mean relative difference of the losses "
            f"{100 * d['mean_rel_diff']:.3g}% over {d['steps_compared']} steps (last tenth "
            f"{100 * d['last_tenth_mean_rel_diff']:.3g}%, largest {100 * d['max_rel_diff']:.3g}% at step "
            f"{d['max_rel_diff_step']})")
    writer.write_run({"schema": rec.SCHEMA, "run_id": run_id, "kind": "quality_run", "started": started,
                      "finished": rec.now_iso(), "argv": argv or sys.argv, "config": asdict(cfg),
                      "environments": envs, "systems": systems})
    writer.close()
    render(writer.records, out_dir, log=log)
    return writer.records


def _cache_env(cfg: QualityConfig, system: str) -> dict:
    """The kernel-cache variables for `system` with --kernel-cache (bench train's folders, so a
    quality run after a bench train starts warm); none without (the caches the environment names)."""
    if cfg.kernel_cache is None:
        return {}
    with _kernel_cache(cfg.kernel_cache, system) as (folder, _):
        return kernel_cache_env(folder)


def _curve(writer, base: dict, system: str, impl: str, selection, mode, dtype: str, graph, o, log) -> dict:
    r = {**base, "kind": "quality_curve", "time": rec.now_iso(), "loadavg": rec.loadavg(), "system": system, "impl": impl,
         "selection": selection, "reference_mode": mode, "dtype": dtype, "graph": graph}
    if o.result is None:
        r.update(status="failed", message=o.error, losses=[], grad_norms=[])
        log(f"{system}: FAILED ({_headline(o.error)})")
    else:
        res = o.result
        times = res.get("step_times") or [float("nan")]
        r.update(status="ok", message="", losses=res["losses"], grad_norms=res["grad_norms"],
                 steps=len(res["losses"]), step_s_p50=statistics.median(times), variants=res.get("variants"),
                 version=res.get("version"))
        log(f"{system}: loss {res['losses'][0]:.4f} -> {res['losses'][-1]:.4f} in {len(res['losses'])} steps "
            f"({1e3 * r['step_s_p50']:.1f} ms a step)")
    writer.write(r)
    return r


# ---- the report --------------------------------------------------------------------------------------------
def markdown(records: list[dict]) -> str:
    curves = [r for r in records if r.get("kind") == "quality_curve"]
    compares = [r for r in records if r.get("kind") == "quality_compare"]
    head = curves[0]
    c = head["config"]
    sha = head.get("git_sha")
    L = ["# Training quality: ours against the reference, from the same weights on the same batches", "",
         f"Run {head['run_id']} on {head.get('device', '?')}, {head['time']}; commit {sha[:12] if sha else 'unknown'}.",
         f"Model: preset `{head['preset']}` ({c['n_layer']} layers, {c['n_head']} heads, {c['n_embd']} channels, "
         f"vocabulary {c['vocab_size']}), B={head['B']}, T={head['T']}. Data: {head['data']}. Learning rate "
         f"{head['lr']:g}, warmup {head['warmup']} steps, cosine to {head['min_lr_frac']:g} of it; AdamW (0.9, 0.95), "
         "eps 1e-8, weight decay 0.1 on 2-D weights, gradient clipped to norm 1.0.", "",
         "| system | dtype | steps | first loss | last loss | min loss | ms a step |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in curves:
        if r["status"] != "ok":
            L.append(f"| {r['system']} | {r['dtype']} | failed: {_headline(r['message'])[:120]} | | | | |")
            continue
        L.append(f"| {r['system']} | {r['dtype']} | {r['steps']} | {r['losses'][0]:.4f} | {r['losses'][-1]:.4f} | "
                 f"{min(r['losses']):.4f} | {1e3 * r['step_s_p50']:.1f} |")
    if compares:
        L += ["", "Relative difference of the losses at each step, |ours - reference| / reference:", "",
              "| system | against | steps | mean | last tenth | largest (step) | final losses |",
              "|---|---|---:|---:|---:|---:|---|"]
        for r in compares:
            L.append(f"| {r['system']} | {r['against']} | {r['steps_compared']} | {100 * r['mean_rel_diff']:.3g}% | "
                     f"{100 * r['last_tenth_mean_rel_diff']:.3g}% | {100 * r['max_rel_diff']:.3g}% ({r['max_rel_diff_step']}) "
                     f"| {r['final_loss']:.4f} vs {r['final_loss_against']:.4f} |")
    return "\n".join(L) + "\n"


def plot_losses(records: list[dict], path: Path) -> bool:
    curves = [r for r in records if r.get("kind") == "quality_curve" and r.get("status") == "ok"]
    if not curves:
        return False
    compares = [r for r in records if r.get("kind") == "quality_compare"]
    from .report import _pyplot
    plt = _pyplot()
    fig, axes = plt.subplots(2 if compares else 1, 1, figsize=(8, 6 if compares else 4), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1]} if compares else None)
    ax = axes[0][0]
    for r in curves:
        ax.plot(range(len(r["losses"])), r["losses"], linewidth=1.0, label=r["system"] + f" ({r['dtype']})")
    ax.set_ylabel("training loss (nats)")
    head = curves[0]
    ax.set_title(f"{head['preset']}, B={head['B']}, T={head['T']}: the same weights, the same batches", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if compares:
        bx = axes[1][0]
        for r in compares:
            bx.plot(range(len(r["rel_diff"])), [100 * v for v in r["rel_diff"]], linewidth=0.8,
                    label=f"vs {r['against']}: mean {100 * r['mean_rel_diff']:.3g}%")
        bx.set_ylabel("|difference| (%)")
        bx.grid(alpha=0.3)
        bx.legend(fontsize=8)
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def render(records: list[dict], out_dir, plots: bool = True, log=print) -> list[Path]:
    """quality.md (and quality-loss.png) in out_dir from the records."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "quality.md"]
    files[0].write_text(markdown(records), encoding="utf-8")
    if plots and plot_losses(records, out / "quality-loss.png"):
        files.append(out / "quality-loss.png")
    log("wrote " + ", ".join(str(f) for f in files))
    return files
