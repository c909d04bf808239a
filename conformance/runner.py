"""The runner: which variants to check, running every check on them, and the report.

    report = conformance.run(backend="naive")          # or "numba:rows", "numba,attention=naive", None = all
    print(report.table())                               # rows variant/op, columns checks, PASS/FAIL/SKIP
    report.ok                                           # False when anything failed

A *target* is one row of the report with its own list of checks: every variant of every op is one
(the case checks, run per case and dtype, and the variant checks); a backend selection's whole
training step is another (`model`, whose one check is `check_model_step`).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from euler_core.kernels import select_variants
from euler_core.ops import OPS
from euler_core.ops.base import FLOAT_DTYPES
from euler_core.registry import Registry, Variant, get_registry

from .arrays import CheckFailed, CheckSkipped, dtype_unavailable_reason
from .cases import CASES, get_case
from .checks import (CASE_CHECKS, VARIANT_CHECKS, CaseContext, NotApplicable, applicable_case_checks,
                     applicable_variant_checks)
from .model import MODEL_CHECKS

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class Result:
    """One check of one target (at one case and dtype, for case checks)."""

    op: str                     # the op, or "model"
    variant: str                # "backend:variant", or the selection string of a model row
    check: str
    status: str                 # passed / failed / skipped
    message: str = ""           # why it failed or was skipped, with the rerun command
    case: str | None = None
    dims: dict | None = None
    dtype: str | None = None
    seed: int | None = None

    @property
    def where(self) -> str:
        parts = [f"op={self.op}", f"variant={self.variant}", f"check={self.check}"]
        if self.case is not None:
            parts.append(f"case={self.case} dims={self.dims}")
        if self.dtype is not None:
            parts.append(f"dtype={self.dtype}")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return " ".join(parts)

    def __str__(self):
        return f"{self.status.upper()} {self.where}\n    {self.message}" if self.message else \
            f"{self.status.upper()} {self.where}"


def rerun_command(variant: str, op: str, case: str | None = None, dtype: str | None = None,
                  seed: int | None = None, check: str | None = None) -> str:
    cmd = f"euler conformance --backend {variant} --op {op}"
    if case is not None:
        cmd += f" --case {case}"
    elif check is not None:  # a variant check (reject, gradcheck): no case to name
        cmd += f" --check {check}"
    if dtype is not None:
        cmd += f" --dtype {dtype}"
    if seed is not None:
        cmd += f" --seed {seed}"
    return cmd


class Report(list):
    """A list of Result, with a table and a verdict."""

    @property
    def ok(self) -> bool:
        return not any(r.status == FAILED for r in self)

    def failures(self) -> list[Result]:
        return [r for r in self if r.status == FAILED]

    def skips(self) -> list[Result]:
        return [r for r in self if r.status == SKIPPED]

    def counts(self) -> dict:
        return {s: sum(r.status == s for r in self) for s in (PASSED, FAILED, SKIPPED)}

    def table(self, details: bool = True) -> str:
        """Rows variant/op, columns checks; a cell is FAIL if any case failed, PASS if every case that
        ran passed (PASS* when some were skipped), SKIP if none ran, '-' where the check does not apply.
        Below: every failure in full, and each distinct skip reason once."""
        columns = list(CASE_CHECKS) + list(VARIANT_CHECKS)
        columns += [c for c in dict.fromkeys(r.check for r in self) if c not in columns]
        rows: dict[tuple, dict] = {}
        for r in self:
            rows.setdefault((r.variant, r.op), {}).setdefault(r.check, []).append(r.status)
        label = {k: f"{k[0]} / {k[1]}" for k in rows}
        w0 = max([len("variant / op")] + [len(v) for v in label.values()])
        widths = [max(len(c), 5) for c in columns]
        lines = ["  ".join([f"{'variant / op':<{w0}}"] + [f"{c:<{w}}" for c, w in zip(columns, widths)])]
        lines.append("  ".join(["-" * w0] + ["-" * w for w in widths]))
        for key, cells in rows.items():
            row = [f"{label[key]:<{w0}}"]
            for c, w in zip(columns, widths):
                statuses = cells.get(c, [])
                if not statuses:
                    cell = "-"
                elif FAILED in statuses:
                    cell = "FAIL"
                elif PASSED in statuses:
                    cell = "PASS*" if SKIPPED in statuses else "PASS"
                else:
                    cell = "SKIP"
                row.append(f"{cell:<{w}}")
            lines.append("  ".join(row).rstrip())
        c = self.counts()
        lines.append("")
        lines.append(f"{c[PASSED]} passed, {c[FAILED]} failed, {c[SKIPPED]} skipped "
                     "(PASS* = passed where it ran, some cases skipped)")
        if details:
            if self.failures():
                lines.append("")
                lines.append("Failures:")
                lines += [str(r) for r in self.failures()]
            reasons = {}
            for r in self.skips():
                reasons.setdefault((r.variant, r.op if r.op == "model" else "", r.message), []).append(r)
            if reasons:
                lines.append("")
                lines.append("Skipped:")
                for (variant, op, msg), rs in reasons.items():
                    what = sorted({f"{x.op}" + (f"/{x.dtype}" if x.dtype else "") for x in rs})
                    shown = ", ".join(what[:6]) + (f" and {len(what) - 6} more" if len(what) > 6 else "")
                    lines.append(f"  {variant} ({shown}): {msg.splitlines()[0] if msg else ''}")
        return "\n".join(lines)


# ---- choosing targets (select_variants is the core's: euler_core/kernels.py) --------------------------
def variant_dtypes(variant: Variant) -> list[str]:
    """The storage dtypes the variant declares, in FLOAT_DTYPES order (tf32 is not one)."""
    return [d for d in FLOAT_DTYPES if d in variant.dtypes]


# ---- running ---------------------------------------------------------------------------------------
def _run_one(fn, *args) -> tuple[str, str]:
    try:
        fn(*args)
    except NotApplicable:
        return "n/a", ""
    except CheckSkipped as e:
        return SKIPPED, str(e)
    except CheckFailed as e:
        return FAILED, str(e)
    except Exception as e:  # a crash in a check is a failure of the variant, with its traceback
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        return FAILED, f"raised {type(e).__name__}: {e}\n" + "".join(tb[-3:])
    return PASSED, ""


def run_case(variant: Variant, op: str, case, dtype: str, seed: int = 0, checks=None) -> list[Result]:
    """Every case check of one (variant, op, case, dtype): a list of Result."""
    case = get_case(op, case) if isinstance(case, str) else case
    names = [c for c in applicable_case_checks(op) if checks is None or c in checks]
    base = dict(op=op, variant=variant.qualname, case=case.name, dims=dict(case.dims), dtype=dtype, seed=seed)
    reason = variant.unavailable_reason() or dtype_unavailable_reason(dtype, variant.device)
    if dtype not in variant.dtypes:
        reason = f"the variant does not take {dtype} (it takes {', '.join(variant.dtypes)})"
    if reason:
        return [Result(check=c, status=SKIPPED, message=reason, **base) for c in names]
    ctx = CaseContext(variant, op, case, dtype, seed)
    results = []
    for name in names:
        status, message = _run_one(CASE_CHECKS[name], ctx)
        if status == "n/a":
            continue
        if status == FAILED:
            message = _failure_message(base, name, message)
        results.append(Result(check=name, status=status, message=message, **base))
    return results


def run_variant_check(variant: Variant, op: str, check: str, seed: int = 0) -> Result:
    base = dict(op=op, variant=variant.qualname, check=check, seed=seed)
    reason = variant.unavailable_reason()
    if reason:
        return Result(status=SKIPPED, message=reason, **base)
    status, message = _run_one(VARIANT_CHECKS[check], variant, op, seed)
    if status == FAILED:
        message = _failure_message(base, check, message)
    return Result(status=status if status != "n/a" else SKIPPED, message=message, **base)


def _failure_message(base: dict, check: str, message: str) -> str:
    where = f"{base['op']} | {base['variant']} | check={check}"
    if "case" in base:
        where += f" | case={base['case']} dims={base['dims']} | dtype={base['dtype']}"
    where += f" | seed={base['seed']}"
    cmd = rerun_command(base["variant"], base["op"], base.get("case"), base.get("dtype"), base["seed"], check)
    return f"{where}\n    {message}\n    rerun: {cmd}"


def model_dtypes(text: str, registry, dtypes=None) -> list[str]:
    """The dtypes of the model row: float32, and bfloat16/float16 (mixed precision) where every op of
    the selection takes them (a selection that cannot be resolved gets float32: its check says why)."""
    from euler_core.kernels import Kernels, SelectionError
    try:
        variants = [v for op, v in Kernels(text, registry=registry).variants.items()
                    if not getattr(OPS[op], "inference_only", False)]
    except SelectionError:
        return ["float32"]
    wanted = [d for d in ("float32", "bfloat16", "float16") if all(d in v.dtypes for v in variants)] or ["float32"]
    return [d for d in wanted if dtypes is None or d in dtypes]


def run(backend=None, ops=None, cases=None, seed: int = 0, registry: Registry | None = None,
        dtypes=None, checks=None, model: bool | None = None, progress=None) -> Report:
    """Run the suite on the variants `backend` names (see select_variants) and return a Report.

    ops      op names to check (default all); cases: case names (default all of each op)
    dtypes   restrict the float dtypes (default every one each variant declares)
    checks   restrict the checks by name (default all)
    model    add the model row (default: when a whole backend or selection is checked, all ops)
    progress a callable given each Result as it is made (the CLI prints dots)
    """
    registry = registry or get_registry()
    report = Report()

    def add(result):
        report.append(result)
        if progress is not None:
            progress(result)

    variants = select_variants(backend, ops, registry)
    for variant in variants:
        op = variant.op
        selected_cases = [c for c in CASES[op] if cases is None or c.name in cases]
        for dtype in variant_dtypes(variant):
            if dtypes is not None and dtype not in dtypes:
                continue
            for case in selected_cases:
                for r in run_case(variant, op, case, dtype, seed, checks):
                    add(r)
        for check in applicable_variant_checks(op):
            if (checks is None or check in checks) and cases is None:
                add(run_variant_check(variant, op, check, seed))
    if cases is not None and not any(r.case for r in report):
        known = {op: [c.name for c in CASES[op]] for op in (ops or OPS)}
        raise ValueError(f"no case named {sorted(cases)}; cases per op: {known}")
    if model is None:
        model = ops is None and cases is None and (checks is None or "model_step" in checks)
    if model:
        texts = [backend] if isinstance(backend, str) and backend != "all" else sorted(registry.backends)
        for text in texts:
            for dtype in model_dtypes(text, registry, dtypes):
                for name, fn in MODEL_CHECKS.items():
                    status, message = _run_one(fn, text, registry, seed, dtype)
                    if status == FAILED:
                        message = f"model | {text} | check={name} | dtype={dtype} | seed={seed}\n    {message}\n" \
                                  f"    rerun: euler conformance --backend {text} --check {name} --dtype {dtype} --seed {seed}"
                    add(Result(op="model", variant=text, check=name, status=status, message=message, seed=seed,
                               dtype=dtype))
    return report


def verdict(variant: Variant, op: str, dtype: str, registry: Registry, seed: int = 0) -> tuple[str, str]:
    """('passed'|'failed'|'skipped', the first failure or skip reason) of the suite on one variant of
    one op in one dtype. The benchmark runs it before timing a variant: it finds it through the
    entry-point group `nanoeuler.suites` (pyproject.toml), so the core never imports the suite."""
    report = run(backend=variant.qualname, ops=[op], dtypes=[dtype], model=False, registry=registry, seed=seed)
    if not report.ok:
        return FAILED, str(report.failures()[0])
    if not any(r.status == PASSED for r in report):
        return SKIPPED, report.skips()[0].message if report.skips() else "no check ran"
    return PASSED, ""
