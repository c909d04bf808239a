"""PyTorch as NanoEuler's reference, for benchmarking beside ours: its kernels as the nanoeuler backend
`torch` (plugin.py), and the reference GPT-2 that whole training steps and runs are measured against
(gpt2.py, with the torch-free mapping of our parameter names in weights.py)."""
