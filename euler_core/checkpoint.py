"""Checkpoints: the project's own format, written atomically, loaded without running any code.

A run directory holds numbered checkpoints and a pointer to the newest:

    RUN/latest                    the name of the newest checkpoint directory (replaced atomically)
    RUN/step_000500/model.npz     every parameter by its GPT-2 name (float32 or float64)
    RUN/step_000500/optimizer.npz AdamW's m and v (flat, the model's buffer layout) and its step count
    RUN/step_000500/meta.json     model config, dtype, step, training config, tokenizer, data position
    RUN/step_000500/<tokenizer files>

A checkpoint is written into a temporary directory, flushed, and renamed into place, then `latest`
is replaced: a kill at any moment leaves either the old checkpoint or the new one, never half of one.
Arrays are read with `allow_pickle=False`: a checkpoint someone sent you cannot execute code.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import GPTConfig

FORMAT = "nanoeuler-checkpoint-1"


class CheckpointError(ValueError):
    """A checkpoint that is missing, truncated, corrupt or does not fit the model."""


@dataclass
class Checkpoint:
    path: Path
    config: GPTConfig
    meta: dict
    params: dict          # name -> np.ndarray
    optimizer: dict | None  # {"m", "v", "step"} or None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_npz(path: Path, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(run_dir, step: int, model, optimizer=None, meta: dict | None = None,
                    tokenizer=None, keep: int = 2) -> Path:
    """Write checkpoint `step_{step:06d}` under `run_dir` atomically; keep the newest `keep`."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    final = run_dir / name
    tmp = run_dir / f".{name}.tmp{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    _write_npz(tmp / "model.npz", model.named_parameters())
    if optimizer is not None:
        from .device import to_device
        _write_npz(tmp / "optimizer.npz", {"m": to_device(optimizer.m, "cpu"), "v": to_device(optimizer.v, "cpu"),
                                           "step": np.array(optimizer.step_count)})
    full_meta = {"format": FORMAT, "step": step, "config": model.config.to_dict(), "dtype": model.dtype,
                 **(meta or {})}
    if tokenizer is not None:
        full_meta["tokenizer"] = tokenizer.to_checkpoint(tmp)
    with open(tmp / "meta.json", "w") as f:
        json.dump(full_meta, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if final.exists():  # a re-run of the same step replaces it
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = run_dir / f".latest.tmp{os.getpid()}"
    pointer.write_text(name + "\n")
    os.replace(pointer, run_dir / "latest")
    _fsync_dir(run_dir)
    for old in sorted(run_dir.glob("step_*"))[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def resolve_checkpoint(path) -> Path:
    """A checkpoint directory from either itself or a run directory (through its `latest`)."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    if (path / "latest").is_file():
        target = path / (path / "latest").read_text().strip()
        if not (target / "meta.json").is_file():
            raise CheckpointError(f"{path}/latest points to {target.name}, which is not a complete checkpoint")
        return target
    if not path.exists():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    raise CheckpointError(f"{path} is neither a checkpoint (no meta.json) nor a run directory (no 'latest')")


def _read_npz(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise CheckpointError(f"checkpoint file {path} is corrupt or truncated ({type(e).__name__}: {e})") from None


def load_checkpoint(path, with_optimizer: bool = True) -> Checkpoint:
    """Read a checkpoint (or a run directory's newest) and check it against its own config."""
    path = resolve_checkpoint(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}/meta.json is not valid JSON ({e})") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        config = GPTConfig.from_dict(meta["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/meta.json: bad model config ({e})") from None
    params = _read_npz(path / "model.npz")
    from .model import parameter_layout
    for name, shape in parameter_layout(config):
        if name not in params:
            raise CheckpointError(f"{path}/model.npz lacks parameter {name}")
        if params[name].shape != shape:
            raise CheckpointError(f"{path}/model.npz: {name} has shape {params[name].shape}, "
                                  f"config expects {shape}")
    optimizer = None
    if with_optimizer and (path / "optimizer.npz").exists():
        optimizer = _read_npz(path / "optimizer.npz")
        n = sum(int(np.prod(s)) for _, s in parameter_layout(config))
        if optimizer.get("m") is None or optimizer["m"].shape != (n,) or optimizer["v"].shape != (n,):
            raise CheckpointError(f"{path}/optimizer.npz does not match the model's {n} parameters")
    return Checkpoint(path, config, meta, params, optimizer)
