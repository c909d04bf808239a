"""`euler conformance`: run the suite from the command line.

The lead's euler_core/cli.py calls `add_commands(subparsers)`; `python -m conformance ...` runs the
same command without it. Exit status 0 when nothing failed, 1 when something did (skips are not
failures, and are listed with their reasons).
"""

from __future__ import annotations

import argparse
import sys
import time


def add_commands(subparsers) -> None:
    """Add the `conformance` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser(
        "conformance", help="check backend variants against the float64 naive reference",
        description="Run the conformance suite: every variant of every op against the float64 naive "
                    "reference, at awkward shapes, in every dtype it declares; poisoned outputs, "
                    "gradient accumulation, repeatability, input validation, finite differences.")
    add_arguments(p)
    p.set_defaults(func=handler)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default=None,
                   help="a backend (naive), a variant (naive:reference), a selection "
                        "(numba,attention=naive) or 'all' (the default: every installed backend)")
    p.add_argument("--op", action="append", default=None, metavar="OP",
                   help="check only this op (repeatable)")
    p.add_argument("--case", action="append", default=None, metavar="CASE",
                   help="run only the case(s) of this name, e.g. T1 (repeatable)")
    p.add_argument("--dtype", action="append", default=None, metavar="DTYPE",
                   help="run only this dtype, e.g. float32 (repeatable)")
    p.add_argument("--check", action="append", default=None, metavar="CHECK",
                   help="run only this check, e.g. backward (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the random inputs (default 0)")
    p.add_argument("--quiet", action="store_true", help="print the table only, not the progress dots")


def handler(args) -> int:
    """Run the suite as `args` says, print the table; 0 when nothing failed, else 1."""
    from .runner import FAILED, SKIPPED, run

    def progress(result):
        if not args.quiet:
            sys.stderr.write({FAILED: "F", SKIPPED: "s"}.get(result.status, "."))
            sys.stderr.flush()

    start = time.perf_counter()
    try:
        report = run(backend=args.backend, ops=args.op, cases=args.case, seed=args.seed,
                     dtypes=args.dtype, checks=args.check, progress=progress)
    except ValueError as e:
        print(f"euler conformance: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        sys.stderr.write("\n")
    print(report.table())
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0 if report.ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance",
                                     description="The NanoEuler conformance suite (same as `euler conformance`).")
    add_arguments(parser)
    return handler(parser.parse_args(argv))
