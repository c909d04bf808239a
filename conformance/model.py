"""The model-level check: a whole GPT-2 training step with a backend selection against float64 naive.

`check_model_step(kernels_text, registry, seed, dtype)` builds one small GPT twice from the same
weights, once on the selection's kernels (in float32, or bfloat16/float16: mixed precision, float32
master weights and gradients) and once on naive in float64,
runs the same batch through forward (the loss) and backward (every parameter gradient), and compares
them with the gradient tolerance of the dtype, loosened by MODEL_SLACK: errors compound through the
layers of a whole model in a way that a single op's tolerance does not allow for. A float16 or
bfloat16 model must hold its parameter gradients in float32 (mixed precision: the buffers it passes
its kernels are float32; `arrays.param_grad_dtype`).

The model's shape is awkward on purpose: C = 36 (not a multiple of 32), T = 13 (prime), a padded
vocabulary, and ignored (-1) targets.
"""

from __future__ import annotations

import numpy as np

from euler_core.device import to_device

from .arrays import CheckFailed, CheckSkipped, compare, param_grad_dtype
from .tolerances import Tol, tolerance

MODEL_SLACK = 10.0  # a whole model's rounding, relative to one op's tolerance


def check_model_step(kernels_text: str, registry=None, seed: int = 0, dtype: str | None = None) -> None:
    """Loss and every parameter gradient of one training step with `kernels_text`, against the
    float64 naive run. Raises CheckFailed naming the worst parameter, or CheckSkipped with a reason."""
    from euler_core.config import GPTConfig
    from euler_core.kernels import Kernels, SelectionError
    from euler_core.model import GPT

    dtype = dtype or "float32"
    try:
        kernels = Kernels(kernels_text, dtype=dtype, registry=registry)
    except SelectionError as e:
        raise CheckSkipped(f"selection {kernels_text!r} cannot run a {dtype} model here: {e}") from None
    config = GPTConfig(n_layer=2, n_head=3, n_embd=36, block_size=16, vocab_size=37, vocab_multiple=8)
    reference = GPT(config, Kernels("naive", dtype="float64", registry=registry), dtype="float64", seed=seed)
    rng = np.random.default_rng(seed)
    for p in reference.params.values():  # move off the init so every parameter matters
        p[...] += rng.normal(0.0, 0.05, p.shape)
    reference.params["wte.weight"][config.vocab_size:] = 0.0
    model = GPT(config, kernels, dtype=dtype, seed=None)
    model.load_parameters(reference.named_parameters())
    # the reference sees exactly the rounded weights the kernels see (the 16-bit working copies in
    # mixed precision)
    reference.load_parameters({k: to_device(v, "cpu").astype(np.float64) for k, v in model.params.items()})

    tokens = rng.integers(0, config.vocab_size, size=(3, 13))
    targets = rng.integers(0, config.vocab_size, size=(3, 13))
    targets[rng.random(targets.shape) < 0.2] = -1
    _, ref_loss = reference.forward(tokens, targets)
    reference.zero_grad()
    reference.backward()
    _, loss = model.forward(tokens, targets)
    model.zero_grad()
    model.backward()

    wrong = {name: str(g.dtype) for name, g in model.grads.items() if str(g.dtype) != param_grad_dtype(dtype)}
    if wrong:
        raise CheckFailed(f"a {dtype} model must keep its parameter gradients in {param_grad_dtype(dtype)}; "
                          f"{len(wrong)} are not, e.g. {next(iter(wrong.items()))}")
    variant_dtypes = set().union(*(v.dtypes for v in kernels.variants.values()))
    fwd, grad = (tolerance(dtype, kind, variant_dtypes) for kind in ("forward", "gradient"))
    compare("loss", np.array([loss]), np.array([ref_loss]), Tol(fwd.rtol * MODEL_SLACK, fwd.atol * MODEL_SLACK))
    slack = Tol(grad.rtol * MODEL_SLACK, grad.atol * MODEL_SLACK)
    failures = []
    for name, ref_grad in reference.grads.items():
        try:
            compare(f"gradient of {name}", model.grads[name], ref_grad, slack)
        except CheckFailed as e:
            failures.append(str(e))
    if failures:
        raise CheckFailed(f"{len(failures)} of {len(reference.grads)} parameter gradients differ; first: {failures[0]}")


#: the checks of a model row, by column name; each is fn(kernels_text, registry, seed)
MODEL_CHECKS = {
    "model_step": check_model_step,
}
