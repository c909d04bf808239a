"""Pretraining: the loop, its schedule, evaluation, samples, checkpoints and metrics.

`train(TrainConfig(...))` is what `euler train` runs. With no data given it trains on the embedded
default corpus (the Python standard library's source) with the default tokenizer, so the first run
on a fresh machine needs no download.

Every optimizer step: zero the gradients, run `grad_accum` micro-batches (forward, backward with the
loss scaled by 1/grad_accum, gradients accumulating), clip the global gradient norm, and take one
AdamW step at the scheduled learning rate. Batches are a pure function of (seed, step), and the
checkpoint holds the parameters, AdamW's moments and the step: a resumed run computes the same
losses as one that was never interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from .checkpoint import load_checkpoint, save_checkpoint
from .config import GPTConfig, preset
from .data.loader import TokenSource
from .generate import generate
from .hostmem import keep_freed_memory
from .kernels import Kernels
from .model import GPT
from .optim import AdamW, learning_rate
from .step import TrainStep


DEFAULT_VOCAB = 1024  # the BPE vocabulary trained on the default corpus


@dataclass
class TrainConfig:
    """Everything a training run needs; saved in every checkpoint so `--resume` continues alike."""

    preset: str = "small"
    n_layer: int | None = None       # overrides of the preset's shape
    n_head: int | None = None
    n_embd: int | None = None
    backend: str = "naive"
    dtype: str | None = None         # float32 on the CPU, bfloat16 (mixed precision) on a GPU
    graph: bool = True               # on the GPU, capture the step as a CUDA graph (False: eager, for debugging)
    check_finite: bool = False       # check every kernel's output for NaN/Inf in every step (slow; debugging)
    train_data: str | None = None    # glob of llm.c .bin shards; None = the embedded default corpus
    val_data: str | None = None
    tokenizer: str | None = None     # 'gpt2', 'bytes' or a .tiktoken path; default corpus: None = its own BPE
    vocab_size: int | None = None    # default corpus: size of its BPE; shards: vocabulary without a tokenizer
    batch_size: int = 16
    seq_len: int | None = None       # default: the preset's block size
    total_batch: int | None = None   # tokens per optimizer step; default batch_size * seq_len
    steps: int = 500
    lr: float = 2e-3
    min_lr_frac: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 8
    sample_every: int = 0            # 0: sample only at the end
    sample_tokens: int = 200
    sample_prompt: str = "def "
    checkpoint_every: int = 100
    out: str | None = None
    seed: int = 1337
    progress: bool = True

    def validate(self) -> None:
        for name in ("batch_size", "steps", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"train: {name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"train: lr must be positive, got {self.lr}")
        if self.dtype not in (None, "float32", "float64", "bfloat16", "float16"):
            raise ValueError(f"train: dtype must be float32, float64, bfloat16 or float16, got {self.dtype}")


@dataclass
class Data:
    train: TokenSource
    val: TokenSource
    tokenizer: object  # may be None for shards given without a tokenizer
    vocab_size: int


def load_data(cfg: TrainConfig, log=print) -> Data:
    """The training and validation tokens, and the tokenizer that made them."""
    if cfg.train_data is None:
        from .corpus import default_corpus
        from .tokenizer import default_tokenizer, load_tokenizer
        text = default_corpus()
        if cfg.tokenizer is None:
            tokenizer = default_tokenizer(text, cfg.vocab_size or DEFAULT_VOCAB)
            about = f"a {tokenizer.n_vocab}-token BPE trained on it (cached)"
        else:
            tokenizer = load_tokenizer(cfg.tokenizer)
            about = f"tokenizer {cfg.tokenizer}"
        tokens = np.array(tokenizer.encode(text), dtype=np.uint32 if tokenizer.n_vocab > 2**16 else np.uint16)
        split = int(len(tokens) * 0.9)
        log(f"data: the embedded default corpus (Python standard library source), {len(text) / 1e6:.1f} MB, "
            f"{len(tokens):,} tokens with {about}; 90/10 train/val split")
        return Data(TokenSource([tokens[:split]], "train"), TokenSource([tokens[split:]], "val"),
                    tokenizer, tokenizer.n_vocab)
    if cfg.val_data is None:
        raise ValueError("train: --train-data needs --val-data too (a glob of validation shards)")
    train, val = TokenSource.from_shards(cfg.train_data, "train"), TokenSource.from_shards(cfg.val_data, "val")
    tokenizer = None
    if cfg.tokenizer is not None:
        from . import tokenizer as tokenizers
        tokenizer = tokenizers.load_tokenizer(cfg.tokenizer)
    vocab = cfg.vocab_size or (tokenizer.n_vocab if tokenizer else None)
    if vocab is None:
        raise ValueError("train: with --train-data, give --tokenizer (to decode samples) or --vocab-size")
    # No scan of the shards for out-of-range ids here (that would read every token, gigabytes, at each
    # start): the embedding op checks each batch's ids and names the vocabulary it expected.
    log(f"data: {train.name} {len(train):,} tokens, {val.name} {len(val):,} tokens, vocabulary {vocab}")
    return Data(train, val, tokenizer, vocab)


def model_config(cfg: TrainConfig, vocab_size: int) -> GPTConfig:
    overrides = {k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd") if getattr(cfg, k) is not None}
    base = preset(cfg.preset, **overrides)
    block = max(base.block_size, cfg.seq_len or 0)
    return preset(cfg.preset, **overrides, vocab_size=vocab_size, block_size=block)


def select_kernels(cfg) -> Kernels:
    """The kernels of cfg.backend in cfg.dtype; with no dtype given, bfloat16 (mixed precision)
    where the selection runs on the GPU and float32 elsewhere (cfg.dtype is then set)."""
    if cfg.dtype is None:
        cfg.dtype = "bfloat16" if Kernels(cfg.backend).device == "cuda" else "float32"
    return Kernels(cfg.backend, dtype=cfg.dtype)


def evaluate(model: GPT, source: TokenSource, batches: int, B: int, T: int, seed: int) -> float:
    """Mean loss over a fixed set of validation batches (the same every evaluation)."""
    losses = []
    for i in range(batches):
        x, y = source.batch(i, B, T, seed + 1)
        losses.append(model.forward(x, y)[1])
    model._tape = None  # evaluation keeps nothing for a backward
    return float(np.mean(losses))


class MetricsLog:
    """metrics.jsonl: one JSON object per step; on resume, lines past the checkpoint are dropped."""

    def __init__(self, path: Path, start_step: int):
        self.path = path
        if path.exists():
            keep = [line for line in path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", -1) < start_step]
            path.write_text("".join(line + "\n" for line in keep))

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def sample_text(model: GPT, tokenizer, prompt: str, n_tokens: int, seed: int) -> str:
    ids = tokenizer.encode(prompt)
    new = generate(model, ids, n_tokens, temperature=0.8, top_k=50, seed=seed, stop_token=tokenizer.eot_token)
    return prompt + tokenizer.decode(new)


def train(cfg: TrainConfig, resume: bool = False, log=print) -> dict:
    """Run (or resume) training; returns a summary: steps, first and last validation loss, the
    checkpoint written, the final sample and tokens/s."""
    cfg.validate()
    out = Path(cfg.out or time.strftime("runs/%Y%m%d-%H%M%S"))
    checkpoint = None
    if resume:
        checkpoint = load_checkpoint(out)
        saved = TrainConfig(**{k: v for k, v in checkpoint.meta["train"].items()
                               if k in {f.name for f in fields(TrainConfig)}})
        saved.steps, saved.progress, saved.out = cfg.steps, cfg.progress, str(out)
        cfg = saved
        log(f"resuming from {checkpoint.path} (step {checkpoint.meta['step']})")
    elif (out / "latest").exists():
        raise ValueError(f"train: {out} already holds a run; pass --resume to continue it, or another --out")

    data = load_data(cfg, log)
    config = model_config(cfg, data.vocab_size)
    if checkpoint is not None and checkpoint.config != config:
        raise ValueError(f"train: checkpoint config {checkpoint.config} does not match {config}")
    kernels = select_kernels(cfg)
    for note in kernels.notes:
        log(f"note: {note}")
    model = GPT(config, kernels, dtype=cfg.dtype, seed=cfg.seed)
    optimizer = AdamW(model, weight_decay=cfg.weight_decay)
    start = 0
    if checkpoint is not None:
        model.load_parameters(checkpoint.params)
        if checkpoint.optimizer is None:
            raise ValueError(f"train: {checkpoint.path} has no optimizer state to resume from")
        optimizer.m[...] = checkpoint.optimizer["m"]
        optimizer.v[...] = checkpoint.optimizer["v"]
        optimizer.step_count = int(checkpoint.optimizer["step"])
        start = int(checkpoint.meta["step"])

    log(f"model: {model}")
    log(f"kernels: --backend {cfg.backend}; " + ", ".join(f"{op}={v.qualname}" for op, v in kernels.variants.items()))

    def meta(accum: int) -> dict:
        return {"train": asdict(cfg), "data_position": {"seed": cfg.seed, "batches_per_step": accum}}

    def sample(model: GPT, seed: int) -> str:
        return sample_text(model, data.tokenizer, cfg.sample_prompt, cfg.sample_tokens, seed)

    return run_loop(cfg, model, optimizer, data, out, start, meta, sample if data.tokenizer is not None else None, log)


def run_loop(cfg: TrainConfig, model: GPT, optimizer: AdamW, data: Data, out: Path, start: int, meta,
             sample=None, log=print) -> dict:
    """The optimizer steps start..cfg.steps-1 (pretraining's and SFT's alike): evaluation, gradient
    accumulation, clipping, AdamW, metrics.jsonl, the progress bar, samples and checkpoints.

    data.train / data.val offer `batch(index, B, T, seed) -> (inputs, targets)`; `meta(accum)` gives
    the JSON a checkpoint records; `sample(model, seed) -> str`, when given, makes the samples.
    Each optimizer step is one TrainStep.run (euler_core/step.py): on the GPU a replayed CUDA graph.
    """
    keep_freed_memory()   # each step's activations reuse the last step's memory (see hostmem.py)
    B = cfg.batch_size
    T = cfg.seq_len or model.config.block_size
    per_micro = B * T
    total = cfg.total_batch or per_micro
    if total % per_micro:
        raise ValueError(f"train: total batch {total} tokens is not a multiple of batch_size*seq_len = {per_micro}")
    accum = total // per_micro
    out.mkdir(parents=True, exist_ok=True)
    metrics = MetricsLog(out / "metrics.jsonl", start)
    log(f"batch: {B} x {T} tokens x {accum} micro-batch(es) = {total:,} tokens/step; {cfg.steps} steps; out {out}")
    trainer = TrainStep(model, optimizer, B, T, accum, grad_clip=cfg.grad_clip,
                        graph=None if cfg.graph else False, check_finite=cfg.check_finite)
    summary = {"out": str(out), "first_val_loss": None, "val_loss": None}
    bar = _progress(range(start, cfg.steps), cfg.progress, initial=start, total=cfg.steps)
    done = start  # optimizer steps completed
    tokens_per_s = float("nan")
    try:
        for step in bar:
            last = step == cfg.steps - 1
            record = {"step": step}
            if cfg.eval_every and (step % cfg.eval_every == 0 or last):
                val = evaluate(model, data.val, cfg.eval_batches, B, T, cfg.seed)
                record["val_loss"] = val
                summary["val_loss"] = val
                if summary["first_val_loss"] is None:
                    summary["first_val_loss"] = val
            t0 = time.perf_counter()
            lr = learning_rate(step, cfg.lr, cfg.warmup, cfg.steps, cfg.min_lr_frac)
            batches = [data.train.batch(step * accum + micro, B, T, cfg.seed) for micro in range(accum)]
            result = trainer.run(batches, lr)
            result.check()  # a NaN/Inf loss or gradient stops the run, naming the op that made it
            loss, norm = result.loss, result.grad_norm
            done = step + 1
            dt = time.perf_counter() - t0
            tokens_per_s = total / dt
            record.update(loss=loss, lr=lr, grad_norm=norm, tokens_per_s=tokens_per_s, time_s=dt)
            metrics.write(record)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss:.3f}", val=f"{summary['val_loss']:.3f}" if summary["val_loss"] else "-",
                                tok_s=f"{tokens_per_s:,.0f}")
            if sample is not None and cfg.sample_every and done % cfg.sample_every == 0 and not last:
                log(f"\nsample at step {done}: {sample(model, step)!r}")
            if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or last:
                summary["checkpoint"] = str(save_checkpoint(out, done, model, optimizer, meta(accum), data.tokenizer))
    except KeyboardInterrupt:
        # Ctrl-C: keep what the completed steps did, unless the interrupt landed inside an optimizer
        # update (it counts itself first), which may have touched only part of the buffer: then the
        # periodic checkpoint stands.
        if done > start and optimizer.step_count == done:
            path = save_checkpoint(out, done, model, optimizer, meta(accum), data.tokenizer)
            log(f"\ninterrupted: saved {path}; continue with --resume --out {out}")
        raise
    finally:
        if hasattr(bar, "close"):
            bar.close()
    summary.update(steps=cfg.steps, tokens_per_s=tokens_per_s)
    if sample is not None:
        summary["sample"] = sample(model, cfg.seed)
    return summary


def _progress(iterable, enabled: bool, initial: int, total: int):
    if not enabled:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, initial=initial, total=total, unit="step", file=sys.stderr, dynamic_ncols=True,
                disable=None)  # None: shown on a terminal, silent in logs
