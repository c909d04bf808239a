"""PyTorch's own kernels as the nanoeuler backend `torch`, for benchmarking beside ours (see plugin.py)."""
