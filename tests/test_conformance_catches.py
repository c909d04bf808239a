"""Testing the tester: planted bugs (tests/planted_kernels.py) are each caught by the right check,
and the naive reference passes everything.

The planted variants are registered the way any plugin is, through a hook implementation, in a
Registry of their own (the installed backends stay as they are).
"""

from __future__ import annotations

import pytest

import conformance
from conformance import cli
from conformance.runner import FAILED, PASSED, SKIPPED
from euler_core.kernels import Kernel
from euler_core.registry import Backend, Registry, Variant, hookimpl

PLANTED = "planted_kernels"  # tests/ is on sys.path under pytest's default (prepend) import mode

#: variant name -> (op, impl attribute, the checks that must fail, and no others)
BUGS = {
    "ln_dx": ("layernorm", "LayerNormDxMissingMeanTerm", {"backward", "grad_buffer", "gradcheck"}),
    "mm_unwritten": ("matmul", "MatmulLastColumnUnwritten", {"out"}),
    "mm_assign": ("matmul", "MatmulWeightGradAssigned", {"accumulate"}),
    "res_mutates": ("residual", "ResidualMutatesInput", {"inputs", "gradcheck"}),
    "gelu_off": ("gelu", "GeluForwardOff", {"forward", "out"}),  # a constant offset: derivatives right
    "gelu_noise": ("gelu", "GeluNotRepeatable", {"repeat"}),
    "gelu_dtype": ("gelu", "GeluWrongOutputDtype", {"forward"}),
    "attn_dqkv": ("attention", "AttentionAccumulatesIntoDqkv", {"grad_buffer"}),
    "ce_overflow": ("crossentropy", "CrossEntropyNoMaxShift",
                    {"forward", "out", "finite", "backward", "grad_buffer"}),  # large-logits, float32
    "emb_novalidate": ("embedding", "EmbeddingNoValidation", set()),
    # the fused ops' extensions of the contract: two outputs, a gradient given ahead
    "lnr_stream": ("layernorm_residual", "LayerNormResidualDropsStreamGradient",
                   {"backward", "grad_buffer", "gradcheck"}),
    "lnr_out": ("layernorm_residual", "LayerNormResidualStreamNotWrittenToOut", {"out"}),
    "lnr_copy": ("layernorm_residual", "LayerNormResidualCopiesTheStream", {"forward", "out"}),  # the no-b cases
    "mmr_drop": ("matmul_residual", "MatmulResidualDropsTheStream", {"forward", "out", "gradcheck"}),
    "cce_any_grad": ("classifier_crossentropy", "ClassifierAcceptsAnyGradOutput", {"grad_ahead"}),
}


class PlantedPlugin:
    @hookimpl
    def nanoeuler_backends(self):
        variants = [Variant(op, name, impl=f"{PLANTED}:{attr}", dtypes=("float64", "float32"))
                    for name, (op, attr, _) in BUGS.items()]
        variants += [
            Variant("gelu", "needs_missing_module", impl=f"{PLANTED}:GeluForwardOff",
                    requires=("a_module_that_is_not_installed",)),
            Variant("gelu", "on_gpu", impl="backends.naive.gelu", device="cuda", dtypes=("float32",)),
            Variant("gelu", "float32_only", impl="backends.naive.gelu", dtypes=("float32",)),
        ]
        return [Backend("planted", "deliberately wrong kernels (tests only)", variants)]


@pytest.fixture(scope="module")
def registry():
    return Registry(plugins=[PlantedPlugin()], entry_points=True)


def _failed_checks(report):
    return {r.check for r in report if r.status == FAILED}


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("name", list(BUGS))
def test_each_planted_bug_is_caught_by_the_right_check(registry, name):
    """Exactly the expected checks fail (every other one passes: no false alarms)."""
    op, _, expected = BUGS[name]
    report = conformance.run(backend=f"planted:{name}", registry=registry, model=False)
    assert {r.op for r in report} == {op}
    assert _failed_checks(report) == expected, report.table()
    assert report.ok == (not expected)
    assert not [r for r in report if r.status == SKIPPED], report.table()


def test_naive_passes_everything(registry):
    report = conformance.run(backend="naive", registry=registry, model=False)
    assert report.ok, report.table()
    assert {r.status for r in report} == {PASSED}
    checks = {r.check for r in report}
    assert checks == set(conformance.CASE_CHECKS) | set(conformance.VARIANT_CHECKS)
    assert {r.op for r in report} == set(conformance.CASES)


def test_failure_message_names_everything_and_the_rerun_command(registry):
    report = conformance.run(backend="planted:ln_dx", registry=registry, cases=["T17-C36"], dtypes=["float32"],
                             seed=3, model=False)
    failure = next(r for r in report.failures() if r.check == "backward")
    msg = failure.message
    for part in ("layernorm", "planted:ln_dx", "check=backward", "case=T17-C36", "'N': 17", "'C': 36",
                 "dtype=float32", "seed=3", "dx differs"):
        assert part in msg, msg
    assert ("rerun: euler conformance --backend planted:ln_dx --op layernorm --case T17-C36 "
            "--dtype float32 --seed 3") in msg


def test_unwritten_output_names_the_element(registry):
    report = conformance.run(backend="planted:mm_unwritten", registry=registry, cases=["T1"],
                             dtypes=["float64"], model=False)
    (failure,) = report.failures()
    assert "never written" in failure.message and "(0, 35)" in failure.message  # N=1, M=36


def test_assignment_instead_of_accumulation_is_named(registry):
    report = conformance.run(backend="planted:mm_assign", registry=registry, cases=["small"], dtypes=["float64"],
                             model=False)
    (failure,) = report.failures()
    assert "must accumulate" in failure.message and "'=' where '+=' belongs" in failure.message


def test_dispatcher_rejects_what_a_non_validating_variant_would_accept(registry):
    variant = registry.find("planted:emb_novalidate", "embedding")
    inputs, _ = conformance.checks.OPS["embedding"].example({"B": 1, "T": 2, "C": 3, "V": 4}, "float32",
                                                           __import__("numpy").random.default_rng(0))
    inputs["tokens"][0, 0] = 7  # out of range
    variant.load().forward(dict(inputs), {})  # the variant alone returns garbage, silently
    with pytest.raises(ValueError, match="embedding"):
        Kernel(variant).forward(dict(inputs), {})
    reject = conformance.run_variant_check(variant, "embedding", "reject")
    assert reject.status == PASSED, reject.message


def test_unavailable_variants_are_skipped_with_their_reason_never_passed(registry):
    report = conformance.run(backend="planted:needs_missing_module", registry=registry, model=False)
    assert report and {r.status for r in report} == {SKIPPED}
    assert all("a_module_that_is_not_installed not installed" in r.message for r in report)
    gpu = conformance.run(backend="planted:on_gpu", registry=registry, model=False)
    assert gpu and {r.status for r in gpu} == {SKIPPED}
    row = next(line for line in gpu.table().splitlines() if line.startswith("planted:on_gpu"))
    assert "SKIP" in row and "PASS" not in row
    assert gpu.ok  # skipped is not failed


def test_float32_only_variant_rejects_float64_and_skips_gradcheck(registry):
    report = conformance.run(backend="planted:float32_only", registry=registry, model=False)
    assert report.ok, report.table()
    assert {r.dtype for r in report if r.case} == {"float32"}
    (gradcheck,) = [r for r in report if r.check == "gradcheck"]
    assert gradcheck.status == SKIPPED and "float64" in gradcheck.message


def test_table_has_a_row_per_variant_and_op_and_a_column_per_check(registry):
    report = conformance.run(backend=["naive:reference", "planted:gelu_off"], ops=["gelu"], registry=registry)
    table = report.table()
    header = table.splitlines()[0].split()
    assert header[:3] == ["variant", "/", "op"]
    assert set(conformance.CASE_CHECKS) <= set(header)
    naive_row = next(line for line in table.splitlines() if line.startswith("naive:reference / gelu"))
    planted_row = next(line for line in table.splitlines() if line.startswith("planted:gelu_off / gelu"))
    assert "FAIL" not in naive_row and "PASS" in naive_row
    assert "FAIL" in planted_row and not report.ok


def test_model_row_runs_a_whole_training_step(registry):
    report = conformance.run(backend="naive", registry=registry, checks=["model_step"])
    (row,) = report
    assert (row.op, row.check, row.status) == ("model", "model_step", PASSED)


def test_selection_strings(registry):
    picked = conformance.select_variants("naive,gelu=planted:gelu_off", None, registry)
    by_op = {v.op: v.qualname for v in picked}
    assert by_op["gelu"] == "planted:gelu_off" and by_op["layernorm"] == "naive:reference"
    with pytest.raises(ValueError, match="nosuch"):
        conformance.select_variants("nosuch", None, registry)
    # op=none leaves a fused op out (the model composes it): no variant of it, the model row still runs
    composed = {v.op for v in conformance.select_variants("naive,crossentropy_onepass=none", None, registry)}
    assert "crossentropy_onepass" not in composed and "crossentropy" in composed
    report = conformance.run(backend="naive,crossentropy_onepass=none,classifier_crossentropy=none",
                             registry=registry, checks=["model_step"])
    assert [(r.op, r.status) for r in report] == [("model", PASSED)]


def test_cli_exit_status(registry, monkeypatch, capsys):
    import argparse

    monkeypatch.setattr(conformance.runner, "get_registry", lambda: registry)
    parser = argparse.ArgumentParser(prog="euler")
    cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["conformance", "--backend", "naive", "--op", "layernorm", "--case", "T1",
                              "--seed", "3", "--quiet"])
    assert args.func(args) == 0
    assert "naive:reference / layernorm" in capsys.readouterr().out
    args = parser.parse_args(["conformance", "--backend", "planted:gelu_off", "--op", "gelu", "--quiet"])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "rerun: euler conformance --backend planted:gelu_off --op gelu" in out
    args = parser.parse_args(["conformance", "--backend", "naive", "--op", "gelu", "--case", "nosuch"])
    assert args.func(args) == 2


class HalfPlugin:
    """Every op in float16 as a GPU kernel computes it: float32 arithmetic, each stored value rounded
    to float16 once (tests/float16_kernels.py). This exercises the float16 row of the tolerance
    table, which must be loose enough for that honest arithmetic and no looser."""

    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("half", "naive kernels in float32, stored in float16 (tests only)",
                        [Variant(op, "naive16", impl=f"float16_kernels:KERNELS.{op}", dtypes=("float16",))
                         for op in conformance.CASES])]


def test_float16_tolerances_pass_honest_float16_arithmetic():
    """Every case check, grad_buffer's refusal of a float32 activation buffer included; the verdict
    does not depend on the CPU (no NumPy float16 arithmetic: its transcendentals vary by SIMD path)."""
    registry = Registry(plugins=[HalfPlugin()], entry_points=False)
    report = conformance.run(backend="half", registry=registry, cases=["small", "T1", "prime", "extreme",
                                                                        "large-logits"], model=False)
    assert report.ok, report.table()
    assert {r.dtype for r in report if r.case} == {"float16"}
    assert {r.check for r in report if r.status == PASSED} >= set(conformance.CASE_CHECKS)


class MatmulRefusesFloat32Grads:
    """A float16 matmul that insists on float16 gradient buffers (the contract before mixed precision)."""

    forward = staticmethod(__import__("backends.naive.matmul", fromlist=["forward"]).forward)

    @staticmethod
    def backward(saved, dout, grads):
        from backends.naive import matmul
        if grads["weight"].dtype != saved.x.dtype:
            raise TypeError(f"matmul: grads['weight'] must have dtype {saved.x.dtype}, got {grads['weight'].dtype}")
        return matmul.backward(saved, dout, grads)


class MatmulRecordsGradDtypes:
    """The naive matmul in float16, as the contract wants it (an activation buffer of another dtype
    than x refused), noting the dtype of every gradient buffer it is given."""

    seen: list = []
    forward = staticmethod(MatmulRefusesFloat32Grads.forward)

    @classmethod
    def backward(cls, saved, dout, grads):
        from backends.naive import matmul
        cls.seen.append({k: str(v.dtype) for k, v in grads.items()})
        if grads.get("x") is not None and grads["x"].dtype != saved.x.dtype:
            raise TypeError(f"matmul: grads['x'] must have x's dtype {saved.x.dtype}, got {grads['x'].dtype}")
        return matmul.backward(saved, dout, grads)


class MixedPlugin:
    @hookimpl
    def nanoeuler_backends(self):
        here = "test_conformance_catches"
        return [Backend("mixed", "float16 variants (tests only)", [
            Variant("matmul", "half_grads", impl=f"{here}:MatmulRefusesFloat32Grads", dtypes=("float16",)),
            Variant("matmul", "recorded", impl=f"{here}:MatmulRecordsGradDtypes", dtypes=("float16",)),
            Variant("residual", "wide_buffer", impl="backends.naive.residual", dtypes=("float16",)),
        ])]


def test_float16_variants_get_float32_parameter_gradients():
    """Mixed precision: with 16-bit inputs the suite passes float32 parameter-gradient buffers
    (backward, accumulate, repeat ...), activation buffers in the inputs' dtype, and expects a
    float32 activation buffer to be refused."""
    registry = Registry(plugins=[MixedPlugin()], entry_points=False)
    MatmulRecordsGradDtypes.seen.clear()
    report = conformance.run(backend="mixed:recorded", registry=registry, cases=["small"], model=False)
    assert report.ok, report.table()
    seen = MatmulRecordsGradDtypes.seen
    assert seen and all(g["weight"] == g["bias"] == "float32" for g in seen)
    assert [g["x"] for g in seen if "x" in g] == ["float16", "float32"]  # grad_buffer's, then the refused one

    refuses = conformance.run(backend="mixed:half_grads", registry=registry, cases=["small"], model=False)
    assert {"backward", "accumulate"} <= _failed_checks(refuses), refuses.table()
    assert "must have dtype float16, got float32" in str(refuses.failures()[0])

    wide = conformance.run(backend="mixed:wide_buffer", registry=registry, cases=["small"], model=False)
    assert _failed_checks(wide) == {"grad_buffer"}, wide.table()
    assert "a float32 grads['a'] buffer with float16 inputs was accepted" in str(wide.failures()[0])


@pytest.mark.parametrize("selection", ["naive,layernorm=planted:ln_dx", "naive,gelu=planted:gelu_off"])
def test_model_step_catches_a_wrong_variant_inside_a_whole_model(registry, selection):
    """The model-level check sees a planted op bug through a full training step (the other ops from
    naive: named as the default, since with none the first-named backend, planted, would serve them)."""
    with pytest.raises(conformance.CheckFailed, match="parameter gradients differ"):
        conformance.check_model_step(selection, registry=registry, seed=0)
    conformance.check_model_step("naive", registry=registry, seed=0)  # and passes the reference


def test_stored_roundings_widen_only_the_16bit_rows():
    """A case's stored_roundings (mlp's: pre, then h = gelu(pre), both stored in 16 bits) multiplies the
    16-bit tolerance rows; float32 and float64 keep theirs, and a case that leaves it at 1 keeps the row."""
    from conformance.cases import get_case
    from conformance.checks import CaseContext
    from euler_core.numerics import tolerance

    variant = Variant("mlp", "ref", impl="backends.naive.mlp", device="cpu", dtypes=("float32", "float64", "bfloat16"))
    mlp_case = get_case("mlp", "C768-H3072-M768")
    assert mlp_case.stored_roundings == 2
    for dtype in ("bfloat16", "float32", "float64"):
        factor = 2 if dtype == "bfloat16" else 1
        for kind in ("forward", "gradient"):
            got, row = CaseContext(variant, "mlp", mlp_case, dtype, 0).tol(kind), tolerance(dtype, kind)
            assert (got.rtol, got.atol) == (row.rtol * factor, row.atol * factor), (dtype, kind)
    plain = CaseContext(variant, "matmul", get_case("matmul", "small"), "bfloat16", 0)
    assert plain.tol("gradient") == tolerance("bfloat16", "gradient")
