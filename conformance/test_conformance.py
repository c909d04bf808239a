"""The conformance suite as pytest tests: `pytest --pyargs conformance [--euler-backend NAME]`.

Parametrised over (variant, op, case, dtype) with ids such as
`test_case[naive:reference-layernorm-T17-C36-float32]`; one test runs every case check of that
combination (conformance/checks.py lists them) and fails listing each check that failed. The variant
checks (bad inputs rejected, finite differences) are `test_reject[...]` and `test_gradcheck[...]`;
the model-level check is `test_model[...]`. A variant that cannot run here is skipped with its reason.
"""

from __future__ import annotations

import pytest

from conformance.cases import CASES
from conformance.checks import applicable_variant_checks
from conformance.model import MODEL_CHECKS
from conformance.plugin import backends_option, seed_option
from conformance.runner import FAILED, SKIPPED, run_case, run_variant_check, select_variants, variant_dtypes
from euler_core.registry import get_registry


def _variants(config):
    return select_variants(backends_option(config), None, get_registry())


def pytest_generate_tests(metafunc):
    config = metafunc.config
    if "case_params" in metafunc.fixturenames:
        params = []
        for v in _variants(config):
            for dtype in variant_dtypes(v):
                for case in CASES[v.op]:
                    params.append(pytest.param((v, v.op, case.name, dtype),
                                               id=f"{v.qualname}-{v.op}-{case.name}-{dtype}"))
        metafunc.parametrize("case_params", params)
    if "variant_check" in metafunc.fixturenames:
        check = metafunc.function.__name__.removeprefix("test_")
        params = [pytest.param(v, id=f"{v.qualname}-{v.op}") for v in _variants(config)
                  if check in applicable_variant_checks(v.op)]
        metafunc.parametrize("variant_check", params)
    if "model_target" in metafunc.fixturenames:
        names = backends_option(config) or sorted(get_registry().backends)
        metafunc.parametrize("model_target", names)


def _conclude(results, nodeid):
    failed = [r for r in results if r.status == FAILED]
    if failed:
        pytest.fail("\n".join(r.message for r in failed) + f"\n    or: pytest '{nodeid}'", pytrace=False)
    if results and all(r.status == SKIPPED for r in results):
        pytest.skip(results[0].message)


@pytest.fixture
def seed(request):
    return seed_option(request.config)


def test_case(case_params, seed, request):
    variant, op, case, dtype = case_params
    _conclude(run_case(variant, op, case, dtype, seed), request.node.nodeid)


def test_reject(variant_check, seed, request):
    _conclude([run_variant_check(variant_check, variant_check.op, "reject", seed)], request.node.nodeid)


def test_gradcheck(variant_check, seed, request):
    _conclude([run_variant_check(variant_check, variant_check.op, "gradcheck", seed)], request.node.nodeid)


@pytest.mark.parametrize("check", list(MODEL_CHECKS))
def test_model(model_target, check, seed):
    from conformance.runner import run
    results = [r for r in run(backend=model_target, seed=seed, checks=[check], model=True) if r.op == "model"]
    _conclude(results, "")
