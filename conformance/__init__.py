"""The conformance suite every backend variant must pass.

    import conformance
    report = conformance.run(backend="naive")     # a backend, "backend:variant", a selection, or None = all
    print(report.table()); assert report.ok

also `euler conformance --backend NAME` (conformance/cli.py) and `pytest --pyargs conformance
--euler-backend NAME` (conformance/test_conformance.py, options from conformance/plugin.py).
What is checked, and the kernel contract it holds variants to: docs/op-contracts.md.
"""

from .arrays import CheckFailed, CheckSkipped
from .cases import BAD_INPUTS, CASES, GRADCHECK_DIMS, Case
from .checks import CASE_CHECKS, VARIANT_CHECKS
from .model import MODEL_CHECKS, check_model_step
from .runner import Report, Result, rerun_command, run, run_case, run_variant_check, select_variants
from .tolerances import TOLERANCES, tolerance

__all__ = ["run", "run_case", "run_variant_check", "select_variants", "rerun_command", "Report", "Result",
           "CASES", "BAD_INPUTS", "GRADCHECK_DIMS", "Case", "CASE_CHECKS", "VARIANT_CHECKS", "MODEL_CHECKS",
           "check_model_step", "TOLERANCES", "tolerance", "CheckFailed", "CheckSkipped"]
