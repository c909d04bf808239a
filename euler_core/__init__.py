"""NanoEuler's core: GPT-2's ops as specifications, the backend registry, the model, training,
checkpoints, generation, tokenizer and data.

The Python API, importable from here (each name is imported on first use, so `import euler_core`
stays cheap and never imports a GPU library):

    GPTConfig, preset, PRESETS        model shapes            (euler_core.config)
    Kernels                           a --backend selection    (euler_core.kernels)
    GPT                               the model                (euler_core.model)
    AdamW                             the optimizer            (euler_core.optim)
    TrainConfig, train                pretraining              (euler_core.train)
    generate                          sampling                 (euler_core.generate)
    save_checkpoint, load_checkpoint  checkpoints              (euler_core.checkpoint)
    OPS                               the op specs             (euler_core.ops)
    get_registry                      installed backends       (euler_core.registry)
"""

from importlib import import_module

_EXPORTS = {
    "GPTConfig": "config", "preset": "config", "PRESETS": "config",
    "Kernels": "kernels", "GPT": "model", "AdamW": "optim",
    "TrainConfig": "train", "train": "train", "generate": "generate",
    "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
    "OPS": "ops", "get_registry": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'euler_core' has no attribute {name!r}")
