"""Supervised fine-tuning: a checkpoint, conversations in JSONL, the chat template, and the training
loop pretraining uses (euler_core.train.run_loop: the same metrics.jsonl, checkpoints, progress bar
and resume).

    summary = sft(SFTConfig(init="runs/pretrain", data="chat.jsonl", out="runs/sft"))

Steps: read and check the data (data.py), hold out a validation split, add the template's special
tokens to the tokenizer and grow the embedding (template.py), encode every conversation with its
loss mask, pack them into rows of T+1 tokens (pack.py), then train. The checkpoint records the
grown tokenizer and the template, so `euler chat` and `euler generate` read it directly.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..checkpoint import CheckpointError, checkpoints, load_checkpoint, saved_settings
from ..model import GPT
from ..optim import AdamW
from ..rundir import clean_leftovers, new_run_dir, run_lock
from ..train import Data, LoopConfig, kernels_line, locked_resume, run_loop, select_kernels
from ..values import check_settings, integer, number, optional, output_dir, resume_settings, setting, switch, text
from .data import read_jsonl
from .pack import PackedSource, pack
from .template import ChatTemplate, grow_vocabulary, prepare_tokenizer


@dataclass
class SFTConfig(LoopConfig):
    """Everything an SFT run needs: the training loop's settings (LoopConfig, with SFT's defaults) and
    what it starts from; saved in its checkpoints (meta["sft"]) so --resume continues alike. Each
    field carries its allowed values (values.py); resume=True: a resume may change it."""

    init: str | None = setting(None, optional(text()))        # the checkpoint (or run directory) to start from
    data: str | None = setting(None, optional(text()))        # JSONL of conversations
    val_data: str | None = setting(None, optional(text()))    # JSONL held out for validation; default: val_frac of `data`
    val_frac: float = setting(0.1, number(0, 1, high_open=True))
    strict: bool = setting(False, switch())                   # refuse the data file on its first bad line
    tokenizer: str | None = setting(None, optional(text()))   # when the init checkpoint records none: gpt2, bytes or .tiktoken
    epochs: float = setting(3.0, number(0, low_open=True))
    # SFT's own defaults for the loop's settings
    batch_size: int = setting(8, integer(1))
    steps: int | None = setting(None, optional(integer(1)), resume=True)  # overrides epochs
    lr: float = setting(3e-4, number(0, 1, low_open=True))
    warmup: int = setting(10, integer(0))
    weight_decay: float = setting(0.0, number(0))
    eval_batches: int | None = setting(None, optional(integer(1)), resume=True)  # default: the whole validation split
    sample_prompt: str = setting("Hello! Who are you?", text(), resume=True)
    sample_tokens: int = setting(64, integer(1), resume=True)


def encode_conversations(conversations, template: ChatTemplate):
    return [template.encode(c.messages) for c in conversations]


def split(conversations, val_frac: float, seed: int):
    """A held-out split, drawn with the seed (the same every time for the same file)."""
    order = np.random.default_rng([seed, 7]).permutation(len(conversations))
    n_val = int(round(len(conversations) * val_frac))
    if val_frac > 0 and len(conversations) > 1:
        n_val = min(max(n_val, 1), len(conversations) - 1)
    val = [conversations[i] for i in sorted(order[:n_val])]
    train = [conversations[i] for i in sorted(order[n_val:])]
    return train, val


def sft(cfg: SFTConfig, log=print) -> dict:
    """Start an SFT run in cfg.out (default: a new runs/sft-<date-time>); returns pretraining's
    summary plus the data counts."""
    check_settings(cfg, "sft")
    if cfg.init is None or cfg.data is None:
        raise ValueError("sft: --init CHECKPOINT and --data FILE.jsonl are required")
    out = output_dir(cfg.out) if cfg.out else new_run_dir("runs/sft-%Y%m%d-%H%M%S")
    cfg = replace(cfg, out=str(out))
    with run_lock(out, "euler sft"):
        if (out / "latest").exists() or checkpoints(out):
            raise ValueError(f"sft: {out} already holds a run; pass --resume to continue it, or another --out")
        clean_leftovers(out, log)
        # the starting weights, and the tokenizer with the template's tokens
        from ..tokenizer import load_tokenizer, tokenizer_from_checkpoint
        init = load_checkpoint(cfg.init, with_optimizer=False)
        if cfg.tokenizer is not None:
            base_tokenizer = load_tokenizer(cfg.tokenizer)
        elif "tokenizer" in init.meta:
            base_tokenizer = tokenizer_from_checkpoint(init.path, init.meta["tokenizer"])
        else:
            raise ValueError(f"sft: {init.path} records no tokenizer; pass --tokenizer (gpt2, bytes or a .tiktoken file)")
        if base_tokenizer.n_vocab > init.config.vocab_size:
            raise ValueError(f"sft: the tokenizer has {base_tokenizer.n_vocab} ids, the model only {init.config.vocab_size}")
        tokenizer, added = prepare_tokenizer(base_tokenizer)
        config, params = grow_vocabulary(init.config, init.params, max(tokenizer.n_vocab, init.config.vocab_size),
                                         cfg.seed)
        if added:
            log(f"chat template: added special tokens {added} (ids {init.config.vocab_size}..{config.vocab_size - 1}); "
                f"vocabulary {init.config.vocab_size} -> {config.vocab_size} (padded {config.padded_vocab_size})")
        return _run(cfg, tokenizer, config, params, None, str(init.path), log)


def resume_sft(out, changes: dict | None = None, log=print) -> dict:
    """Continue the SFT run in `out` from its newest checkpoint: its settings, grown tokenizer and
    model come from the checkpoint (the --init run may have moved on since); `changes` may change
    only the settings a resume may change (values.resume_settings)."""
    from ..tokenizer import tokenizer_from_checkpoint
    changes = {k: v for k, v in (changes or {}).items() if k != "out"}
    out = Path(out)
    with locked_resume(out, "sft", log) as checkpoint:
        if "sft" not in checkpoint.meta:
            raise ValueError(f"sft --resume: {checkpoint.path} is not an SFT checkpoint (no 'sft' in its meta.json)")
        cfg = resume_settings(saved_settings(checkpoint, "sft", SFTConfig), changes, "sft")
        cfg.out = str(out)
        if checkpoint.optimizer is None or "tokenizer" not in checkpoint.meta:
            raise CheckpointError(f"sft --resume: {checkpoint.path} lacks its optimizer state or tokenizer")
        tokenizer = tokenizer_from_checkpoint(checkpoint.path, checkpoint.meta["tokenizer"])
        return _run(cfg, tokenizer, checkpoint.config, checkpoint.params, checkpoint,
                    checkpoint.meta.get("init"), log)


def _run(cfg: SFTConfig, tokenizer, config, params: dict, checkpoint, init_path, log) -> dict:
    """Read, check and pack the data, build the model (from `params`, or the checkpoint resumed) and
    train through pretraining's loop."""
    out = Path(cfg.out)
    template = ChatTemplate(tokenizer)
    T = cfg.seq_len or config.block_size
    if T > config.block_size:
        raise ValueError(f"sft: --seq-len {T} exceeds the model's block_size {config.block_size}")
    conversations, problems = read_jsonl(cfg.data, cfg.strict)
    for p in problems[:10]:
        log(f"skipped line: {p}")
    if len(problems) > 10:
        log(f"... and {len(problems) - 10} more bad lines")
    if cfg.val_data is not None:
        train_convs = conversations
        val_convs, val_problems = read_jsonl(cfg.val_data, cfg.strict)
        problems += val_problems
    else:
        train_convs, val_convs = split(conversations, cfg.val_frac, cfg.seed)
    sources, counts = {}, {"bad_lines": len(problems)}
    for name, convs, shuffle in (("train", train_convs, True), ("val", val_convs, False)):
        if not convs:
            raise ValueError(f"sft: no {name} conversations (use --val-frac > 0 or --val-data)")
        tokens, loss, skipped = pack(encode_conversations(convs, template), T, template.bos)
        if skipped:
            log(f"{name}: skipped {skipped} conversation(s) longer than the context ({T + 1} tokens)")
        if len(tokens) == 0:
            raise ValueError(f"sft: every {name} conversation is longer than the context of {T + 1} tokens")
        sources[name] = PackedSource(tokens, loss, name, shuffle)
        counts[name] = {"conversations": len(convs) - skipped, "skipped_too_long": skipped, "rows": len(tokens),
                        "loss_tokens": sources[name].loss_tokens}
        log(f"{name}: {len(convs) - skipped} conversations packed into {len(tokens)} rows of {T + 1} tokens, "
            f"{sources[name].loss_tokens:,} tokens with loss ({sources[name].loss_tokens / tokens.size:.0%})")
    fingerprint = {"packed_rows_sha256": hashlib.sha256(b"".join(
        np.ascontiguousarray(s.tokens).tobytes() for s in sources.values())).hexdigest()[:16]}
    if checkpoint is not None:
        recorded = (checkpoint.meta.get("data_position") or {}).get("fingerprint")
        if recorded not in (None, fingerprint):
            raise ValueError(f"sft --resume: the data changed since {checkpoint.path} was written: the packed rows "
                             "differ, so the batches would not be the run's")

    # ---- the model, the optimizer and the loop -----------------------------------------------------
    kernels = select_kernels(cfg)
    model = GPT(config, kernels, dtype=cfg.dtype, seed=None, recompute=cfg.recompute)
    for note in kernels.notes:
        log(f"note: {note}")
    model.load_parameters(params)
    optimizer = AdamW(model, weight_decay=cfg.weight_decay)
    start = 0
    if checkpoint is not None:
        optimizer.m[...] = checkpoint.optimizer["m"]
        optimizer.v[...] = checkpoint.optimizer["v"]
        optimizer.step_count = int(checkpoint.optimizer["step"])
        start = checkpoint.meta["step"]
    per_step = (cfg.total_batch or cfg.batch_size * T) // T  # rows per optimizer step
    cfg.steps = cfg.steps or max(1, math.ceil(cfg.epochs * sources["train"].rows / per_step))
    loop_cfg = replace(cfg, seq_len=T, out=str(out),
                       eval_batches=cfg.eval_batches or math.ceil(sources["val"].rows / cfg.batch_size))
    log(f"model: {model} from {init_path}")
    log(kernels_line(cfg.backend, kernels, model))

    def meta(accum: int) -> dict:
        return {"sft": asdict(cfg), "chat_template": template.to_meta(), "init": init_path, "data": counts,
                "data_position": {"seed": cfg.seed, "batches_per_step": accum, "fingerprint": fingerprint}}

    def sample(model, seed):
        reply = chat_reply(model, template, [{"role": "user", "content": cfg.sample_prompt}],
                           cfg.sample_tokens, temperature=0.8, top_k=50, seed=seed)
        return f"user: {cfg.sample_prompt} | assistant: {reply}"

    data = Data(sources["train"], sources["val"], tokenizer, config.vocab_size)
    summary = run_loop(loop_cfg, model, optimizer, data, out, start, meta, sample, log)
    summary["data"] = counts
    return summary


def chat_reply(model, template: ChatTemplate, messages: list[dict], max_new_tokens: int = 256,
               temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
               seed: int | None = None, use_cache: bool = True) -> str:
    """The assistant's next message to `messages` (generation stops at the end of its turn)."""
    from ..generate import generate
    ids = generate(model, template.prompt(messages), max_new_tokens, temperature, top_k, top_p, seed,
                   stop_token=template.stop_tokens, use_cache=use_cache)
    return template.tokenizer.decode(ids)


def exact_match(model, template: ChatTemplate, pairs: list[tuple[str, str]], max_new_tokens: int = 16) -> dict:
    """Greedy answers to (question, answer) pairs: the fraction answered exactly (after strip())."""
    answers = [chat_reply(model, template, [{"role": "user", "content": q}], max_new_tokens) for q, _ in pairs]
    right = [a.strip() == expected.strip() for a, (_, expected) in zip(answers, pairs)]
    return {"accuracy": float(np.mean(right)) if pairs else float("nan"), "n": len(pairs), "correct": int(sum(right)),
            "examples": [{"question": q, "expected": e, "got": a} for (q, e), a in list(zip(pairs, answers))[:8]]}


def load_chat_model(path, backend: str = "naive", dtype: str | None = None):
    """(model, ChatTemplate) from an SFT checkpoint (or any checkpoint whose tokenizer has the
    template's special tokens); dtype: the model's (default the checkpoint's)."""
    from ..tokenizer import tokenizer_from_checkpoint
    ckpt = load_checkpoint(path, with_optimizer=False)
    if "tokenizer" not in ckpt.meta:
        raise ValueError(f"checkpoint {ckpt.path} records no tokenizer")
    tokenizer = tokenizer_from_checkpoint(ckpt.path, ckpt.meta["tokenizer"])
    try:
        template = ChatTemplate(tokenizer)
    except ValueError:
        raise ValueError(f"checkpoint {ckpt.path} has no chat template tokens: fine-tune it with `euler sft` first") from None
    model = GPT(ckpt.config, backend, dtype=dtype or ckpt.meta.get("dtype", "float32"), seed=None)
    model.load_parameters(ckpt.params)
    return model, template
