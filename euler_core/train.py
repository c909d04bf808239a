"""Pretraining: the loop, its schedule, evaluation, samples, checkpoints and metrics.

`train(TrainConfig(...))` starts a run (what `euler train` runs); `resume_training(out)` continues
one from its newest checkpoint (`euler train --resume --out RUN`). With no data given it trains on
the embedded default corpus (the Python standard library's source) with the default tokenizer, so
the first run on a fresh machine needs no download.

Every optimizer step is one TrainStep.run (euler_core/step.py): zero the gradients, run `grad_accum`
micro-batches (forward, backward, gradients accumulating), clip the global gradient norm, and take
one AdamW step at the scheduled learning rate. Batches are a pure function
of (seed, step), and the checkpoint holds the parameters, AdamW's moments and the step: a resumed
run computes the same losses as one that was never interrupted.

A resume takes every setting from the checkpoint: the model's shape, the tokenizer (the copy saved
in the checkpoint, not the cache it came from) and the training settings. It may change only the
settings marked `resume=True` below (how long to train, how often to evaluate, sample and save,
and the kernels); any other flag given with a different value is refused. The run directory's
rules (one process at a time, nothing lost to a kill or a full disk, Ctrl-C and SIGTERM save the
completed steps) are in rundir.py and docs/run-directory.md.
"""

from __future__ import annotations

import hashlib
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from .checkpoint import (CheckpointError, CheckpointWriteError, checkpoints, load_checkpoint, save_checkpoint,
                         saved_settings)
from .config import PRESETS, GPTConfig, preset
from .data.loader import TokenSource
from .generate import generate
from .hostmem import keep_freed_memory
from .kernels import Kernels
from .model import GPT
from .optim import AdamW, learning_rate
from .rundir import MetricsLog, StopRequested, clean_leftovers, new_run_dir, run_lock, stop_signals
from .step import TrainStep
from .values import (check_settings, flag_of, integer, number, one_of, optional, output_dir, resume_settings,
                     setting, switch, text)

DEFAULT_VOCAB = 1024  # the BPE vocabulary trained on the default corpus
RUNS = "runs/%Y%m%d-%H%M%S"  # the default run directory


@dataclass
class LoopConfig:
    """The settings of the training loop itself (`run_loop`), shared by pretraining and SFT: the
    kernels and precision, the batch, the schedule, evaluation, samples, checkpoints. TrainConfig and
    SFTConfig (euler_core.sft) add what each starts from. Each field carries its allowed values
    (values.py); resume=True: a resume may change it."""

    backend: str = setting("naive", text(), resume=True)
    dtype: str | None = setting(None, optional(one_of("float32", "float64", "bfloat16", "float16")))
    # None: float32 on the CPU, bfloat16 (mixed precision) on a GPU
    graph: bool = setting(True, switch(), resume=True)       # on the GPU, capture the step as a CUDA graph
    recompute: bool = setting(False, switch(), resume=True)  # remake each layer's GELU output in the backward
    check_finite: bool = setting(False, switch(), resume=True)  # check every kernel's output for NaN/Inf (slow)
    batch_size: int = setting(16, integer(1))
    seq_len: int | None = setting(None, optional(integer(1)))   # default: the model's block size
    total_batch: int | None = setting(None, optional(integer(1)))  # tokens per optimizer step; default batch_size * seq_len
    steps: int = setting(500, integer(1), resume=True)
    lr: float = setting(2e-3, number(0, 1, low_open=True))
    min_lr_frac: float = setting(0.1, number(0, 1))
    warmup: int = setting(20, integer(0))
    weight_decay: float = setting(0.1, number(0))
    grad_clip: float = setting(1.0, number(0))                # 0: no clipping
    eval_every: int = setting(50, integer(0), resume=True)    # 0: never
    eval_batches: int = setting(8, integer(1), resume=True)
    sample_every: int = setting(0, integer(0), resume=True)   # 0: sample only at the end
    sample_tokens: int = setting(200, integer(1), resume=True)
    sample_prompt: str = setting("def ", text(), resume=True)
    checkpoint_every: int = setting(100, integer(0), resume=True)  # 0: only at the end (and when stopped)
    out: str | None = setting(None, optional(text()))  # the run directory (a resume names it)
    seed: int = setting(1337, integer(0))
    progress: bool = setting(True, switch(), resume=True)


@dataclass
class TrainConfig(LoopConfig):
    """Everything a pretraining run needs: the loop's settings and the model and data it starts from;
    saved in every checkpoint so `--resume` continues alike."""

    preset: str = setting("small", one_of(*PRESETS))
    n_layer: int | None = setting(None, optional(integer(1)))   # overrides of the preset's shape
    n_head: int | None = setting(None, optional(integer(1)))
    n_embd: int | None = setting(None, optional(integer(1)))
    train_data: str | None = setting(None, optional(text()))  # glob of llm.c .bin shards; None = the embedded corpus
    val_data: str | None = setting(None, optional(text()))
    tokenizer: str | None = setting(None, optional(text()))   # 'gpt2', 'bytes' or a .tiktoken path; default corpus: None = its own BPE
    vocab_size: int | None = setting(None, optional(integer(1)))  # default corpus: size of its BPE; shards: vocabulary without a tokenizer

    def validate(self) -> None:
        check_settings(self, "train")


@dataclass
class Data:
    train: TokenSource
    val: TokenSource
    tokenizer: object  # may be None for shards given without a tokenizer
    vocab_size: int
    fingerprint: dict | None = None  # what the batches are drawn from; a resume checks it is unchanged


def load_data(cfg: TrainConfig, log=print, tokenizer=None) -> Data:
    """The training and validation tokens, and the tokenizer that made them (`tokenizer`, when given:
    a resumed run's own copy, used instead of building one from cfg)."""
    if cfg.train_data is None:
        from .corpus import default_corpus
        from .tokenizer import default_tokenizer, load_tokenizer
        text = default_corpus()
        if tokenizer is not None:
            about = f"the checkpoint's {tokenizer.n_vocab}-token tokenizer"
        elif cfg.tokenizer is None:
            if (cfg.vocab_size or DEFAULT_VOCAB) < 257:
                raise ValueError(f"train: --vocab-size {cfg.vocab_size} is too small for the default corpus's BPE "
                                 "(it needs the 256 bytes and <|endoftext|>: at least 257)")
            tokenizer = default_tokenizer(text, cfg.vocab_size or DEFAULT_VOCAB)
            about = f"a {tokenizer.n_vocab}-token BPE trained on it (cached)"
        else:
            tokenizer = load_tokenizer(cfg.tokenizer)
            about = f"tokenizer {cfg.tokenizer}"
        tokens = np.array(tokenizer.encode(text), dtype=np.uint32 if tokenizer.n_vocab > 2**16 else np.uint16)
        split = int(len(tokens) * 0.9)
        log(f"data: the embedded default corpus (Python standard library source), {len(text) / 1e6:.1f} MB, "
            f"{len(tokens):,} tokens with {about}; 90/10 train/val split")
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return Data(TokenSource([tokens[:split]], "train"), TokenSource([tokens[split:]], "val"),
                    tokenizer, tokenizer.n_vocab, {"default_corpus_sha256": digest, "tokens": len(tokens)})
    if cfg.val_data is None:
        raise ValueError("train: --train-data needs --val-data too (a glob of validation shards)")
    train, val = TokenSource.from_shards(cfg.train_data, "train"), TokenSource.from_shards(cfg.val_data, "val")
    if tokenizer is None and cfg.tokenizer is not None:
        from . import tokenizer as tokenizers
        tokenizer = tokenizers.load_tokenizer(cfg.tokenizer)
    vocab = cfg.vocab_size or (tokenizer.n_vocab if tokenizer else None)
    if vocab is None:
        raise ValueError("train: with --train-data, give --tokenizer (to decode samples) or --vocab-size")
    for source in (train, val):  # each batch's ids are checked against it, naming shard and position
        source.vocab_size = vocab
    log(f"data: {train.name} {len(train):,} tokens, {val.name} {len(val):,} tokens, vocabulary {vocab}")
    fingerprint = {s.name.split()[0]: [[Path(p).name, int(n)] for p, n in zip(s.paths, s.lengths)]
                   for s in (train, val)}
    return Data(train, val, tokenizer, vocab, fingerprint)


def model_config(cfg: TrainConfig, vocab_size: int) -> GPTConfig:
    overrides = {k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd") if getattr(cfg, k) is not None}
    base = preset(cfg.preset, **overrides)
    block = max(base.block_size, cfg.seq_len or 0)
    return preset(cfg.preset, **overrides, vocab_size=vocab_size, block_size=block)


def kernels_line(backend: str, kernels, model: GPT) -> str:
    """The log's "kernels:" line: each op's variant, and which fused ops the model leaves out (for a
    bigger fusion, or --recompute)."""
    return f"kernels: --backend {backend}; " + ", ".join(
        f"{op}={v.qualname}" + ("" if model.fused.get(op, True) else " (not used)") for op, v in kernels.variants.items())


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


def sample_text(model: GPT, tokenizer, prompt: str, n_tokens: int, seed: int) -> str:
    from .tokenizer import encode_prompt
    ids = encode_prompt(tokenizer, prompt, "--sample-prompt")
    new = generate(model, ids, n_tokens, temperature=0.8, top_k=50, seed=seed, stop_token=tokenizer.eot_token)
    return prompt + tokenizer.decode(new)


def train(cfg: TrainConfig, log=print) -> dict:
    """Start a new run in cfg.out (default: a new runs/<date-time>); returns a summary: steps, first
    and last validation loss, the checkpoint written, the final sample and tokens/s."""
    cfg.validate()
    out = output_dir(cfg.out) if cfg.out else new_run_dir(RUNS)
    cfg = replace(cfg, out=str(out))
    with run_lock(out, "euler train"):
        if (out / "latest").exists() or checkpoints(out):
            raise ValueError(f"train: {out} already holds a run; pass --resume to continue it, or another --out")
        clean_leftovers(out, log)
        data = load_data(cfg, log)
        return _run(cfg, data, model_config(cfg, data.vocab_size), None, log)


@contextmanager
def locked_resume(out: Path, command: str, log=print):
    """`euler COMMAND --resume`'s run directory `out`, locked for the `with` and cleared of what
    interrupted writes left: yields its newest checkpoint (CheckpointError where there is none)."""
    if not out.is_dir():
        raise CheckpointError(f"{command} --resume: {out} is not a run directory (no such directory)")
    output_dir(out)
    with run_lock(out, f"euler {command}"):
        clean_leftovers(out, log)
        if not (out / "latest").exists() and not checkpoints(out):
            raise CheckpointError(f"{command} --resume: {out} holds no checkpoint yet (the run stopped before "
                                  "its first): start it again without --resume")
        yield load_checkpoint(out)


def resume_training(out, changes: dict | None = None, log=print) -> dict:
    """Continue the run in `out` from its newest checkpoint, with its own settings; `changes` (flag
    values by setting name) may change only the settings a resume may change (see the module doc).

    A checkpoint that holds weights but no training state (`euler import`) starts training from those
    weights, with a fresh optimizer and the settings in `changes`; the model's shape and tokenizer
    are the checkpoint's.
    """
    changes = {k: v for k, v in (changes or {}).items() if k != "out"}
    out = Path(out)
    with locked_resume(out, "train", log) as checkpoint:
        meta = checkpoint.meta
        if "sft" in meta:
            raise ValueError(f"train --resume: {checkpoint.path} is an SFT run; continue it with `euler sft --resume`")
        if "train" in meta:
            cfg = resume_settings(saved_settings(checkpoint, "train", TrainConfig), changes, "train")
            if checkpoint.optimizer is None:
                raise CheckpointError(f"train --resume: {checkpoint.path} has no optimizer.npz to resume from")
        else:
            cfg = _settings_to_start_from_weights(checkpoint, changes)
            log(f"starting from the weights in {checkpoint.path} (no training state: a fresh optimizer)")
        cfg.out = str(out)
        tokenizer = None
        if "tokenizer" in meta:
            from .tokenizer import tokenizer_from_checkpoint
            tokenizer = tokenizer_from_checkpoint(checkpoint.path, meta["tokenizer"])
        data = load_data(cfg, log, tokenizer=tokenizer)
        position = meta.get("data_position") or {}
        if position.get("fingerprint") not in (None, data.fingerprint):
            raise ValueError(f"train --resume: the data changed since {checkpoint.path} was written (it recorded "
                             f"{position['fingerprint']}, now {data.fingerprint}): the batches would not be the run's")
        if data.vocab_size > checkpoint.config.vocab_size:
            raise ValueError(f"train --resume: the data's vocabulary of {data.vocab_size} exceeds the model's "
                             f"{checkpoint.config.vocab_size}")
        T = cfg.seq_len or checkpoint.config.block_size
        if T > checkpoint.config.block_size:
            raise ValueError(f"train --resume: --seq-len {T} exceeds the checkpoint's block size "
                             f"{checkpoint.config.block_size}")
        return _run(cfg, data, checkpoint.config, checkpoint, log)


def _settings_to_start_from_weights(checkpoint, changes: dict) -> TrainConfig:
    """A checkpoint with weights only (`euler import`): the flags' settings, with the model's
    vocabulary and dtype its own (flags that would change the model's shape are refused)."""
    meta = checkpoint.meta
    shape_flags = sorted({"preset", "n_layer", "n_head", "n_embd", "vocab_size", "dtype"} & set(changes))
    if shape_flags:
        raise ValueError(f"train --resume: {checkpoint.path} holds weights only; the model's shape and dtype "
                         f"are its own, so {', '.join(flag_of(f) for f in shape_flags)} cannot be given")
    cfg = TrainConfig(**changes, dtype=meta.get("dtype", "float32"), vocab_size=checkpoint.config.vocab_size)
    cfg.validate()
    if "tokenizer" not in meta and cfg.train_data is None and cfg.tokenizer is None:
        raise ValueError(f"train --resume: {checkpoint.path} records no tokenizer to encode the default "
                         "corpus with: give --tokenizer, or --train-data/--val-data shards")
    return cfg


def _run(cfg: TrainConfig, data: Data, config: GPTConfig, checkpoint, log) -> dict:
    out = Path(cfg.out)
    kernels = select_kernels(cfg)
    model = GPT(config, kernels, dtype=cfg.dtype, seed=cfg.seed, recompute=cfg.recompute)
    for note in kernels.notes:
        log(f"note: {note}")
    optimizer = AdamW(model, weight_decay=cfg.weight_decay)
    start = 0
    if checkpoint is not None:
        model.load_parameters(checkpoint.params)
        start = checkpoint.meta["step"]
        if checkpoint.optimizer is not None:
            optimizer.m[...] = checkpoint.optimizer["m"]
            optimizer.v[...] = checkpoint.optimizer["v"]
            optimizer.step_count = int(checkpoint.optimizer["step"])
        log(f"resuming from {checkpoint.path} (step {start} of {cfg.steps})")
    sample = None
    if data.tokenizer is not None:
        from .tokenizer import encode_prompt
        encode_prompt(data.tokenizer, cfg.sample_prompt, "--sample-prompt")  # refused now, not at the first sample

        def sample(model: GPT, seed: int) -> str:
            return sample_text(model, data.tokenizer, cfg.sample_prompt, cfg.sample_tokens, seed)

    log(f"model: {model}")
    log(kernels_line(cfg.backend, kernels, model))

    def meta(accum: int) -> dict:
        return {"train": asdict(cfg), "data_position": {"seed": cfg.seed, "batches_per_step": accum,
                                                        "fingerprint": data.fingerprint}}

    return run_loop(cfg, model, optimizer, data, out, start, meta, sample, log)


def run_loop(cfg: LoopConfig, model: GPT, optimizer: AdamW, data: Data, out: Path, start: int, meta,
             sample=None, log=print) -> dict:
    """The optimizer steps start..cfg.steps-1 (pretraining's and SFT's alike): evaluation, the
    optimizer step, metrics.jsonl, the progress bar, samples and checkpoints. The caller holds the
    run directory's lock. Each optimizer step is one TrainStep.run (euler_core/step.py): on the GPU
    a replayed CUDA graph.

    With captured graphs (`overlaps`) the loop queues step k+1 before it reads step k's result, so
    the device never waits for the host; a step whose weights something reads or saves next (an
    evaluation, a sample, a checkpoint, the last step, a stop) is read before the loop goes on. The
    records, checkpoints and losses are the same either way; a step's time_s runs from the previous
    step's result to its own.

    data.train / data.val offer `batch(index, B, T, seed) -> (inputs, targets)`; `meta(accum)` gives
    the JSON a checkpoint records; `sample(model, seed) -> str`, when given, makes the samples.

    A step is complete when its metrics record is on disk. Whatever ends the loop early (Ctrl-C,
    SIGTERM, an error such as bad data or a diverged loss) the completed steps are saved as a
    checkpoint before it propagates, unless it struck inside a TrainStep.run or a metrics write (then
    the state may be between steps and the newest checkpoint stands) or inside a checkpoint write.
    """
    keep_freed_memory()   # each step's activations reuse the last step's memory (see hostmem.py)
    B = cfg.batch_size
    T = cfg.seq_len or model.config.block_size
    per_micro = B * T
    total = cfg.total_batch or per_micro
    if total % per_micro:
        raise ValueError(f"train: --total-batch {total} is not a multiple of --batch-size x --seq-len = "
                         f"{B} x {T} = {per_micro} tokens")
    accum = total // per_micro
    if start > cfg.steps:
        raise ValueError(f"train: --steps {cfg.steps} is behind the checkpoint, which is at step {start}")
    metrics = MetricsLog(out / "metrics.jsonl", start, log)
    log(f"batch: {B} x {T} tokens x {accum} micro-batch(es) = {total:,} tokens/step; {cfg.steps} steps; out {out}")
    summary = {"out": str(out), "first_val_loss": None, "val_loss": None, "steps": cfg.steps,
               "steps_run": 0, "tokens_per_s": float("nan")}
    if start == cfg.steps:
        log(f"the run has completed its {cfg.steps} steps; give --steps with more to train further")
        summary["checkpoint"] = str(out / (out / "latest").read_text().strip()) if (out / "latest").exists() else None
        return summary
    trainer = TrainStep(model, optimizer, B, T, accum, grad_clip=cfg.grad_clip,
                        graph=None if cfg.graph else False, check_finite=cfg.check_finite)
    overlap = overlaps(trainer)
    done = saved = start  # steps completed (their metrics on disk); the newest checkpoint's step
    saving = False
    phase = None      # "run" inside TrainStep.run, "read" while a step's result is read and recorded
    unread: list = []  # [step, record, lr, result, launched at] of queued steps whose results are not read yet
    last_read = None  # when the last result was read (a queued step's time runs from there)

    def save() -> Path:
        nonlocal saved, saving
        saving = True
        path = save_checkpoint(out, done, model, optimizer, meta(accum), data.tokenizer)
        saving = False
        saved = done
        summary["checkpoint"] = str(path)
        return path

    def complete() -> None:
        """Read the oldest queued step's result (waiting for that step only), check it, write its record."""
        nonlocal done, phase, last_read
        phase = "read"
        step, record, lr, result, launched = unread.pop(0)
        loss, norm = result.loss, result.grad_norm
        try:
            result.check()  # a NaN/Inf loss or gradient stops the run, naming the op that made it
        except FloatingPointError:
            if not unread:  # the device skipped the update and nothing came after: the completed steps stand
                phase = None
            raise
        now = time.perf_counter()
        dt = now - max(launched, last_read or launched)
        last_read = now
        summary["tokens_per_s"] = total / dt
        record.update(loss=loss, lr=lr, grad_norm=norm, tokens_per_s=total / dt, time_s=dt)
        metrics.write(record)
        done = step + 1
        summary["steps_run"] = done - start
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss:.3f}", val=f"{summary['val_loss']:.3f}" if summary["val_loss"] else "-",
                            tok_s=f"{total / dt:,.0f}")
        phase = None

    def due(step: int, every: int) -> bool:
        return bool(every) and (step + 1) % every == 0

    def evaluates(step: int) -> bool:  # a validation loss before this step
        return bool(cfg.eval_every) and (step % cfg.eval_every == 0 or step == cfg.steps - 1)

    bar = _progress(range(start, cfg.steps), cfg.progress, initial=start, total=cfg.steps)
    with stop_signals(log) as stop:
        try:
            for step in bar:
                if stop[0] is not None and unread:  # a signal while a step ran: that step is the last
                    complete()
                    save()
                    raise StopRequested(stop[0])
                last = step == cfg.steps - 1
                record = {"step": step}
                if evaluates(step):
                    val = evaluate(model, data.val, cfg.eval_batches, B, T, cfg.seed)
                    record["val_loss"] = val
                    summary["val_loss"] = val
                    if summary["first_val_loss"] is None:
                        summary["first_val_loss"] = val
                t0 = time.perf_counter()
                lr = learning_rate(step, cfg.lr, cfg.warmup, cfg.steps, cfg.min_lr_frac)
                batches = [data.train.batch(step * accum + micro, B, T, cfg.seed) for micro in range(accum)]
                phase = "run"     # from here to the result the parameters may be part-updated
                result = trainer.run(batches, lr)
                phase = None
                unread.append([step, record, lr, result, t0])
                if len(unread) > 1:
                    complete()    # the previous step, read while this one runs
                # before anything that reads the weights or ends the run, this step's result is read
                boundary = (not overlap or last or evaluates(step + 1) or stop[0] is not None
                            or due(step, cfg.sample_every) or due(step, cfg.checkpoint_every))
                if not boundary:
                    continue
                complete()
                if sample is not None and due(step, cfg.sample_every) and not last:
                    log(f"\nsample at step {done}: {sample(model, step)!r}")
                if due(step, cfg.checkpoint_every) or last or stop[0] is not None:
                    save()
                if stop[0] is not None and not last:
                    raise StopRequested(stop[0])
        except StopRequested:
            log(f"\nstopped after step {done}: saved {summary['checkpoint']}; continue with --resume --out {out}")
            raise
        except (KeyboardInterrupt, Exception) as e:
            if phase is None and not saving and len(unread) == 1:
                try:      # the step still queued finishes on the device: its record, and it counts as done
                    complete()
                except (KeyboardInterrupt, Exception):
                    pass  # then the state is between steps: the newest checkpoint stands
            if phase is None and not unread and not saving and done > saved and optimizer.step_count == done \
                    and not isinstance(e, CheckpointWriteError):
                try:
                    log(f"\n{'interrupted' if isinstance(e, KeyboardInterrupt) else 'stopped by an error'} after "
                        f"step {done}: saved {save()}; continue with --resume --out {out}")
                except CheckpointWriteError as failed:
                    log(f"\ncould not save the completed steps: {failed}")
            raise
        finally:
            if hasattr(bar, "close"):
                bar.close()
    if sample is not None and stop[0] is None:
        summary["sample"] = sample(model, cfg.seed)
    return summary


def overlaps(trainer: TrainStep) -> bool:
    """Whether the loop queues step k+1 before reading step k's result: on the GPU with captured
    graphs, where the host's part of a step (the uploads, the graph launch, reading the result:
    about 2.5 ms of GPT-2 124M's step on the H200, reports/train-h200/152ceb5/trace) then runs while
    the device works. On the CPU a step is done when run() returns: nothing to overlap."""
    return trainer.graph


def describe_summary(summary: dict) -> str:
    """The line `euler train` and `euler sft` end with."""
    if not summary.get("steps_run"):
        return f"nothing to do: the run had completed its {summary['steps']} steps; checkpoint {summary.get('checkpoint')}"
    first, last = summary.get("first_val_loss"), summary.get("val_loss")
    val = f"val loss {first:.3f} -> {last:.3f}" if last is not None else "no validation loss (--eval-every 0)"
    return (f"finished {summary['steps']} steps: {val}, {summary['tokens_per_s']:,.0f} tokens/s; "
            f"checkpoint {summary.get('checkpoint')}")


def _progress(iterable, enabled: bool, initial: int, total: int):
    if not enabled:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, initial=initial, total=total, unit="step", file=sys.stderr, dynamic_ncols=True,
                disable=None)  # None: shown on a terminal, silent in logs
