"""The pytest plugin of the conformance suite: its command-line options.

Registered through the entry point (pyproject.toml)

    [project.entry-points.pytest11]
    nanoeuler = "conformance.plugin"

so that, in an installed project, from any directory:

    pytest --pyargs conformance                              # every installed backend
    pytest --pyargs conformance --euler-backend numba        # one backend (repeatable)
    pytest --pyargs conformance --euler-backend numba --euler-seed 3 -k layernorm

Without the entry point, load it by hand: `pytest -p conformance.plugin --pyargs conformance ...`;
the environment variables EULER_BACKEND and EULER_SEED are read when the options are absent.
The tests themselves (and their parametrisation) are in conformance/test_conformance.py.
"""

from __future__ import annotations

import os


def pytest_addoption(parser):
    group = parser.getgroup("nanoeuler", "NanoEuler conformance suite")
    group.addoption("--euler-backend", action="append", default=None, metavar="NAME",
                    help="check this backend, variant (backend:variant) or selection (repeatable; "
                         "default: every installed backend, or $EULER_BACKEND)")
    group.addoption("--euler-seed", type=int, default=None, metavar="SEED",
                    help="seed of the random inputs (default 0, or $EULER_SEED)")


def backends_option(config) -> list[str] | None:
    """The --euler-backend values, or $EULER_BACKEND (comma-free names separated by spaces), or None."""
    try:
        value = config.getoption("euler_backend")
    except ValueError:  # the plugin is not loaded: only the environment
        value = None
    if not value and os.environ.get("EULER_BACKEND"):
        value = os.environ["EULER_BACKEND"].split()
    return value or None


def seed_option(config) -> int:
    try:
        value = config.getoption("euler_seed")
    except ValueError:
        value = None
    if value is None:
        value = int(os.environ.get("EULER_SEED", "0"))
    return value
