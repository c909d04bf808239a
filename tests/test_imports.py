"""The core's import path stays light: no GPU library, no numba, no plotting until a variant or a
command needs them."""

import subprocess
import sys

HEAVY = ("numba", "cupy", "triton", "torch", "matplotlib")


def test_core_import_and_backend_listing_import_nothing_heavy():
    code = ("import sys, euler_core\n"
            "from euler_core.registry import get_registry\n"
            "from euler_core.cli import main\n"
            "r = get_registry(); [v.unavailable_reason() for v in r.variants() if v.device == 'cpu']\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"heavy modules imported: {out}"
