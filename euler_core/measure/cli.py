"""`euler bench`: `ops` times kernels and writes records; `report` renders records into markdown and plots.

    euler bench ops --backend naive,numba --shapes small --out reports/bench-cpu
    euler bench ops --backend all --ops attention,matmul --shapes gpt2 --dtype bfloat16 --out runs/bench
    euler bench ops --backend triton,torch --baseline torch --shapes gpt2,gpt2-b32 --dtype bfloat16 --out runs/h200
                                       # beside PyTorch (bench/euler-torch-reference, installed separately)
    euler bench report reports/bench-cpu --out reports/bench-cpu
    euler bench report runs/before runs/after --out runs/compare    # what got faster or slower
    euler bench step --backend triton --preset gpt2 --steps 8 --eval-every 0 --profile-out prof.json
                                       # a training run, timed op by op: where a step's time goes
    euler bench train --backend triton --batch-sizes 16,32,64 --reference eager,compile --out reports/train-h200
                                       # whole training steps: tokens/s, MFU, memory, first step, beside PyTorch
    euler bench quality --backend triton --reference eager --steps 300 --data "data/*_train_*.bin" --out runs/q
                                       # ours and PyTorch trained from the same weights on the same batches
    euler bench generate --backend numba --hf-python ~/torch-venv/bin/python --out reports/generate-cpu
                                       # generation speed beside Hugging Face's generate (euler_core/measure/generate.py)
"""

from __future__ import annotations

import sys

from .shapes import SHAPE_SETS


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None



def _add_systems_options(p, backend_help: str, cache_help: str, timeout_s: float) -> None:
    """The options `bench train` and `bench quality` share: the systems (ours, by selection, and the
    PyTorch reference), the model, the worker processes, the output."""
    p.add_argument("--backend", action="append", default=None, help=backend_help)
    p.add_argument("--reference", default="", help="PyTorch reference modes, comma-separated: eager, compile")
    p.add_argument("--preset", default="gpt2", help="model preset (default gpt2: GPT-2 124M)")
    p.add_argument("--seq-len", type=int, default=None, help="T (default: the preset's block size)")
    p.add_argument("--dtype", default=None, help="model dtype (default: bfloat16 on the GPU, float32 on the CPU)")
    p.add_argument("--no-graph", action="store_true", help="run our steps eagerly (no CUDA graph)")
    p.add_argument("--torch-python", default=None,
                   help="interpreter with torch for the reference (default: $EULER_TORCH_PYTHON, else this one)")
    p.add_argument("--kernel-cache", default=None, metavar="DIR", help=cache_help)
    p.add_argument("--timeout", type=float, default=timeout_s,
                   help=f"seconds allowed per worker process (default {timeout_s:g})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="folder for the records and the report")

def add_commands(sub) -> None:
    p = sub.add_parser("bench", help="benchmark kernels and render reports",
                       description="Benchmark every variant of every op on this device, and render reports.")
    bench = p.add_subparsers(dest="bench_command", required=True, metavar="SUBCOMMAND")

    o = bench.add_parser("ops", help="time every selected variant of every op, forward and backward",
                         description="Check each variant against float64 naive on the very inputs it is timed on "
                                     "(the reference of a GPU variant runs on the GPU; CPU variants up to "
                                     "1024 rows: euler_core/measure/shapes.py) - a wrong variant is reported, never timed - "
                                     "then time it: warm-up, "
                                     "batches of back-to-back calls, rotated inputs, p20/p50/p80. Writes one "
                                     "JSON record per measurement to --out and to the bench cache that "
                                     "--backend auto reads.")
    o.add_argument("--backend", default="all",
                   help="'all' (default), or comma-separated backends, backend:variant, op=backend[:variant]")
    o.add_argument("--ops", default=None, help="comma-separated ops (default: every op)")
    o.add_argument("--shapes", default="small", help=f"comma-separated shape sets: {', '.join(SHAPE_SETS)} "
                   "(default small; see euler_core/measure/shapes.py)")
    o.add_argument("--dtype", default="float32", help="comma-separated dtypes (default float32)")
    o.add_argument("--baseline", default="naive", help="what speedups are measured against: a backend (at "
                   "each shape its fastest variant of the op), backend:variant, or op=... overrides; 'none' for "
                   "no speedups (default naive). Baseline variants are timed too, as references: even where they "
                   "miss NanoEuler's tolerance (the records and the report say so).")
    o.add_argument("--out", required=True, help="folder for records.jsonl and run.json")
    o.add_argument("--no-conformance", action="store_true",
                   help="skip the conformance suite before timing (the check at the benchmarked shape still runs; "
                        "--backend auto will not choose variants measured this way)")
    o.add_argument("--no-cache", action="store_true", help="do not copy the records into the bench cache")
    o.add_argument("--quick", action="store_true", help="few, short samples (CI smoke runs; noisy)")
    o.add_argument("--min-time", type=float, default=None, help="seconds of sampling per measurement (default 0.5)")
    o.add_argument("--seed", type=int, default=0)
    o.set_defaults(func=_ops)

    r = bench.add_parser("report", help="markdown tables and PNG plots from bench records",
                         description="Render one or more record folders: op records into report.md, a roofline chart per "
                                     "device and speedup bars per op. With two or more runs, the later ones "
                                     "are compared with the first: what got faster or slower beyond the "
                                     "run-to-run spread. Records of `euler bench train` become train.md and "
                                     "train-tokens-per-s.png, those of `euler bench quality` quality.md and "
                                     "quality-loss.png.")
    r.add_argument("dirs", nargs="+", help="record folders (searched for records.jsonl) or files")
    r.add_argument("--out", required=True, help="folder for the markdown and the PNG plots")
    r.add_argument("--no-plots", action="store_true", help="markdown only (no matplotlib needed)")
    r.set_defaults(func=_report)

    from euler_core.cli_options import TRAIN_HELP, add_config_options
    from euler_core.train import TrainConfig
    from euler_core.values import flag_type, integer
    st = bench.add_parser("step", help="a training run (euler train's options), timed op by op",
                          description="Run `euler train` with every kernel call timed (CUDA events on the GPU) "
                                      "and print where a step's time goes: per op and direction, the time per "
                                      "step and its share, and what no kernel accounts for (euler_core/measure/"
                                      "profile.py). Use --eval-every 0 and a few steps.")
    add_config_options(st, TrainConfig, TRAIN_HELP)
    st.add_argument("--skip-steps", type=flag_type(integer(0)), default=2, help="first steps left out (compilation, warm-up) (default 2)")
    st.add_argument("--profile-out", default=None, help="also write the profile as JSON here")
    st.set_defaults(func=_step)

    t = bench.add_parser("train", help="whole training steps per selection and batch size, beside PyTorch",
                         description="Time whole training steps (euler_core.step.TrainStep) for each --backend "
                                     "selection at each batch size, every measurement in a process of its own: "
                                     "tokens/s, MFU against the matmul peak measured in the same run, peak memory, "
                                     "time to first step with cold and warm kernel caches, and a per-op breakdown "
                                     "of one eager step; with --reference, the PyTorch reference GPT-2 "
                                     "(bench/euler-torch-reference) on the same device at the same sizes. Writes "
                                     "records.jsonl, run.json, train.md and a PNG to --out "
                                     "(euler_core/measure/train.py).")
    _add_systems_options(t, "a kernel selection, as for euler train; repeat for several systems (default: triton)",
                         "keep each system's kernel caches in DIR/<system> (default: temporary folders)", 600.0)
    t.add_argument("--batch-sizes", default="16,32,64", help="comma-separated batch sizes B (default 16,32,64)")
    t.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    t.add_argument("--warmup", type=int, default=3, help="untimed steps after the first (default 3)")
    t.add_argument("--steps", type=int, default=10, help="timed steps per measurement (default 10)")
    t.add_argument("--no-cold", action="store_true", help="no separate cold-cache first step")
    t.add_argument("--no-profile", action="store_true", help="no per-op breakdown")
    t.add_argument("--recompute", action="store_true",
                   help="our models remake each layer's GELU output in the backward instead of keeping it "
                        "(euler train --recompute)")
    t.add_argument("--peak-size", default="large", choices=["small", "large"], help="size of the peak measurements")
    t.set_defaults(func=_train)

    q = bench.add_parser("quality", help="ours and the PyTorch reference trained from the same weights on the same batches",
                         description="Train each --backend selection and each --reference mode through one plan (the "
                                     "same initial weights, the same token windows and learning rate at every step), "
                                     "each in a process of its own, and compare the loss curves: the mean relative "
                                     "difference per step. Writes records.jsonl, quality.md and quality-loss.png to "
                                     "--out (euler_core/measure/quality.py).")
    _add_systems_options(q, "a kernel selection; repeat for several (the first is compared with the rest; default triton)",
                         "each system's kernel caches in DIR/<system>, as `bench train --kernel-cache` keeps them",
                         1800.0)
    q.add_argument("--batch-size", type=int, default=16, help="B (default 16)")
    q.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    q.add_argument("--lr", type=float, default=6e-4, help="peak learning rate (default 6e-4)")
    q.add_argument("--warmup", type=int, default=30, help="learning-rate warmup steps (default 30)")
    q.add_argument("--data", default=None, help="glob of llm.c .bin token shards (default: the embedded corpus)")
    q.add_argument("--tokenizer", default="gpt2", help="tokenises the embedded corpus: gpt2, bytes or a .tiktoken file")
    q.add_argument("--budget", type=float, default=None,
                   help="seconds of training for the first system; every system then runs the steps it finished")
    q.set_defaults(func=_quality)

    g = bench.add_parser("generate", help="generation speed (prefill, decode, time to first token) beside "
                                          "Hugging Face transformers' generate",
                         description="Time generate() on GPT-2 shapes with random weights, greedy: prefill and "
                                     "decode tokens/s, time to first token, the decoding step's bandwidth; beside "
                                     "Hugging Face's generate run by --hf-python in its own environment, "
                                     "alternating. See euler_core/measure/generate.py.")
    g.add_argument("--backend", default="numba", help="kernel selection (default numba; triton on the GPU)")
    g.add_argument("--presets", default="gpt2", help="comma-separated model presets (default gpt2; gpt2-medium: 350M)")
    g.add_argument("--dtype", default="float32", help="the model's dtype (default float32; bfloat16 on the GPU)")
    g.add_argument("--batches", default="1", help="comma-separated batch sizes (default 1)")
    g.add_argument("--prompt-len", type=int, default=448, help="prompt tokens a row (default 448)")
    g.add_argument("--new-tokens", type=int, default=64, help="new tokens a row (default 64)")
    g.add_argument("--repeats", type=int, default=3, help="timed generations per measurement (default 3)")
    g.add_argument("--rounds", type=int, default=1, help="rounds alternating ours and Hugging Face's (default 1)")
    g.add_argument("--no-graph", action="store_true", help="our decoding step without a CUDA graph")
    g.add_argument("--hf-python", default=None, help="a Python with torch and transformers: time Hugging Face too")
    g.add_argument("--hf-modes", default="eager", help="eager and/or compiled (static cache + torch.compile, GPU)")
    g.add_argument("--hf-threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    g.add_argument("--hf-only", action="store_true", help="time Hugging Face only (render beside another run's ours)")
    g.add_argument("--out", required=True, help="folder for records.jsonl, run.json and report.md")
    g.set_defaults(func=_generate)


def _ops(args) -> int:
    from .ops import BenchConfig, run
    from .timing import TimingConfig
    timing = TimingConfig.quick() if args.quick else TimingConfig()
    if args.min_time is not None:
        timing.min_time_s = args.min_time
    cfg = BenchConfig(backend=args.backend, ops=_csv(args.ops), shapes=_csv(args.shapes) or ["small"],
                      dtypes=_csv(args.dtype) or ["float32"],
                      baseline=None if args.baseline in ("none", "") else args.baseline,
                      conformance=not args.no_conformance, seed=args.seed, timing=timing,
                      peak_timing=TimingConfig.quick() if args.quick else None)
    _sigterm_as_interrupt()
    try:
        records = run(cfg, args.out, argv=["euler", *sys.argv[1:]], copy_to_cache=not args.no_cache)
    except KeyboardInterrupt:
        print(f"\ninterrupted; the records measured so far are in {args.out}", file=sys.stderr)
        return 130
    ops = [r for r in records if r.get("kind") == "op"]
    failed = sorted({r["variant"] + " / " + r["op"] for r in ops if r["status"] == "failed"})
    print(f"\n{sum(r['status'] == 'ok' for r in ops)} measurements, {len(failed)} variant/op failed "
          f"({', '.join(failed) or 'none'}), {len({r['variant'] for r in ops if r['status'] == 'skipped'})} "
          f"variants skipped; records in {args.out}. Render them: euler bench report {args.out} --out {args.out}")
    return 1 if failed else 0


def _report(args) -> int:
    from . import quality, train
    from .records import load_records
    from .report import PlotsUnavailable, render
    records = load_records(args.dirs)
    kinds = {r.get("kind") for r in records}
    whole_steps = set(train.TRAIN_KINDS) | set(quality.QUALITY_KINDS)
    files = []
    try:  # op records -> report.md; training-step records -> train.md; quality records -> quality.md
        if "op" in kinds or not kinds & whole_steps:
            files += render(args.dirs, args.out, plots=not args.no_plots)
        if kinds & set(train.TRAIN_KINDS):
            files += train.render(records, args.out, plots=not args.no_plots, log=lambda *a: None)
        if kinds & set(quality.QUALITY_KINDS):
            files += quality.render(records, args.out, plots=not args.no_plots, log=lambda *a: None)
    except PlotsUnavailable as e:
        print(f"euler bench report: wrote the markdown in {args.out}, but no plots: {e}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _step(args) -> int:
    import json
    from dataclasses import fields

    from euler_core.train import TrainConfig, train

    from .profile import StepProfile, table
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig)
             if f.name != "progress" and getattr(args, f.name) is not None}
    given["graph"] = False  # every kernel call timed: an eager step (a replayed graph has no calls to time)
    profile = StepProfile(skip=args.skip_steps)
    with profile.active():
        train(TrainConfig(**given, progress=False))
    summary = profile.summary()
    print("\n" + table(summary))
    if args.profile_out:
        with open(args.profile_out, "w", encoding="utf-8") as f:
            json.dump({"config": given, **summary}, f, indent=1)
    return 0


def _sigterm_as_interrupt() -> None:
    import signal

    def stop(signum, frame):  # `timeout` sends SIGTERM: finish the records as Ctrl-C would
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text) or []]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def _train(args) -> int:
    from .train import TrainBenchConfig, run
    cfg = TrainBenchConfig(backends=args.backend or ["triton"], batch_sizes=_ints(args.batch_sizes, "--batch-sizes"),
                           preset=args.preset, seq_len=args.seq_len, dtype=args.dtype, accum=args.accum,
                           graph=False if args.no_graph else None, recompute=args.recompute,
                           warmup=args.warmup, steps=args.steps, cold=not args.no_cold, profile=not args.no_profile,
                           references=_csv(args.reference) or [],
                           torch_python=args.torch_python, seed=args.seed, peak_size=args.peak_size,
                           kernel_cache=args.kernel_cache, timeout_s=args.timeout)
    _sigterm_as_interrupt()
    try:
        records = run(cfg, args.out, argv=["euler", *sys.argv[1:]])
    except KeyboardInterrupt:
        print(f"\ninterrupted; the records measured so far are in {args.out}", file=sys.stderr)
        return 130
    failed = [r for r in records if r.get("status") == "failed"]
    print(f"\n{sum(r.get('kind') == 'train' and r['status'] == 'ok' for r in records)} throughput measurements, "
          f"{len(failed)} failed; {args.out}/train.md")
    return 1 if failed else 0


def _quality(args) -> int:
    from .quality import QualityConfig, run
    cfg = QualityConfig(backends=args.backend or ["triton"], references=_csv(args.reference) or [], preset=args.preset,
                        batch_size=args.batch_size, seq_len=args.seq_len, steps=args.steps, lr=args.lr,
                        warmup=args.warmup, dtype=args.dtype, graph=False if args.no_graph else None, data=args.data,
                        tokenizer=args.tokenizer, torch_python=args.torch_python, seed=args.seed,
                        budget_s=args.budget, kernel_cache=args.kernel_cache, timeout_s=args.timeout)
    records = run(cfg, args.out, argv=["euler", *sys.argv[1:]])
    failed = [r["system"] for r in records if r.get("kind") == "quality_curve" and r["status"] != "ok"]
    print(f"\n{args.out}/quality.md" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
def _generate(args) -> int:
    from .generate import GenerateBenchConfig, run
    for name, value in (("--batches", args.batches), ("--presets", args.presets)):
        if not _csv(value):
            raise ValueError(f"{name} names nothing")
    batches = [int(b) for b in _csv(args.batches)]
    if min(batches) < 1 or args.prompt_len < 1 or args.new_tokens < 2 or args.repeats < 1 or args.rounds < 1:
        raise ValueError("bench generate: batches, --prompt-len, --repeats and --rounds must be >= 1, "
                         "--new-tokens >= 2 (decode time is total minus the first token's)")
    cfg = GenerateBenchConfig(backend=args.backend, presets=_csv(args.presets), dtype=args.dtype, batches=batches,
                              prompt_len=args.prompt_len, new_tokens=args.new_tokens, repeats=args.repeats,
                              rounds=args.rounds, graph=not args.no_graph, hf_python=args.hf_python,
                              hf_modes=_csv(args.hf_modes) or ["eager"], hf_threads=args.hf_threads,
                              ours=not args.hf_only)
    if args.hf_only and not args.hf_python:
        raise ValueError("--hf-only needs --hf-python")
    import signal

    def stop(signum, frame):  # `timeout` sends SIGTERM: end Hugging Face's process and keep the records
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    try:
        run(cfg, args.out, argv=["euler", *sys.argv[1:]])
    except KeyboardInterrupt:
        print(f"\ninterrupted; the records measured so far are in {args.out}", file=sys.stderr)
        return 130
    return 0
