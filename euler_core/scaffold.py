"""`euler new-backend NAME`: write a working skeleton of an out-of-tree backend.

    euler new-backend mykernels                 # ./euler-mykernels/, one variant of gelu
    euler new-backend mykernels --op residual --dir ~/src

The skeleton is its own distribution (`euler-NAME`, package `euler_NAME`) with
    pyproject.toml            the entry point `NAME = "euler_NAME.plugin"` in group nanoeuler.backends
    euler_NAME/plugin.py      the one hook: a Backend NAME with one Variant
    euler_NAME/<op>.py        forward and backward of that op in plain NumPy (correct: it passes the
                              conformance suite as written; make it fast)
    tests/test_conformance.py runs the conformance suite on the backend
    README.md                 the three commands: install, list, check

Every op the backend does not offer falls back to naive. docs/adding-a-backend.md is the long form.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

OP_TEMPLATES = {
    "gelu": '''"""gelu for the {name} backend: GPT-2's tanh-approximated GELU, elementwise, in NumPy.

    out = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
    dx  = dout * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))

The contract (docs/op-contracts.md in nanoeuler): forward(inputs, attrs, out) -> (output, saved);
write every element of `out` when it is given; never modify inputs; backward(saved, dout, grads)
returns {{"x": dx}}, writing into grads["x"] when the core passes that buffer.
"""

import math
from dataclasses import dataclass

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # a Python float keeps float32 arrays float32
CUBIC = 0.044715


@dataclass
class Saved:
    x: np.ndarray  # (N,C) the input


def forward(inputs, attrs, out=None):
    x = inputs["x"]                                      # (N,C)
    u = SQRT_2_OVER_PI * (x + CUBIC * x ** 3)            # (N,C)
    y = 0.5 * x * (1.0 + np.tanh(u))                     # (N,C)
    if out is None:
        return y, Saved(x)
    out[...] = y
    return out, Saved(x)


def backward(saved, dout, grads):
    x = saved.x                                          # (N,C)
    t = np.tanh(SQRT_2_OVER_PI * (x + CUBIC * x ** 3))   # (N,C)
    dy_dx = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * x * x)
    dx = dout * dy_dx                                    # (N,C)
    buf = grads.get("x")
    if buf is None:
        return {{"x": dx}}
    buf[...] = dx                                        # activation gradients are overwritten
    return {{"x": buf}}
''',
    "residual": '''"""residual for the {name} backend: out = a + b; both gradients are dout.

The contract (docs/op-contracts.md in nanoeuler): forward(inputs, attrs, out) -> (output, saved);
write every element of `out` when it is given; never modify inputs; backward(saved, dout, grads)
returns {{"a": da, "b": db}}, writing into grads["a"] / grads["b"] when the core passes them.
"""

import numpy as np


def forward(inputs, attrs, out=None):
    a, b = inputs["a"], inputs["b"]                      # (N,C) each
    return np.add(a, b, out=out), None


def backward(saved, dout, grads):
    result = {{}}
    for name in ("a", "b"):
        buf = grads.get(name)
        if buf is None:
            result[name] = dout.copy()
        else:
            buf[...] = dout                              # activation gradients are overwritten
            result[name] = buf
    return result
''',
}

PLUGIN = '''"""The {name} backend's plugin: registers its variants with nanoeuler (entry point in pyproject.toml).

Keep this module light: it is imported whenever nanoeuler lists backends. Name each variant's module
as a string; heavy imports (numba, cupy, triton) belong in that module, and `requires=` lets the
registry say "X not installed" instead of failing.
"""

from euler_core.registry import Backend, Variant, hookimpl


@hookimpl
def nanoeuler_backends():
    return [Backend("{name}", "{description}", [
        Variant("{op}", "numpy", impl="{package}.{op}", device="cpu", dtypes=("float32", "float64"),
                description="plain NumPy: the starting point of the {name} backend"),
    ])]
'''

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{description}"
requires-python = ">=3.10"
dependencies = ["nanoeuler", "numpy"]

# How nanoeuler finds this backend: no change to nanoeuler itself.
[project.entry-points."nanoeuler.backends"]
{name} = "{package}.plugin"

[tool.setuptools]
packages = ["{package}"]
'''

TEST = '''"""The conformance suite on the {name} backend: every op it offers, every case, every dtype,
and a whole training step with the ops it lacks taken from naive."""

import conformance


def test_{name}_passes_conformance():
    report = conformance.run(backend="{name}")
    assert report.ok, report.table()
    assert any(r.status == "passed" for r in report)
'''

README = '''# {dist}

A nanoeuler backend: {description}. It offers `{op}` (variant `{name}:numpy`); every other op falls
back to nanoeuler's naive backend.

```bash
pip install -e .                                  # registers the entry point nanoeuler.backends: {name}
euler backends                                    # lists {name}
euler conformance --backend {name}                # the conformance suite (or: python -m pytest tests)
euler bench ops --backend {name} --ops {op} --shapes small --out bench-{name}
euler train --backend {name}                      # {op} from {name}, the rest from naive
```

Next: make `{package}/{op}.py` fast, add variants in `{package}/plugin.py` (one `Variant` each),
or more ops (one module per op, forward and backward side by side). See nanoeuler's
docs/adding-a-backend.md.
'''


def check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ValueError(f"new-backend: {name!r} is not a usable backend name: use lowercase letters, digits "
                         "and underscores, starting with a letter (it becomes a Python package name)")
    if name in ("auto", "all", "none"):
        raise ValueError(f"new-backend: {name!r} is reserved in --backend strings")


def new_backend(name: str, directory=".", op: str = "gelu", description: str | None = None,
                force: bool = False) -> Path:
    """Write the skeleton of backend `name` into DIRECTORY/euler-NAME and return that path."""
    check_name(name)
    if op not in OP_TEMPLATES:
        raise ValueError(f"new-backend: no template for op {op!r}; templates: {', '.join(OP_TEMPLATES)}")
    from .registry import get_registry
    if name in get_registry().backends:
        raise ValueError(f"new-backend: a backend named {name!r} is already installed; choose another name")
    dist, package = f"euler-{name.replace('_', '-')}", f"euler_{name}"
    root = Path(directory) / dist
    if root.exists() and any(root.iterdir()) and not force:
        raise ValueError(f"new-backend: {root} exists and is not empty (pass --force to overwrite its files)")
    description = description or f"{name} kernels for nanoeuler"
    if '"' in description or "\n" in description:
        raise ValueError("new-backend: the description must be one line without double quotes")
    fields = dict(name=name, dist=dist, package=package, op=op, description=description)
    files = {
        root / "pyproject.toml": PYPROJECT,
        root / "README.md": README,
        root / package / "__init__.py": '"""{description}: a nanoeuler backend (see plugin.py)."""\n',
        root / package / "plugin.py": PLUGIN,
        root / package / f"{op}.py": OP_TEMPLATES[op],
        root / "tests" / "test_conformance.py": TEST,
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields), encoding="utf-8")
    return root


def add_commands(sub) -> None:
    p = sub.add_parser("new-backend", help="write the skeleton of a new backend package",
                       description="Write a working skeleton of an out-of-tree backend: its own distribution "
                                   "with one variant of one op, the entry point nanoeuler finds it by, and a "
                                   "test that runs the conformance suite on it.")
    p.add_argument("name", help="the backend's name (lowercase, a Python identifier)")
    p.add_argument("--op", default="gelu", choices=sorted(OP_TEMPLATES), help="the op of its first variant")
    p.add_argument("--dir", default=".", help="where to create euler-NAME/ (default: here)")
    p.add_argument("--description", default=None, help="one line saying what the backend is")
    p.add_argument("--force", action="store_true", help="write into an existing, non-empty folder")
    p.set_defaults(func=_new_backend)


def _new_backend(args) -> int:
    root = new_backend(args.name, args.dir, args.op, args.description, args.force)
    print(f"wrote {root}\nnext:\n  pip install -e {root}\n  euler backends\n"
          f"  euler conformance --backend {args.name}\n  euler train --backend {args.name}")
    return 0
