"""The option helpers that `euler`'s commands share: one --flag per field of a config dataclass,
the training loop's help texts, the sampling flags. The dispatcher (cli.py) and the sub-CLIs
(measure/cli.py, sft/cli.py) import them from here; nothing here imports a CLI module.
"""

from __future__ import annotations

from dataclasses import fields

from .values import flag_of, flag_of_field, flag_type, integer, number, rule_of

#: --help of the training loop's settings (LoopConfig), shared by `euler train` and `euler sft`
LOOP_HELP = {
    "backend": "kernel selection, e.g. naive, numba, or numba,attention=naive",
    "dtype": "float32, float64, or bfloat16/float16 (mixed precision: float32 master weights); default float32 "
             "on the CPU, bfloat16 on a GPU",
    "graph": "run every step eagerly instead of replaying a captured CUDA graph (GPU; for debugging)",
    "recompute": "keep no GELU output per layer: remake it in the backward (one GELU forward more a layer; "
                 "4C values a token a layer less memory, 2.2 GB for GPT-2 124M at B=32 in bf16)",
    "check_finite": "check every kernel's output for NaN/Inf in every step, naming the first bad op (slow)",
    "batch_size": "sequences per micro-batch (B)", "seq_len": "tokens per sequence (T; default: block size)",
    "total_batch": "tokens per optimizer step (gradient accumulation; default B*T)",
    "steps": "optimizer steps", "lr": "peak learning rate", "min_lr_frac": "final lr as a fraction of the peak",
    "warmup": "warmup steps", "weight_decay": "AdamW weight decay (2-D weights only)",
    "grad_clip": "clip the global gradient norm to this (0: off)",
    "eval_every": "steps between validation losses (0: never)", "eval_batches": "batches per validation",
    "sample_every": "steps between samples (0: only at the end)", "sample_tokens": "tokens per sample",
    "sample_prompt": "prompt of the samples", "checkpoint_every": "steps between checkpoints",
    "out": "run directory (default runs/<date-time>)", "seed": "random seed (weights and batches)",
}

TRAIN_HELP = {
    **LOOP_HELP,
    "preset": "model preset (gpt2, gpt2-medium, gpt2-large, gpt2-xl, baby, small, micro)",
    "n_layer": "override the preset's number of layers", "n_head": "override the preset's heads",
    "n_embd": "override the preset's channels",
    "train_data": "glob of llm.c .bin training shards (default: the embedded corpus)",
    "val_data": "glob of validation shards",
    "tokenizer": "gpt2, bytes, or a .tiktoken file (default corpus: a BPE trained on it; shards: for samples)",
    "vocab_size": "default corpus: the size of its BPE (1024); shards: their vocabulary when no tokenizer is given",
}


def add_config_options(parser, config_class, helps: dict, skip=("progress",)) -> None:
    """One --option per field of a config dataclass (default None: 'not given', so a resumed run can
    tell what the user changed), parsed and checked by the field's allowed values (values.py), with
    its help, what it allows and its default."""
    for f in fields(config_class):
        if f.name in skip:
            continue
        rule = rule_of(f)
        if rule.kind is bool:  # a switch: --name turns on a False default, --no-name turns off a True one
            parser.add_argument(flag_of_field(f), dest=f.name, action="store_const", const=not f.default,
                                default=None, help=helps[f.name])
            continue
        parser.add_argument(flag_of(f.name), type=flag_type(rule), default=None,
                            help=f"{helps[f.name]} ({rule.describe()}; default: {f.default})")


def run_training_command(args, config_class, start, resume, what: str) -> int:
    """`euler train` and `euler sft`: the settings given on the command line (a flag left None is
    not given, so a resume can tell what changed; a switch given as False is given), then a new run
    `start(config_class(**given))` or `resume(args.out, given)`, then its summary and sample."""
    from .train import describe_summary
    given = {f.name: getattr(args, f.name) for f in fields(config_class)
             if f.name != "progress" and getattr(args, f.name) is not None}
    given["progress"] = not args.no_progress
    if args.resume:
        if args.out is None:
            raise ValueError(f"--resume needs --out RUN_DIR (the {what} to continue)")
        summary = resume(args.out, given)
    else:
        summary = start(config_class(**given))
    print("\n" + describe_summary(summary))
    if "sample" in summary:
        print("sample:\n" + summary["sample"])
    return 0


def add_sampling_options(p, temperature: float, max_new_tokens: int) -> None:
    """The sampling flags of `euler generate` and `euler chat`, each checked by its allowed values."""
    p.add_argument("--max-new-tokens", type=flag_type(integer(1)), default=max_new_tokens,
                   help=f"tokens to generate at most (default: {max_new_tokens})")
    p.add_argument("--temperature", type=flag_type(number(0)), default=temperature,
                   help=f"0 = greedy (a finite number >= 0; default: {temperature})")
    p.add_argument("--top-k", type=flag_type(integer(0)), default=50,
                   help="sample among the k likeliest tokens (0: all; default: 50)")
    p.add_argument("--top-p", type=flag_type(number(0, 1, low_open=True)), default=None,
                   help="sample among the likeliest tokens holding this much probability (in (0, 1]; default: off)")
    p.add_argument("--seed", type=flag_type(integer(0)), default=None, help="random seed (an integer >= 0)")
