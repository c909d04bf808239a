"""The numba backend: every GPT-2 op as Numba JIT kernels on the CPU.

Each file holds one op's forward and backward side by side, like backends/naive, and says at its
top how it differs from the naive version. What the kernels have in common (_jit.py):

- `@njit(parallel=True)` with `prange` over independent rows, heads or column blocks, so both cores
  work; reductions that cross rows (dweight, dbias) go into one partial row per thread, summed after.
- Fused loops: one kernel reads a row once and writes its result once (layernorm forward and
  backward, cross-entropy with its logsumexp, GELU, AdamW); no NumPy temporaries in between.
- A float32 exponential of our own (_jit.fexp): arithmetic only, so LLVM vectorises the loops that
  call it (libm's expf is a scalar call); float64 keeps math.exp.
- `cache=True`: compiled machine code lands in backends/numba/__pycache__ and the next process
  loads it instead of compiling (about 0.2 s instead of tens of seconds).

Nothing here is imported until a numba variant is first used: plugin.py names the modules as
strings and never imports numba itself.
"""
