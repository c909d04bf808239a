"""The model-level check: a whole GPT-2 training step with a backend selection against float64 naive.

`check_model_step(kernels_text, registry, seed)` is the hook the runner calls for the "model" row of
a report (one row per backend selection). It should build a small GPT (euler_core.model.GPT) twice
from the same weights, once with `kernels_text` in the selection's dtype and once with "naive" in
float64, run forward (loss) and backward on the same batch, and compare the loss and every named
parameter gradient with the gradient tolerance of the dtype (conformance.tolerances). It raises
CheckFailed naming the worst parameter, or CheckSkipped with a reason.

The model is the lead's (euler_core/model.py); until this check is written it reports SKIPPED with
that reason, never PASS. More model-level checks (an optimizer step, generation) go in MODEL_CHECKS:
each is a column of the model row.
"""

from __future__ import annotations

from .arrays import CheckSkipped


def check_model_step(kernels_text: str, registry=None, seed: int = 0, dtype: str | None = None) -> None:
    """Loss and every parameter gradient of one training step with `kernels_text`, against the
    float64 naive run. Not written yet: reported as skipped."""
    raise CheckSkipped("model-level check not written yet (euler_core.model.GPT is the lead's; "
                       "see conformance/model.py)")


#: the checks of a model row, by column name; each is fn(kernels_text, registry, seed)
MODEL_CHECKS = {
    "model_step": check_model_step,
}
