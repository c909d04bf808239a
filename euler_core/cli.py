"""The `euler` command: a thin layer over the Python API.

    euler train        pretrain a GPT (no arguments: a small model on the embedded default corpus)
    euler generate     sample from a checkpoint
    euler backends     list every backend and variant, its device, dtypes and availability
    euler conformance  run the conformance suite on a backend (conformance/cli.py, found through the
                       entry-point group nanoeuler.commands: the core does not import the suite)
    euler tokenizer    train a BPE tokenizer, encode, decode (euler_core/tokenizer/cli.py)
    euler data         prepare llm.c token shards, download data sets (euler_core/data/cli.py)
    euler bench        time kernels, render reports (euler_core/measure/cli.py)
    euler new-backend  write the skeleton of a backend package (euler_core/scaffold.py)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import scaffold
from .measure import cli as bench_cli
from .convert import cli as convert_cli
from .data import cli as data_cli
from .sft import cli as sft_cli
from .rundir import sigterm_is_ctrl_c
from .tokenizer import cli as tokenizer_cli
from .cli_options import TRAIN_HELP, add_config_options, add_sampling_options, run_training_command
from .values import flag_type, integer, resumable

def _add_train(sub) -> None:
    from .train import TrainConfig
    p = sub.add_parser("train", help="pretrain a GPT", description="Pretrain a GPT. With no arguments: a small "
                       "model on the embedded default corpus, on the CPU, in a few minutes, then a sample.")
    add_config_options(p, TrainConfig, TRAIN_HELP)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint, "
                   "with its own settings (a resume may change only " + ", ".join(resumable(TrainConfig)) + ")")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)


def _train(args) -> int:
    from .train import TrainConfig, resume_training, train
    return run_training_command(args, TrainConfig, train, resume_training, "run")


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="sample text from a checkpoint",
                       description="Continue a prompt, or every line of a file (in batches of --batch-size "
                                   "prompts of any lengths), with a KV cache; on the GPU the decoding step is a "
                                   "CUDA graph and sampling stays on the device.")
    p.add_argument("--checkpoint", required=True, help="a checkpoint directory or a run directory (its latest)")
    p.add_argument("--prompt", default="\n", help="text to continue (special tokens such as <|endoftext|> are "
                   "encoded as themselves: '<|endoftext|>' alone gives an unconditional sample)")
    p.add_argument("--prompt-file", default=None,
                   help="a text file of prompts, one a line (no empty lines); overrides --prompt")
    p.add_argument("--batch-size", type=flag_type(integer(1)), default=8,
                   help="prompts of --prompt-file generated together (an integer >= 1; default 8)")
    add_sampling_options(p, temperature=0.8, max_new_tokens=200)
    p.add_argument("--backend", default="naive", help="kernel selection (triton: on the GPU)")
    p.add_argument("--dtype", default=None, help="the model's dtype (default: the checkpoint's)")
    p.add_argument("--no-kv-cache", action="store_true", help="rerun the whole context for every token (slower)")
    p.add_argument("--no-graph", action="store_true", help="launch every kernel from Python (no CUDA graph)")
    p.set_defaults(func=_generate)


def read_prompt_file(path: str) -> list[str]:
    """The prompts of a file, one a line; an empty line is an error (it would be an empty prompt)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines:
        raise ValueError(f"--prompt-file {path} holds no prompt")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"--prompt-file {path}: line {number} is empty; every line is one prompt")
    return lines


def _generate(args) -> int:
    from .checkpoint import load_checkpoint
    from .generate import generate
    from .model import GPT
    from .tokenizer import encode_prompt, tokenizer_from_checkpoint
    prompts = read_prompt_file(args.prompt_file) if args.prompt_file else [args.prompt]
    ckpt = load_checkpoint(args.checkpoint, with_optimizer=False)
    if "tokenizer" not in ckpt.meta:
        raise ValueError(f"checkpoint {ckpt.path} records no tokenizer: cannot turn a prompt into tokens")
    tokenizer = tokenizer_from_checkpoint(ckpt.path, ckpt.meta["tokenizer"])
    model = GPT(ckpt.config, args.backend, dtype=args.dtype or ckpt.meta.get("dtype", "float32"), seed=None)
    model.load_parameters(ckpt.params)
    encoded = [encode_prompt(tokenizer, text, f"--prompt-file {args.prompt_file} line {number}" if args.prompt_file
                             else "--prompt") for number, text in enumerate(prompts, 1)]
    for first in range(0, len(prompts), args.batch_size):
        batch = encoded[first:first + args.batch_size]
        seed = None if args.seed is None else args.seed + first  # each batch its own draws
        outs = generate(model, batch, args.max_new_tokens, args.temperature, args.top_k, args.top_p, seed,
                        stop_token=_stop_tokens(tokenizer), use_cache=not args.no_kv_cache, graph=not args.no_graph)
        for i, ids in enumerate(outs):
            if args.prompt_file:
                print(f"=== {first + i + 1} ===")
            print(prompts[first + i] + tokenizer.decode(ids))
    return 0


def _stop_tokens(tokenizer) -> list[int]:
    """End-of-text, and the end of a chat turn when the tokenizer has the chat template's tokens."""
    specials = getattr(tokenizer, "special_tokens", {})
    return [specials[t] for t in ("<|endoftext|>", "<|end|>") if t in specials] or (
        [tokenizer.eot_token] if tokenizer.eot_token is not None else [])


def _add_backends(sub) -> None:
    p = sub.add_parser("backends", help="list backends, their variants and whether they run here")
    p.set_defaults(func=_backends)


def _backends(args) -> int:
    from .ops import OPS
    from .registry import get_registry
    registry = get_registry()
    for name, error in registry.broken.items():
        print(f"backend {name} failed to load: {error}")
    width = max(len(op) for op in OPS)
    print(f"{'backend':<10} {'op':<{width}} {'variant':<12} {'device':<6} {'dtypes':<28} available here")
    order = sorted(registry.backends.values(), key=lambda b: (b.name != "naive", b.name))  # the reference first
    for backend in order:
        for op in OPS:
            variants = backend.variants_of(op)
            if not variants:
                instead = (f"composed: {' + '.join(OPS[op].replaces)}" if OPS[op].replaces else "falls back to naive")
                print(f"{backend.name:<10} {op:<{width}} {'-':<12} {'':<6} {'':<28} (no variant: {instead})")
            for v in variants:
                reason = v.unavailable_reason()
                print(f"{backend.name:<10} {op:<{width}} {v.name:<12} {v.device:<6} {','.join(v.dtypes):<28} "
                      f"{'yes' if reason is None else 'no: ' + reason}")
    return 0


#: commands that packages above the core add to `euler` (the conformance suite's `euler conformance`):
#: each entry point is a function add_commands(subparsers)
COMMAND_ENTRY_POINTS = "nanoeuler.commands"


def _add_installed_commands(sub) -> None:
    from importlib.metadata import entry_points
    for ep in sorted(entry_points(group=COMMAND_ENTRY_POINTS), key=lambda ep: ep.name):
        ep.load()(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="euler", description="NanoEuler: GPT-2 training with hand-written "
                                     "kernels on pluggable backends.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(sub)
    _add_generate(sub)
    _add_backends(sub)
    _add_installed_commands(sub)
    tokenizer_cli.add_commands(sub)
    data_cli.add_commands(sub)
    bench_cli.add_commands(sub)
    scaffold.add_commands(sub)
    convert_cli.add_commands(sub)
    sft_cli.add_commands(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with sigterm_is_ctrl_c():
        try:
            return args.func(args)
        except BrokenPipeError:  # the reader went away (`euler backends | head`): not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 0
        except (ValueError, TypeError, OSError, ArithmeticError) as e:  # FileNotFoundError, a full disk ...
            print(f"euler {args.command}: error: {e}", file=sys.stderr)
            return 2
        except MemoryError as e:
            print(f"euler {args.command}: error: out of memory ({e})", file=sys.stderr)
            return 2
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (rundir.Interrupted)
            print(f"euler: interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
            return 128 + getattr(e, "signum", signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
