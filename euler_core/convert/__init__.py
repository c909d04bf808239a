"""Checkpoints in and out: llm.c's model `.bin` and Hugging Face GPT-2 weights (safetensors).

    import_weights("gpt2_124M.bin", "runs/gpt2")              # -> runs/gpt2/step_000000, our format
    import_weights("hf/gpt2", "runs/gpt2", tokenizer="gpt2")  # a model.safetensors (+ config.json)
    export_weights("runs/sft", "out/model.bin", "llmc")       # or "llmc-bf16", "hf", "hf-bf16"

`llmc.py` and `hf.py` hold the two layouts, `safetensors.py` the file format; nothing here uses
pickle or runs code from a file. An imported checkpoint is a run directory like any other:
`euler sft --init`, `euler generate --checkpoint` and `euler train --resume` read it.
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import checkpoints, load_checkpoint, save_checkpoint
from ..config import GPTConfig
from ..rundir import clean_leftovers, run_lock
from ..values import output_dir, output_file

FORMATS = ("llmc", "llmc-bf16", "hf", "hf-bf16")


class _Weights:
    """What save_checkpoint needs of a model, without allocating one (and its gradient buffer)."""

    def __init__(self, config: GPTConfig, params: dict):
        self.config, self.params, self.dtype = config, params, "float32"

    def named_parameters(self) -> dict:
        return self.params


def detect_format(path) -> str:
    """'llmc' or 'hf' from the file's first bytes (or a directory holding model.safetensors)."""
    path = Path(path)
    if path.is_dir():
        return "hf"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or directory")
    with open(path, "rb") as f:
        head = f.read(8)
    import numpy as np
    if len(head) >= 4 and int(np.frombuffer(head[:4], "<i4")[0]) == 20240326:
        return "llmc"
    if path.suffix == ".safetensors" or (len(head) == 8 and head[:8] != b"\0" * 8):
        return "hf"
    raise ValueError(f"{path}: neither an llm.c model file nor safetensors")


def read_weights(path, fmt: str | None = None, n_head: int | None = None):
    """(config, named float32 parameters, notes) from an llm.c .bin or Hugging Face safetensors."""
    fmt = fmt or detect_format(path)
    if fmt == "llmc":
        from .llmc import read_llmc
        config, params, dtype = read_llmc(path)
        return config, params, [f"llm.c model file, {dtype}"]
    if fmt == "hf":
        from .hf import load_hf
        return load_hf(path, n_head=n_head)
    raise ValueError(f"unknown weights format {fmt!r}; known: llmc, hf")


def import_weights(src, out_dir, fmt: str | None = None, tokenizer=None, n_head: int | None = None,
                   log=print) -> Path:
    """Read weights (llm.c or Hugging Face) and write them as our checkpoint `out_dir/step_000000`.

    tokenizer: a tokenizer object, a `load_tokenizer` spec ('gpt2', 'bytes', a .tiktoken path), or
    None: 'gpt2' for GPT-2's vocabulary of 50257 when its ranks are on this machine, else none
    (then give `euler sft --tokenizer`).
    """
    config, params, notes = read_weights(src, fmt, n_head)
    for note in notes:
        log(f"note: {note}")
    if tokenizer is None and config.vocab_size == 50257:
        try:
            from ..tokenizer import load_tokenizer
            tokenizer = load_tokenizer("gpt2")
        except (FileNotFoundError, ValueError) as e:
            log(f"note: GPT-2's vocabulary size, but its tokenizer is not on this machine ({e}); "
                "the checkpoint records no tokenizer")
    elif isinstance(tokenizer, (str, Path)):
        from ..tokenizer import load_tokenizer
        tokenizer = load_tokenizer(tokenizer)
    if tokenizer is not None and tokenizer.n_vocab != config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.n_vocab} ids but the weights' vocabulary is {config.vocab_size}")
    out = output_dir(out_dir, "--out")
    with run_lock(out, "euler import"):
        if (out / "latest").exists() or checkpoints(out):
            raise ValueError(f"--out: {out} already holds a run; choose another --out")
        clean_leftovers(out, log)
        meta = {"imported_from": {"path": str(src), "format": fmt or detect_format(src)}}
        path = save_checkpoint(out, 0, _Weights(config, params), meta=meta, tokenizer=tokenizer)
    log(f"imported {src}: {config.n_layer} layers, {config.n_head} heads, {config.n_embd} channels, "
        f"vocabulary {config.vocab_size} (padded {config.padded_vocab_size}), context {config.block_size} -> {path}")
    return path


def export_weights(checkpoint, dst, fmt: str, log=print) -> Path:
    """Write a checkpoint's weights as llm.c's .bin ('llmc', 'llmc-bf16') or Hugging Face's layout
    ('hf', 'hf-bf16': `dst` is a directory that gets model.safetensors and config.json)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt.startswith("llmc"):
        output_file(dst, "--out")
    else:
        output_dir(dst, "--out")
    ckpt = load_checkpoint(checkpoint, with_optimizer=False)
    dtype = "bfloat16" if fmt.endswith("-bf16") else "float32"
    if fmt.startswith("llmc"):
        from .llmc import write_llmc
        path = write_llmc(dst, ckpt.config, ckpt.params, dtype)
    else:
        from .hf import save_hf
        path = save_hf(dst, ckpt.config, ckpt.params, dtype)
    log(f"exported {ckpt.path} as {fmt} ({dtype}) -> {path}")
    return path
