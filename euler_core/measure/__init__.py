"""Benchmarks, behind the `euler bench` commands: time kernels on the device at hand, keep tidy
records, render reports, pick `auto`. (The top-level bench/ is the one tree of benchmark scripts:
device runs, sweeps, the PyTorch reference; this package is the product's measuring code.)

    shapes.py   the named shape sets (small, mid, gpt2, gpt2-b32); where CPU variants stop (host reference)
    timing.py   warm-up, batches of back-to-back calls (CUDA events on the GPU), rotated inputs
    peaks.py    the device's measured ceilings: a large matmul, a large copy
    ops.py      `euler bench ops`: check each variant on the inputs it is timed on, then time it
    records.py  one JSON record per measurement; where runs are kept (the bench cache)
    report.py   `euler bench report`: markdown, roofline and speedup plots, run comparisons
    auto.py     `--backend auto`: the fastest variant that passed on this device
    profile.py  `euler bench step`: a training run timed op by op (where a step's time goes)
    train.py    `euler bench train`: whole training steps per selection and batch size, beside PyTorch
    quality.py  `euler bench quality`: ours and PyTorch trained from the same weights on the same batches
    workers.py  the worker processes those two run each measurement in, and the PyTorch reference's command
    cli.py      the `euler bench` commands

Nothing here is imported by the core until a bench command or `--backend auto` runs.
"""
