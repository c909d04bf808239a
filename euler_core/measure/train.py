"""`euler bench train`: whole training steps, per backend selection and batch size, beside PyTorch.

    euler bench train --backend triton --batch-sizes 16,32,64 --reference eager,compile --out reports/train-h200
    euler bench train --backend naive --backend numba --preset micro --batch-sizes 2,4 --out runs/train-cpu

What it measures, each in a worker process of its own (workers.py says why), one at a time:

- the device's ceilings first (peaks.py: the bf16 dense matmul on a GPU, float32's on the CPU);
- per selection (each --backend) and batch size B: `--steps` training steps after the first one and
  `--warmup` more, on random tokens, through euler_core.step.TrainStep (the step `euler train`
  takes: forward and backward of every micro-batch, the gradient norm, clipping, AdamW; a CUDA graph
  where the model is on the GPU, unless --no-graph; a step that cannot be captured is recorded as
  failed, naming the op, and measured again without the graph). Every step's loss is read, as a loop
  that logs every step does, and the way `euler train` reads it: with captured graphs step k's result
  after step k+1 is queued (euler_core.train.overlaps), so a step is the interval between two reads;
  the PyTorch reference reads its loss the same way. Tokens/s is B*T*accum over the median step; MFU is that times the
  training FLOPs per token (flops_per_token) over the measured matmul peak;
- peak memory: on the GPU, the bytes CuPy's pools hold (the default pool and the private pools of
  the step's CUDA graphs; the most seen at the end of a step), the device's used memory from
  cudaMemGetInfo (the same moments; it counts the CUDA context and every library's memory too), and
  nvidia-smi's used memory polled every 0.2 s by the driver while the worker ran; on the CPU, the
  worker's peak resident set;
- time to first step: from starting the worker process to the end of its first step, split into the
  interpreter's start, imports and building the model, and the step itself (kernels compiled there).
  Every system gets a kernel-cache folder of its own (TRITON_CACHE_DIR, NUMBA_CACHE_DIR,
  CUPY_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR): its first process finds it empty ("cold"), later ones
  warm. At the first batch size a process runs only the first step cold, then the timed process
  starts warm. The folders are temporary, or --kernel-cache DIR/<system> (kept: then a later command
  can start warm, and a folder already filled makes the first process warm);
- where one step's time goes (--profile, at the first batch size): the same selection without the
  graph, every kernel call timed with CUDA events (profile.py), the median over 3 steps after 1;
- the PyTorch reference (--reference eager,compile): euler_torch_reference.gpt2, the same model and
  optimizer in bf16 autocast with SDPA and fused AdamW, on the same card at the same batch sizes,
  run by --torch-python (an environment with torch; NanoEuler never imports it).

Records (records.py's style: one JSON object per measurement, each carrying the environment) go to
OUT/records.jsonl, kinds "peak", "train", "first_step", "op_profile"; OUT/run.json holds the run;
render() makes OUT/train.md and OUT/train-tokens-per-s.png from the records alone
(`euler bench report OUT --out OUT` re-makes them).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import records as rec
from .workers import (Outcome, kernel_cache_env, launch, ours_command, peak_rss_mb, reference_command,
                      reference_env, reference_python)

TRAIN_KINDS = ("train", "first_step", "op_profile")
LR = 1e-4                 # a small constant rate: the benchmark times steps, it does not train
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
REFERENCE_MODES = ("eager", "compile")
PROFILE_WARMUP, PROFILE_STEPS = 1, 3   # the eager steps of the breakdown: a few are enough for its medians
GRAPH_REFUSED = "cannot be captured as a CUDA graph"  # in euler_core.graph.GraphCaptureError's message


@dataclass
class TrainBenchConfig:
    backends: list[str] = field(default_factory=lambda: ["triton"])  # our selections, one system each
    batch_sizes: list[int] = field(default_factory=lambda: [16, 32, 64])
    preset: str = "gpt2"
    seq_len: int | None = None          # default: the preset's block size
    dtype: str | None = None            # default: bfloat16 for a selection on the GPU, float32 on the CPU
    accum: int = 1                      # micro-batches per step
    graph: bool | None = None           # None: TrainStep's default (a CUDA graph where it can)
    recompute: bool = False             # our models remake the GELU output in the backward (GPT(recompute=))
    warmup: int = 3
    steps: int = 10
    cold: bool = True                   # a first step with cold kernel caches, at the first batch size
    profile: bool = True                # the per-op breakdown, at the first batch size
    references: list[str] = field(default_factory=list)  # "eager", "compile"
    torch_python: str | None = None
    seed: int = 0
    peak_size: str = "large"            # peaks.py's sizes ("small" for quick runs)
    kernel_cache: str | None = None     # keep each system's kernel caches in DIR/<system> (default: a temporary folder)
    timeout_s: float = 600.0            # per worker process


def flops_per_token(config, T: int) -> float:
    """Training FLOPs per token, 6N + 12*L*C*T (the estimate of PaLM's appendix B that nanoGPT's MFU
    uses): 2 per weight that multiplies in the forward, 4 in the backward, over the N parameters
    other than the position embedding (a lookup, no multiply; the tied wte counts once, as the
    classifier), plus attention's scores and weighted sum, 2*2*T*C per layer and token forward and
    twice that backward, over the whole T x T square (causality's half is not subtracted)."""
    from euler_core.model import parameter_layout
    n = sum(int(np.prod(shape)) for name, shape in parameter_layout(config) if name != "wpe.weight")
    return 6.0 * n + 12.0 * config.n_layer * config.n_embd * T


def mfu(tokens_per_s: float, flops_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the achieved training FLOP/s as a fraction of the measured peak."""
    return tokens_per_s * flops_token / peak_flops


# ---- the worker side (run by workers.py in a process of its own) ----------------------------------------
class _DeviceMemory:
    """High-water marks sampled at the end of each step (see the module docstring)."""

    def __init__(self, device: str):
        self.device = device
        self.pool_max = 0
        self.used_max = 0
        if device == "cuda":
            import cupy
            self.cupy = cupy

    def sample(self, step) -> None:
        if self.device == "cuda":  # CuPy's default pool, and the private pools of the step's CUDA graphs
            pools = [self.cupy.get_default_memory_pool()] + [g.pool for g in step.graphs or ()]
            self.pool_max = max(self.pool_max, sum(pool.total_bytes() for pool in pools))
            free, total = self.cupy.cuda.runtime.memGetInfo()
            self.used_max = max(self.used_max, total - free)

    def result(self) -> dict:
        out = {"maxrss_mb": peak_rss_mb()}
        if self.device == "cuda":
            out.update(pool_bytes_max=self.pool_max, device_used_max=self.used_max)
        return out


def _build(spec: dict, graph):
    from euler_core.config import GPTConfig
    from euler_core.kernels import Kernels
    from euler_core.model import GPT
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep
    config = GPTConfig.from_dict(spec["config"])
    kernels = Kernels(spec["selection"], dtype=spec["dtype"])
    model = GPT(config, kernels, dtype=spec["dtype"], seed=spec["seed"], recompute=spec["recompute"])
    optimizer = AdamW(model, weight_decay=WEIGHT_DECAY)
    step = TrainStep(model, optimizer, batch_size=spec["B"], seq_len=spec["T"], accum=spec["accum"],
                     grad_clip=GRAD_CLIP, graph=graph)
    variants = {op: v.qualname for op, v in kernels.variants.items()}
    return model, step, variants


def _batches(rng, spec: dict, vocab: int) -> list:
    """`accum` (inputs, targets) pairs of random tokens, (B,T) int32 each, on the host."""
    shape = (spec["B"], spec["T"])
    return [(rng.integers(0, vocab, shape, dtype=np.int32), rng.integers(0, vocab, shape, dtype=np.int32))
            for _ in range(spec["accum"])]


def worker_step(spec: dict) -> dict:
    """The first step, then (unless first_step_only) warmup + steps timed ones of one selection at one B."""
    model, step, variants = _build(spec, spec["graph"])
    vocab = model.config.vocab_size
    rng = np.random.default_rng(spec["seed"])
    memory = _DeviceMemory(model.device)
    batches = _batches(rng, spec, vocab)
    t_first = time.time()
    result = step.run(batches, LR)
    losses = [float(result.loss)]                     # waits for the device
    t_first_end = time.time()
    memory.sample(step)
    out = {"variants": variants, "device": model.device, "num_parameters": model.num_parameters,
           "t_first_step_start": t_first, "t_first_step_end": t_first_end}
    times = []
    if not spec["first_step_only"]:
        from euler_core.train import overlaps
        # as euler train's loop runs them (euler_core.train.overlaps): with captured graphs step i+1 is
        # queued before step i's result is read, so a step's time is the interval between two reads
        queued, read_at = [], time.perf_counter()

        def read(index, result):
            nonlocal read_at
            losses.append(float(result.loss))                   # waits for that step
            now = time.perf_counter()
            if index >= spec["warmup"]:
                times.append(now - read_at)
            read_at = now
            memory.sample(step)
            out["grad_norm"] = float(result.grad_norm)

        for i in range(spec["warmup"] + spec["steps"]):
            queued.append((i, step.run(_batches(rng, spec, vocab), LR)))
            if len(queued) > (1 if overlaps(step) else 0):
                read(*queued.pop(0))
        for item in queued:
            read(*item)
    return {**out, "losses": losses, "step_times": times, **memory.result()}


def worker_profile(spec: dict) -> dict:
    """1 + warmup + steps eager steps, every kernel call timed; the summary over the last `steps`."""
    from .profile import StepProfile
    model, step, variants = _build(spec, False)
    rng = np.random.default_rng(spec["seed"])
    profile = StepProfile(skip=1 + spec["warmup"])
    with profile.active():  # a step ends where TrainStep.run returns
        for _ in range(1 + spec["warmup"] + spec["steps"]):
            float(step.run(_batches(rng, spec, model.config.vocab_size), LR).loss)
    return {"variants": variants, "profile": profile.summary()}


# ---- the driver ----------------------------------------------------------------------------------------
def _percentiles(times: list[float]) -> dict:
    if not times:
        return {"step_s_p20": None, "step_s_p50": None, "step_s_p80": None, "step_s_mean": None}
    p20, p50, p80 = (float(np.percentile(times, q)) for q in (20, 50, 80))
    return {"step_s_p20": p20, "step_s_p50": p50, "step_s_p80": p80, "step_s_mean": statistics.fmean(times)}


def _headline(error: str) -> str:
    """The line of a worker's error that says what went wrong (its last non-empty line), then the rest."""
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run(cfg: TrainBenchConfig, out_dir, log=print, argv=None) -> list[dict]:
    """Measure every system at every batch size; write records, run.json and the report to `out_dir`."""
    from euler_core.config import preset
    if not cfg.backends and not cfg.references:
        raise ValueError("bench train: nothing to measure (give --backend and/or --reference)")
    bad = [m for m in cfg.references if m not in REFERENCE_MODES]
    if bad:
        raise ValueError(f"bench train: unknown --reference {bad}; expected {', '.join(REFERENCE_MODES)}")
    if not cfg.batch_sizes or min(cfg.batch_sizes) < 1:
        raise ValueError(f"bench train: batch sizes must be >= 1, got {cfg.batch_sizes}")
    config = preset(cfg.preset)
    T = cfg.seq_len or config.block_size
    if T > config.block_size:
        config = preset(cfg.preset, block_size=T)
    python = reference_python(cfg.torch_python, cfg.references, "bench train")

    writer = rec.RecordWriter(out_dir)
    started, load_before = rec.now_iso(), rec.loadavg()
    probe = launch(ours_command({"role": "peaks", "selections": cfg.backends, "dtype": cfg.dtype,
                                 "reference": bool(cfg.references), "peak_size": cfg.peak_size}), timeout_s=cfg.timeout_s)
    if probe.result is None:  # most often a selection this machine cannot run: say why, as euler train would
        raise ValueError(f"bench train: the selections could not be resolved, or the peaks measured: "
                         f"{_headline(probe.error)}")
    systems, peaks, envs = (probe.result[k] for k in ("systems", "peaks", "environments"))
    device = "cuda" if "cuda" in peaks else "cpu"
    if cfg.references and device not in peaks:
        raise RuntimeError(f"bench train: no peak measured on {device}")
    env = envs[device]
    run_id = rec.new_run_id(env["device_key"])
    flops_token = flops_per_token(config, T)

    def base(kind: str, dev: str) -> dict:
        return {"schema": rec.SCHEMA, "run_id": run_id, "kind": kind, "time": rec.now_iso(),
                "loadavg": rec.loadavg(), **envs.get(dev, env)}

    for dev, p in peaks.items():
        writer.write({**base("peak", dev), **p})
        log(f"peak {dev}: matmul {p['peak_flops'] / 1e12:.4g} TFLOP/s ({p['matmul']['dtype']}, n={p['matmul']['n']}), "
            f"copy {p['peak_bw'] / 1e9:.4g} GB/s")
    model_fields = {"preset": cfg.preset, "config": config.to_dict(), "T": T, "accum": cfg.accum,
                    "flops_per_token": flops_token}
    interrupted = False
    try:
        for selection in cfg.backends:
            sys_device = systems[selection]["device"]
            dtype = cfg.dtype or ("bfloat16" if sys_device == "cuda" else "float32")
            system = (f"nanoeuler {selection}" + (" (no graph)" if cfg.graph is False else "")
                      + (" (recompute)" if cfg.recompute else ""))
            common = {"system": system, "impl": "nanoeuler", "selection": selection, "dtype": dtype,
                      "graph": cfg.graph, "recompute": cfg.recompute, **model_fields}
            for note in systems[selection]["notes"]:
                log(f"{system}: note: {note}")
            with _kernel_cache(cfg.kernel_cache, system) as (cache, state):
                cache_env = kernel_cache_env(cache)
                for i, B in enumerate(cfg.batch_sizes):
                    spec = {"selection": selection, "config": config.to_dict(), "B": B, "T": T,
                            "accum": cfg.accum, "dtype": dtype, "graph": cfg.graph, "seed": cfg.seed,
                            "recompute": cfg.recompute, "warmup": cfg.warmup, "steps": cfg.steps}
                    if i == 0 and cfg.cold and state == "cold":
                        o = launch(ours_command({**spec, "role": "step", "first_step_only": True}), cache_env,
                                   cfg.timeout_s, watch_gpu=sys_device == "cuda")
                        _first_step(writer, base("first_step", sys_device), common, B, state, o, log)
                        state = "warm"
                    o = launch(ours_command({**spec, "role": "step", "first_step_only": False}), cache_env,
                               cfg.timeout_s, watch_gpu=sys_device == "cuda")
                    _first_step(writer, base("first_step", sys_device), common, B, state, o, log)
                    state = "warm"
                    _train_record(writer, base("train", sys_device), common, B, o, peaks[sys_device], log,
                                  variants=(o.result or {}).get("variants", systems[selection]["variants"]))
                    if o.result is None and GRAPH_REFUSED in (o.error or "") and cfg.graph is not False:
                        # recorded as failed above, with the op that broke the capture; measure it eagerly too
                        log(f"{system} B={B}: the step cannot be captured as a CUDA graph; measuring it without")
                        eager = {**common, "system": f"{system} (no graph)", "graph": False}
                        o = launch(ours_command({**spec, "graph": False, "role": "step", "first_step_only": False}),
                                   cache_env, cfg.timeout_s, watch_gpu=sys_device == "cuda")
                        _first_step(writer, base("first_step", sys_device), eager, B, state, o, log)
                        _train_record(writer, base("train", sys_device), eager, B, o, peaks[sys_device], log,
                                      variants=(o.result or {}).get("variants", systems[selection]["variants"]))
                if cfg.profile:
                    B = cfg.batch_sizes[0]
                    short = {"warmup": min(cfg.warmup, PROFILE_WARMUP), "steps": min(cfg.steps, PROFILE_STEPS)}
                    o = launch(ours_command({**spec, **short, "B": B, "role": "profile", "first_step_only": False}),
                               cache_env, cfg.timeout_s)
                    _profile_records(writer, base("op_profile", sys_device), common, B, o, log)
        for mode in cfg.references:
            system = f"torch {mode}"
            common = {"system": system, "impl": "torch", "selection": None, "reference_mode": mode,
                      "dtype": "bfloat16 autocast" if device == "cuda" else "float32", "graph": None, **model_fields}
            with _kernel_cache(cfg.kernel_cache, system) as (cache, state):
                cache_env = {**kernel_cache_env(cache), **reference_env()}
                for B in cfg.batch_sizes:
                    cmd = reference_command(python, config.to_dict(), B, T, compile=mode == "compile",
                                            warmup=cfg.warmup, steps=cfg.steps, seed=cfg.seed, device=device)
                    o = launch(cmd, cache_env, cfg.timeout_s, watch_gpu=device == "cuda")
                    _first_step(writer, base("first_step", device), common, B, "none" if mode == "eager" else state, o, log)
                    state = "warm"
                    _train_record(writer, base("train", device), common, B, o, peaks[device], log)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from `timeout` (cli.py): keep what was measured
        interrupted = True
        log("interrupted: writing the records measured so far")
    meta = {"schema": rec.SCHEMA, "run_id": run_id, "kind": "train_run", "started": started,
            "finished": rec.now_iso(), "loadavg_before": load_before, "loadavg_after": rec.loadavg(),
            "argv": argv or sys.argv, "config": asdict(cfg), "environments": envs, "peaks": peaks,
            "systems": systems, "interrupted": interrupted}
    writer.write_run(meta)
    writer.close()
    records = writer.records
    render(records, out_dir, plots=True, meta=meta, log=log)
    if interrupted:
        raise KeyboardInterrupt("the benchmark was interrupted; its records so far are written")
    return records


@contextlib.contextmanager
def _kernel_cache(base: str | None, system: str):
    """(the folder of `system`'s kernel caches, "cold" if it is empty else "warm"): a temporary folder,
    or base/<system as a file name> kept after the run (another command can then start warm)."""
    if base is None:
        with tempfile.TemporaryDirectory(prefix="euler-kernel-cache-") as folder:
            yield Path(folder), "cold"
        return
    folder = Path(base) / "".join(c if c.isalnum() or c in "-_." else "-" for c in system)
    yield folder, "warm" if folder.exists() and any(folder.rglob("*")) else "cold"


def _first_step(writer, base: dict, common: dict, B: int, cache: str, o: Outcome, log) -> None:
    r = {**base, **common, "B": B, "cache": cache}
    if o.result is None:
        writer.write({**r, "status": "failed", "message": o.error})
        log(f"{common['system']} B={B}: FAILED ({_headline(o.error)})")
        return
    res = o.result
    end, start = res["t_first_step_end"], res["t_start"]
    r.update(status="ok", message="", seconds=end - o.t_launch, startup_s=start - o.t_launch)
    if "t_first_step_start" in res:   # ours: imports + build, then the step
        r.update(build_s=res["t_first_step_start"] - start, step_s=end - res["t_first_step_start"])
    else:                             # the reference: one span from its first line
        r.update(build_and_step_s=end - start)
    writer.write(r)
    log(f"{common['system']} B={B}: first step {r['seconds']:.2f} s after launch ({cache} kernel cache)")


def _train_record(writer, base: dict, common: dict, B: int, o: Outcome, peak: dict, log, variants=None) -> None:
    tokens = B * common["T"] * common["accum"]
    r = {**base, **common, "B": B, "tokens_per_step": tokens, "variants": variants,
         "peak_flops": peak["peak_flops"], "peak_dtype": peak["matmul"]["dtype"], "nvidia_smi_mib": o.nvidia_smi_mib}
    if o.result is None:
        writer.write({**r, "status": "failed", "message": o.error})
        return
    res = o.result
    losses = res.get("losses", [])
    times = res.get("step_times", [])
    r.update(_percentiles(times), steps=len(times), losses=losses, first_loss=losses[0] if losses else None,
             maxrss_mb=res.get("maxrss_mb"), num_parameters=res.get("num_parameters"))
    for key in ("pool_bytes_max", "device_used_max", "max_memory_reserved", "max_memory_allocated", "version",
                "device_name", "cudnn"):
        if key in res:
            r[key] = res[key]
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None or not times:
        why = f"the loss is {losses[bad]} at step {bad}" if bad is not None else "no step was timed"
        writer.write({**r, "status": "failed", "message": why})
        log(f"{common['system']} B={B}: FAILED ({why})")
        return
    r["tokens_per_s"] = tokens / r["step_s_p50"]
    r["mfu"] = mfu(r["tokens_per_s"], common["flops_per_token"], peak["peak_flops"])
    writer.write({**r, "status": "ok", "message": ""})
    log(f"{common['system']} B={B}: {r['tokens_per_s']:,.0f} tokens/s (step {r['step_s_p50'] * 1e3:.1f} ms "
        f"[{r['step_s_p20'] * 1e3:.1f}, {r['step_s_p80'] * 1e3:.1f}]), MFU {100 * r['mfu']:.1f}%, "
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


def _profile_records(writer, base: dict, common: dict, B: int, o: Outcome, log) -> None:
    r = {**base, **common, "B": B, "graph": False}
    if o.result is None:
        writer.write({**r, "op": None, "direction": None, "status": "failed", "message": o.error})
        log(f"{common['system']} profile: FAILED ({_headline(o.error)})")
        return
    summary = o.result["profile"]
    totals = {k: summary.get(k) for k in ("steps", "wall_s", "kernels_s", "rest_s")}
    for row in summary["rows"]:
        writer.write({**r, **row, "status": "ok", "message": "", "profile": totals})
    log(f"{common['system']} profile B={B}: {len(summary['rows'])} op rows, eager step "
        f"{(summary['wall_s'] or 0) * 1e3:.1f} ms")


# ---- the report --------------------------------------------------------------------------------------
def _ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:,.1f}"


def _gib(b) -> str:
    return "-" if b is None else f"{b / 2**30:,.2f} GiB"


def _memory(r: dict) -> tuple[str, str, str]:
    """(pool: CuPy's held bytes or PyTorch's reserved, the device's used memory, nvidia-smi) as text;
    the peak resident set on the CPU."""
    if r.get("device_kind") == "cpu":
        return (f"{r['maxrss_mb']:,.0f} MB RSS" if r.get("maxrss_mb") else "-"), "-", "-"
    pool = r.get("pool_bytes_max", r.get("max_memory_reserved"))
    smi = r.get("nvidia_smi_mib")
    return _gib(pool), _gib(r.get("device_used_max")), ("-" if smi is None else f"{smi:,.0f} MiB")


def markdown(records: list[dict], meta: dict | None = None) -> str:
    train = [r for r in records if r.get("kind") == "train"]
    firsts = [r for r in records if r.get("kind") == "first_step"]
    prof = [r for r in records if r.get("kind") == "op_profile"]
    peaks = [r for r in records if r.get("kind") == "peak"]
    head = (train or firsts or prof or peaks or [{}])[0]
    L = [f"# Training steps on {head.get('device', '?')}", ""]
    sha = head.get("git_sha")
    L.append(f"Run {head.get('run_id', '?')}, {head.get('time', '?')}; commit {sha[:12] if sha else 'unknown'}"
             + (" (with uncommitted changes)" if head.get("git_dirty") else "") + f"; {head.get('driver') or head.get('os', '')}.")
    versions = head.get("versions") or {}
    L.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".")
    if head.get("preset"):
        c = head["config"]
        L += ["", f"Model: preset `{head['preset']}` ({c['n_layer']} layers, {c['n_head']} heads, {c['n_embd']} "
              f"channels, vocabulary {c['vocab_size']}), T={head['T']}, {head['accum']} micro-batch(es) a step; "
              f"{head['flops_per_token'] / 1e6:,.1f} MFLOP per token (6N + 12LCT)."]
    for p in peaks:
        L.append(f"Peak ({p.get('device_kind')}, measured in this run): dense matmul {p['peak_flops'] / 1e12:,.4g} TFLOP/s "
                 f"({p['matmul']['dtype']}, n={p['matmul']['n']}, the p20 time), copy {p['peak_bw'] / 1e9:,.4g} GB/s. "
                 "MFU is against this matmul peak.")
    if train:
        refs = {(r["B"]): r for r in train if r.get("reference_mode") == "compile" and r["status"] == "ok"}
        eager = {(r["B"]): r for r in train if r.get("reference_mode") == "eager" and r["status"] == "ok"}
        L += ["", "## Throughput", "",
              "Median step over the timed steps (p20-p80 in brackets): the interval between reading two steps' "
              "losses, each read after the next step is queued (ours with CUDA graphs, and the PyTorch reference "
              "on the GPU).", "",
              "| system | B | tokens/s | step (ms) | MFU | vs torch compile | vs torch eager | pool / reserved | "
              "device used | nvidia-smi | first loss |",
              "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(train, key=lambda r: (r["impl"] != "nanoeuler", r["system"], r["B"])):
            if r["status"] != "ok":
                L.append(f"| {r['system']} | {r['B']} | failed: {_headline(r['message'])[:120]} | | | | | | | | |")
                continue
            vs = [f"{r['tokens_per_s'] / d[r['B']]['tokens_per_s']:.3f}x" if r["B"] in d and d[r["B"]] is not r else "-"
                  for d in (refs, eager)]
            pool, used, smi = _memory(r)
            L.append(f"| {r['system']} | {r['B']} | {r['tokens_per_s']:,.0f} | {_ms(r['step_s_p50'])} "
                     f"[{_ms(r['step_s_p20'])}, {_ms(r['step_s_p80'])}] | {100 * r['mfu']:.1f}% | {vs[0]} | {vs[1]} | "
                     f"{pool} | {used} | {smi} | {r['first_loss']:.3f} |")
        L += ["", "pool / reserved: the bytes CuPy's pools hold (the default pool and the CUDA graphs' private pools) "
              "for ours, `torch.cuda.max_memory_reserved` "
              "for PyTorch; device used: cudaMemGetInfo at the end of each step (every pool and the CUDA context); "
              "nvidia-smi: polled every 0.2 s while the process ran. On the CPU: the process's peak RSS. "
              "The first loss is on random tokens from GPT-2's initialisation: about ln(V)."]
    if firsts:
        L += ["", "## Time to first step", "",
              "From starting the process to the end of its first step. Kernel caches: cold = an empty cache "
              "folder (every kernel compiled), warm = the folder a previous process of the same system filled, "
              "none = nothing compiled (PyTorch eager).", "",
              "| system | B | kernel cache | seconds | interpreter start | imports + build | first step |",
              "|---|---:|---|---:|---:|---:|---:|"]
        for r in firsts:
            if r["status"] != "ok":
                L.append(f"| {r['system']} | {r['B']} | {r['cache']} | failed: {_headline(r['message'])[:100]} | | | |")
                continue
            if "build_s" in r:
                parts = f"{r['startup_s']:.2f} | {r['build_s']:.2f} | {r['step_s']:.2f}"
            else:
                parts = f"{r['startup_s']:.2f} | {r['build_and_step_s']:.2f} (both) | "
            L.append(f"| {r['system']} | {r['B']} | {r['cache']} | {r['seconds']:.2f} | {parts} |")
    for system in dict.fromkeys(r["system"] for r in prof):
        rows = [r for r in prof if r["system"] == system]
        if rows[0]["status"] != "ok":
            L += ["", f"## Where one step's time goes: {system}", "", f"failed: {_headline(rows[0]['message'])}"]
            continue
        tot = rows[0]["profile"]
        wall = tot["wall_s"]
        L += ["", f"## Where one step's time goes: {system}, B={rows[0]['B']}, eager (no graph)", "",
              f"Median over {tot['steps']} steps: step {wall * 1e3:,.1f} ms, kernels {tot['kernels_s'] * 1e3:,.1f} ms "
              f"({100 * tot['kernels_s'] / wall:.0f}%), outside the kernels {tot['rest_s'] * 1e3:,.1f} ms. Each kernel "
              "call timed between CUDA events on the GPU (perf_counter on the CPU): profile.py.", "",
              "| op | direction | calls/step | ms/step | % of step |", "|---|---|---:|---:|---:|"]
        for r in sorted(rows, key=lambda r: -r["seconds"]):
            L.append(f"| {r['op']} | {r['direction']} | {r['calls']} | {r['seconds'] * 1e3:,.2f} | {100 * r['share']:.1f}% |")
    if meta and meta.get("interrupted"):
        L += ["", "**The run was interrupted**: the tables hold what was measured before."]
    return "\n".join(L) + "\n"


def plot_tokens_per_s(records: list[dict], path: Path) -> bool:
    """Tokens/s against batch size, one line per system; False when there is nothing to plot."""
    ok = [r for r in records if r.get("kind") == "train" and r.get("status") == "ok"]
    if not ok:
        return False
    from .report import _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system in dict.fromkeys(r["system"] for r in ok):
        pts = sorted((r["B"], r["tokens_per_s"]) for r in ok if r["system"] == system)
        ax.plot([b for b, _ in pts], [t for _, t in pts], marker="o", linestyle="--" if system.startswith("torch") else "-",
                label=system)
        for b, t in pts:
            ax.annotate(f"{t:,.0f}", (b, t), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_xscale("log", base=2)
    bs = sorted({r["B"] for r in ok})
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("batch size B (sequences of T tokens)")
    ax.set_ylabel("training tokens/s (median step)")
    ax.set_ylim(bottom=0)
    head = ok[0]
    ax.set_title(f"{head['preset']}, T={head['T']}: training throughput on {head.get('device', '?')}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def render(records: list[dict], out_dir, plots: bool = True, meta: dict | None = None, log=print) -> list[Path]:
    """train.md (and train-tokens-per-s.png) in out_dir from the records (`meta`: the run's, if at hand)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "train.md"]
    files[0].write_text(markdown(records, meta), encoding="utf-8")
    if plots and plot_tokens_per_s(records, out / "train-tokens-per-s.png"):
        files.append(out / "train-tokens-per-s.png")
    log("wrote " + ", ".join(str(f) for f in files))
    return files
