"""The `example` backend: one variant of one op, registered the way any third-party backend is.

nanoeuler loads this module through the entry point in this distribution's pyproject.toml (group
`nanoeuler.backends`). It offers `gelu` only; every other op falls back to nanoeuler's naive backend,
and `euler backends` says so. The module stays light (no heavy imports): it is imported whenever
nanoeuler lists its backends.
"""

from euler_core.registry import Backend, Variant, hookimpl


@hookimpl
def nanoeuler_backends():
    return [Backend("example", "an out-of-tree example: GELU in NumPy, sigmoid form, in cache-sized chunks", [
        Variant("gelu", "sigmoid", impl="euler_example_backend.gelu", device="cpu",
                dtypes=("float32", "float64"),
                description="x * sigmoid(2u) instead of 0.5 x (1 + tanh u); chunks of 16K elements"),
    ])]
