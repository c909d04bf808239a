"""The core's import path stays light: no GPU library, no numba, no plotting until a variant or a
command needs them. And the core is a layer below the conformance suite and the backends: it names
neither (docs/architecture.md)."""

import ast
import subprocess
import sys
from pathlib import Path

HEAVY = ("numba", "cupy", "triton", "torch", "matplotlib")


def _heavy_modules_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has imported after running `code`."""
    code += f"\nimport sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip()


def test_core_import_and_backend_listing_import_nothing_heavy():
    code = ("import euler_core\n"
            "from euler_core.registry import get_registry\n"
            "from euler_core.cli import main\n"
            "r = get_registry(); [v.unavailable_reason() for v in r.variants() if v.device == 'cpu']")
    assert _heavy_modules_after(code) == "[]"


def test_euler_help_imports_no_gpu_library():
    code = ("import contextlib, io\n"
            "from euler_core.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])")
    assert _heavy_modules_after(code) == "[]"


# ---- layering: the core names neither the conformance suite nor a backend ------------------------------
CORE = Path(__file__).resolve().parent.parent / "euler_core"
UPPER = ("conformance", "backends")


def _named_modules(tree: ast.AST, path: Path):
    """(line, module) of every module a file names: import statements (relative ones resolved), and
    the string arguments of importlib.import_module / __import__ / find_spec calls."""
    package = ".".join(path.relative_to(CORE.parent).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from x import y` names x.y (y may be a module)
                yield node.lineno, f"{module}.{alias.name}"
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__", "find_spec") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value
                elif isinstance(arg, ast.JoinedStr):  # f"backends.naive.{op}": its literal head
                    yield node.lineno, "".join(v.value for v in arg.values if isinstance(v, ast.Constant))


def test_the_core_imports_neither_conformance_nor_a_backend():
    offences = []
    files = sorted(CORE.rglob("*.py"))
    assert len(files) > 50
    for path in files:
        rel = path.relative_to(CORE).as_posix()
        for line, module in _named_modules(ast.parse(path.read_text(), str(path)), path):
            top = module.split(".")[0]
            if top in UPPER:
                offences.append(f"euler_core/{rel}:{line} names {module}")
    assert not offences, "the core reaches up a layer:\n" + "\n".join(offences)


def test_the_layering_check_sees_every_way_of_naming_a_module(tmp_path):
    source = ("import conformance\nfrom backends.naive import gelu\nimport importlib\n"
              "importlib.import_module(f'backends.naive.{op}')\n__import__('conformance.runner')\n")
    path = CORE / "bench" / "example.py"  # where such a file would be; it is only parsed
    named = [m for _, m in _named_modules(ast.parse(source), path)]
    assert {"conformance", "backends.naive.gelu", "backends.naive.", "conformance.runner"} <= set(named)
    relative = [m for _, m in _named_modules(ast.parse("from ..kernels import Kernel\n"), path)]
    assert relative == ["euler_core.kernels.Kernel"]
