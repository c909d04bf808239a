"""NanoEuler's Triton backend: hand-written Triton kernels for every GPT-2 op, run on CuPy arrays.

No module here is imported until a variant of this backend is used (plugin.py names them by
string); `_runtime` then imports triton and, on the first GPU launch, cupy. See plugin.py for the
variants and docs/walkthrough/triton.md for a tour.
"""
