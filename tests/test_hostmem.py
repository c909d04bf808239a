"""Training keeps freed host memory for the next step (glibc), so steps do not page-fault afresh."""

import platform
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the setting is glibc's malloc's; elsewhere keep_freed_memory() does nothing")
def test_steps_stop_faulting_in_fresh_pages_once_memory_is_kept():
    # a fresh process, as the setting is process-wide: 64 MB allocated and freed per 'step'
    code = textwrap.dedent("""
        import resource, numpy as np
        from euler_core.hostmem import keep_freed_memory

        def faults_per_step():
            counts = []
            for _ in range(4):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                arrays = [np.ones(1 << 20, np.float32) for _ in range(16)]   # 16 x 4 MB
                del arrays
                counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            return min(counts[1:])

        before = faults_per_step()
        assert keep_freed_memory() is True
        faults_per_step()                     # the first step after the change grows the heap once
        print(before, faults_per_step())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = map(int, out.split())
    assert before > 4_000, f"expected fresh pages each step before the change, saw {before} faults"
    assert after < before // 20, f"{after} faults a step after keep_freed_memory() (before: {before})"
