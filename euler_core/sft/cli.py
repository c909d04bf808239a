"""`euler sft` (fine-tune a checkpoint on conversations) and `euler chat` (talk to the result)."""

from __future__ import annotations

import sys


def _help() -> dict:
    """--help of every SFTConfig field: the training loop's (shared with euler train), and SFT's own."""
    from ..cli_options import LOOP_HELP
    return {
        **LOOP_HELP,
        "init": "checkpoint or run directory to start from (ours, or `euler import`ed GPT-2 weights)",
        "data": "JSONL: chat 'messages', prompt/completion, or Alpaca instruction/input/output records",
        "val_data": "JSONL held out for validation (default: --val-frac of --data)",
        "val_frac": "fraction of --data held out for validation", "strict": "refuse the data on its first bad line",
        "tokenizer": "gpt2, bytes or a .tiktoken file, when the checkpoint records no tokenizer",
        "batch_size": "rows per micro-batch (B)", "seq_len": "tokens per packed row (T; default: block size)",
        "epochs": "passes over the training rows (when --steps is not given)",
        "eval_batches": "batches per validation (default: the whole split)",
        "sample_every": "steps between sample replies (0: only at the end)", "sample_prompt": "user message of the samples",
        "sample_tokens": "tokens per sample reply",
        "out": "run directory (default runs/sft-<date-time>)", "seed": "random seed (split, batches, new embeddings)",
    }


def add_commands(sub) -> None:
    from ..cli_options import add_config_options, add_sampling_options
    from ..values import resumable
    from .run import SFTConfig
    p = sub.add_parser("sft", help="fine-tune a checkpoint on conversations (SFT)",
                       description="Supervised fine-tuning: loss only on the assistant's tokens, conversations "
                       "packed into rows, the chat template's special tokens added to the tokenizer and the "
                       "embedding. Same checkpoints, metrics.jsonl and progress as `euler train`. See docs/sft.md.")
    helps = _help()
    add_config_options(p, SFTConfig, helps, skip=("progress", "strict"))
    p.add_argument("--strict", action="store_true", help=helps["strict"])
    p.add_argument("--resume", action="store_true", help="continue the SFT run in --out from its latest checkpoint, "
                   "with its own settings (a resume may change only " + ", ".join(resumable(SFTConfig)) + ")")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_sft)

    p = sub.add_parser("chat", help="a multi-turn conversation with an SFT checkpoint",
                       description="Talk to a fine-tuned checkpoint in its chat template (KV-cache generation). "
                       "Type a message and Enter; /reset starts over, /quit (or end of input) leaves.")
    p.add_argument("--checkpoint", required=True, help="an SFT checkpoint or run directory (its latest)")
    p.add_argument("--system", default=None, help="a system message opening the conversation")
    add_sampling_options(p, temperature=0.7, max_new_tokens=256)
    p.add_argument("--backend", default="naive", help="kernel selection (triton: on the GPU, the decoding step a CUDA graph)")
    p.add_argument("--dtype", default=None, help="the model's dtype (default: the checkpoint's)")
    p.set_defaults(func=_chat)


def _sft(args) -> int:
    from ..cli_options import run_training_command
    from .run import SFTConfig, resume_sft, sft
    return run_training_command(args, SFTConfig, sft, resume_sft, "SFT run")


def _chat(args, stdin=None, stdout=None) -> int:
    from .run import chat_reply, load_chat_model
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    model, template = load_chat_model(args.checkpoint, args.backend, args.dtype)
    opening = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(opening)
    interactive = stdin.isatty()
    print(f"chatting with {args.checkpoint} ({model}); /reset starts over, /quit leaves", file=sys.stderr)
    turn = 0
    while True:
        if interactive:
            print("you> ", end="", file=stdout, flush=True)
        line = stdin.readline()
        if not line or line.strip() == "/quit":
            return 0
        text = line.rstrip("\n")
        if text.strip() == "/reset":
            messages = list(opening)
            print("(conversation reset)", file=stdout)
            continue
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        # keep the prompt inside the context: drop the oldest turns (the system message stays)
        while len(template.prompt(messages)) + 1 > model.config.block_size and len(messages) > len(opening) + 1:
            del messages[len(opening):len(opening) + 2]
        reply = chat_reply(model, template, messages, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                           None if args.seed is None else args.seed + turn)
        turn += 1
        messages.append({"role": "assistant", "content": reply})
        print(f"assistant> {reply}", file=stdout, flush=True)
