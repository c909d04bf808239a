"""`euler bench`: `ops` times kernels and writes records; `report` renders records into markdown and plots.

    euler bench ops --backend naive,numba --shapes small --out reports/bench-cpu
    euler bench ops --backend all --ops attention,matmul --shapes gpt2 --dtype bfloat16 --out runs/bench
    euler bench ops --backend triton,torch --baseline torch --shapes gpt2,gpt2-b32 --dtype bfloat16 --out runs/h200
                                       # beside PyTorch (bench/euler-torch-reference, installed separately)
    euler bench report reports/bench-cpu --out reports/bench-cpu
    euler bench report runs/before runs/after --out runs/compare    # what got faster or slower
    euler bench step --backend triton --preset gpt2 --steps 8 --eval-every 0 --profile-out prof.json
                                       # a training run, timed op by op: where a step's time goes
"""

from __future__ import annotations

import sys

from .shapes import SHAPE_SETS


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def add_commands(sub) -> None:
    p = sub.add_parser("bench", help="benchmark kernels and render reports",
                       description="Benchmark every variant of every op on this device, and render reports.")
    bench = p.add_subparsers(dest="bench_command", required=True, metavar="SUBCOMMAND")

    o = bench.add_parser("ops", help="time every selected variant of every op, forward and backward",
                         description="Check each variant against float64 naive at the shape it is timed at "
                                     "(at GPT-2's training shapes: the same op and widths on 1024 rows; "
                                     "euler_core/bench/shapes.py) - a wrong variant is reported, never timed - "
                                     "then time it: warm-up, "
                                     "batches of back-to-back calls, rotated inputs, p20/p50/p80. Writes one "
                                     "JSON record per measurement to --out and to the bench cache that "
                                     "--backend auto reads.")
    o.add_argument("--backend", default="all",
                   help="'all' (default), or comma-separated backends, backend:variant, op=backend[:variant]")
    o.add_argument("--ops", default=None, help="comma-separated ops (default: every op)")
    o.add_argument("--shapes", default="small", help=f"comma-separated shape sets: {', '.join(SHAPE_SETS)} "
                   "(default small; see euler_core/bench/shapes.py)")
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
                         description="Render one or more record folders into report.md, a roofline chart per "
                                     "device and speedup bars per op. With two or more runs, the later ones "
                                     "are compared with the first: what got faster or slower beyond the "
                                     "run-to-run spread.")
    r.add_argument("dirs", nargs="+", help="record folders (searched for records.jsonl) or files")
    r.add_argument("--out", required=True, help="folder for report.md and the PNG plots")
    r.add_argument("--no-plots", action="store_true", help="markdown only (no matplotlib needed)")
    r.set_defaults(func=_report)

    from euler_core.cli import TRAIN_HELP, add_config_options
    from euler_core.train import TrainConfig
    from euler_core.values import flag_type, integer
    st = bench.add_parser("step", help="a training run (euler train's options), timed op by op",
                          description="Run `euler train` with every kernel call timed (CUDA events on the GPU) "
                                      "and print where a step's time goes: per op and direction, the time per "
                                      "step and its share, and what no kernel accounts for (euler_core/bench/"
                                      "profile.py). Use --eval-every 0 and a few steps.")
    add_config_options(st, TrainConfig, TRAIN_HELP)
    st.add_argument("--skip-steps", type=flag_type(integer(0)), default=2, help="first steps left out (compilation, warm-up) (default 2)")
    st.add_argument("--profile-out", default=None, help="also write the profile as JSON here")
    st.set_defaults(func=_step)


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
    import signal

    def stop(signum, frame):  # `timeout` sends SIGTERM: finish the records as Ctrl-C would
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
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
    from .report import PlotsUnavailable, render
    try:
        files = render(args.dirs, args.out, plots=not args.no_plots)
    except PlotsUnavailable as e:
        print(f"euler bench report: wrote {args.out}/report.md, but no plots: {e}", file=sys.stderr)
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
