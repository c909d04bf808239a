"""NanoEuler's cupy_raw backend: hand-written CUDA C for every GPT-2 op, compiled at run time by
CuPy's RawModule (NVRTC) and launched on CuPy arrays.

Each op is one Python launcher (`<op>.py`: checks, allocation, launch configuration) beside one CUDA
source (`<op>.cu`: every variant's kernels, its header listing them); `common.cuh` holds what the
sources share, and `_runtime.py` compiles, caches and launches them. No module here is imported
until a variant of this backend is used (plugin.py names them by string). See plugin.py for the
variants and docs/walkthrough/cuda.md for a tour.
"""
