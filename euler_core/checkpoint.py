"""Checkpoints: the project's own format, written so no kill loses one, loaded without running code.

A run directory holds numbered checkpoints and a pointer to the newest (rundir.py has the rest):

    RUN/latest                    the name of the newest checkpoint directory (replaced atomically)
    RUN/step_000500/model.npz     every parameter by its GPT-2 name (float32 or float64)
    RUN/step_000500/optimizer.npz AdamW's m and v (flat, the model's buffer layout) and its step count
    RUN/step_000500/meta.json     model config, dtype, step, training config, tokenizer, data position
    RUN/step_000500/<tokenizer files>

Writing (save_checkpoint): every file goes into a hidden temporary directory, fsynced, and the
directory is renamed into place; then `latest` is replaced (write-then-rename); then checkpoints
beyond the newest `keep` are deleted (renamed to a trash name first, files.remove_tree). A kill at
any moment therefore leaves every checkpoint that `latest` named complete. A failed write (a full
disk) removes its temporary directory and raises CheckpointWriteError; the older checkpoints stand.

Reading (load_checkpoint): `latest` names the checkpoint; if it names none that is complete (a
checkpoint directory renamed in before a kill could replace `latest`, or a hand-edited pointer),
the newest complete `step_*` is used. Before any array is decompressed, every member of the
`.npz` files is checked against what the config needs: its name (no unknown members), its shape
and dtype from the .npy header, and its size against the bytes the file really holds, so a small
crafted file cannot make the loader allocate much more than its own size. Arrays are read with
`allow_pickle=False`, metadata as JSON: a checkpoint someone sent you cannot execute code.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import GPTConfig
from .files import (fsync_dir, make_dir, parse_json, remove_tree, rename, temporary_path, write_atomic,
                    write_text_atomic)

FORMAT = "nanoeuler-checkpoint-1"
STEP_NAME = re.compile(r"step_(\d{6,})")
MAX_EXPANSION = 32  # a compressed .npz member may hold at most this many times its stored bytes


class CheckpointError(ValueError):
    """A checkpoint that is missing, truncated, corrupt or does not fit the model."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed (a full disk, a read-only directory); the older ones stand."""


@dataclass
class Checkpoint:
    path: Path
    config: GPTConfig
    meta: dict
    params: dict          # name -> np.ndarray
    optimizer: dict | None  # {"m", "v", "step"} or None


def step_name(step: int) -> str:
    return f"step_{step:06d}"


def checkpoints(run_dir) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint in a run directory, oldest first (by number,
    so step_1000000 comes after step_999990)."""
    found = []
    for path in Path(run_dir).glob("step_*"):
        m = STEP_NAME.fullmatch(path.name)
        if m and (path / "meta.json").is_file():
            found.append((int(m.group(1)), path))
    return sorted(found)


def _write_npz(path: Path, arrays: dict) -> None:
    write_atomic(path, lambda f: np.savez(f, **arrays))


def save_checkpoint(run_dir, step: int, model, optimizer=None, meta: dict | None = None,
                    tokenizer=None, keep: int = 2) -> Path:
    """Write checkpoint `step_{step:06d}` under `run_dir` (see the module docstring); keep the newest
    `keep` (and always the new one)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        run_dir.mkdir(parents=True)
    name = step_name(step)
    final = run_dir / name
    tmp = temporary_path(final)
    previous = load_pointer(run_dir)
    try:
        remove_tree(tmp)
        make_dir(tmp)
        _write_npz(tmp / "model.npz", model.named_parameters())
        if optimizer is not None:
            from .device import to_device
            _write_npz(tmp / "optimizer.npz", {"m": to_device(optimizer.m, "cpu"), "v": to_device(optimizer.v, "cpu"),
                                               "step": np.array(optimizer.step_count)})
        full_meta = {"format": FORMAT, "step": step, "config": model.config.to_dict(), "dtype": model.dtype,
                     **(meta or {})}
        if tokenizer is not None:
            full_meta["tokenizer"] = tokenizer.to_checkpoint(tmp)
        write_text_atomic(tmp / "meta.json", json.dumps(full_meta, indent=2) + "\n")
        fsync_dir(tmp)
        if final.exists():  # left by a run killed between this rename and `latest` (never the one it names)
            remove_tree(final)
        rename(tmp, final)
        write_text_atomic(run_dir / "latest", name + "\n")
    except BaseException as e:
        remove_tree(tmp)
        if isinstance(e, OSError):
            kept = f"the newest complete checkpoint is still {previous}" if previous else "there was none before"
            raise CheckpointWriteError(f"writing checkpoint {final} failed ({e.strerror or e}); {kept}") from None
        raise
    for old_step, old in checkpoints(run_dir)[:-keep] if keep > 0 else []:
        if old_step != step:
            remove_tree(old)
    return final


def load_pointer(run_dir) -> str | None:
    """The checkpoint name `latest` holds, when it holds a checkpoint name."""
    try:
        name = (Path(run_dir) / "latest").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return name if STEP_NAME.fullmatch(name) else None


def resolve_checkpoint(path) -> Path:
    """A checkpoint directory from either itself or a run directory (its `latest`, else its newest)."""
    path = Path(path)
    if (path / "meta.json").is_file():
        return path
    if not path.exists():
        raise CheckpointError(f"checkpoint {path}: no such directory")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: not a directory")
    name = load_pointer(path)
    if name is not None and (path / name / "meta.json").is_file():
        return path / name
    found = checkpoints(path)
    if found:
        return found[-1][1]
    if (path / "latest").exists():
        raise CheckpointError(f"{path}/latest points to {name or 'nothing usable'}, which is not a complete "
                              "checkpoint, and the run holds no other")
    raise CheckpointError(f"{path} is neither a checkpoint (no meta.json) nor a run directory (no 'latest')")


def _corrupt(path: Path, e: Exception) -> CheckpointError:
    return CheckpointError(f"checkpoint file {path} is corrupt or truncated ({type(e).__name__}: {e})")


def _member_count(path: Path) -> int:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        with zipfile.ZipFile(path) as zf:
            return len(zf.infolist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise _corrupt(path, e) from None


def _read_npz(path: Path, expected: dict) -> dict:
    """The members of an .npz whose names, shapes, dtype kinds and sizes are `expected`
    ({name: (shape, kinds)}), each checked before anything is decompressed."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as zf:
            infos = {i.filename: i for i in zf.infolist()}
            members = {n[:-4] for n in infos if n.endswith(".npy")}
            unknown = sorted(members - set(expected)) + sorted(n for n in infos if not n.endswith(".npy"))
            missing = [n for n in expected if n not in members]
            if unknown or missing:
                raise CheckpointError(f"{path}: " + "; ".join(
                    ([f"unknown member(s) {unknown[:5]}"] if unknown else []) +
                    ([f"lacks {missing[:5]}{' ...' if len(missing) > 5 else ''}"] if missing else [])))
            out = {}
            for name, (shape, kinds) in expected.items():
                info = infos[name + ".npy"]
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version not in ((1, 0), (2, 0)):
                        raise CheckpointError(f"{path}: {name} is a .npy of version {version}, expected 1.0 or 2.0")
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    got_shape, _, dtype = read(f)
                if got_shape != tuple(shape):
                    raise CheckpointError(f"{path}: {name} has shape {got_shape}, config expects {tuple(shape)}")
                if dtype.kind not in kinds or dtype.hasobject:
                    raise CheckpointError(f"{path}: {name} has dtype {dtype}, expected "
                                          f"{'a float' if kinds == 'f' else 'an integer'} dtype")
                needed = math.prod(shape) * dtype.itemsize
                stored = min(info.compress_size, size)
                if needed > (stored if info.compress_type == zipfile.ZIP_STORED else MAX_EXPANSION * stored) + 4096:
                    raise CheckpointError(f"{path}: {name} claims {needed:,} bytes of data but the file holds "
                                          f"{stored:,} for it: refused before allocating")
                with zf.open(info) as f:
                    out[name] = np.lib.format.read_array(f, allow_pickle=False)
            return out
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise _corrupt(path, e) from None


def _field(meta: dict, key: str, kind, path: Path):
    value = meta.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CheckpointError(f"{path}/meta.json: '{key}' is {value!r}, expected {kind.__name__}")
    return value


def load_checkpoint(path, with_optimizer: bool = True) -> Checkpoint:
    """Read a checkpoint (or a run directory's newest) and check it against its own config."""
    path = resolve_checkpoint(path)
    meta = parse_json((path / "meta.json").read_bytes(), f"{path}/meta.json", CheckpointError)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}/meta.json holds {type(meta).__name__}, expected a JSON object")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if _field(meta, "step", int, path) < 0:
        raise CheckpointError(f"{path}/meta.json: step {meta['step']} is negative")
    try:
        config = GPTConfig.from_dict(_field(meta, "config", dict, path))
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/meta.json: bad model config ({e})") from None
    from .model import parameter_layout
    members = _member_count(path / "model.npz")
    if 12 * config.n_layer + 4 > members:  # checked before a layout is built from a crafted n_layer
        raise CheckpointError(f"{path}/model.npz holds {members} arrays; the config's {config.n_layer} layers "
                              f"need {12 * config.n_layer + 4}")
    layout = parameter_layout(config)
    params = _read_npz(path / "model.npz", {name: (shape, "f") for name, shape in layout})
    optimizer = None
    if with_optimizer and (path / "optimizer.npz").exists():
        n = sum(math.prod(s) for _, s in layout)
        optimizer = _read_npz(path / "optimizer.npz", {"m": ((n,), "f"), "v": ((n,), "f"), "step": ((), "iu")})
        if int(optimizer["step"]) < 0:
            raise CheckpointError(f"{path}/optimizer.npz: step {int(optimizer['step'])} is negative")
    return Checkpoint(path, config, meta, params, optimizer)



def saved_settings(checkpoint: Checkpoint, key: str, config_class):
    """The settings a checkpoint recorded under meta[key] ("train", "sft"), checked like flags, so a
    crafted or damaged meta.json is refused with the setting it gets wrong. Unknown fields (from
    another version) are ignored; missing ones take their defaults."""
    from dataclasses import fields

    from .values import check_settings
    saved = checkpoint.meta.get(key)
    if not isinstance(saved, dict):
        raise CheckpointError(f"{checkpoint.path}/meta.json: '{key}' is {type(saved).__name__}, expected an object")
    known = {f.name for f in fields(config_class)}
    cfg = config_class(**{k: v for k, v in saved.items() if k in known})
    try:
        check_settings(cfg, f"{checkpoint.path}/meta.json")
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return cfg
