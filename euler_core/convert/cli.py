"""`euler import` and `euler export`: GPT-2 weights from and to llm.c and Hugging Face."""

from __future__ import annotations

from ..values import flag_type, integer


def add_commands(sub) -> None:
    p = sub.add_parser("import", help="import llm.c .bin or Hugging Face GPT-2 weights as a checkpoint",
                       description="Read an llm.c model file (gpt2_124M.bin, float32 or bfloat16) or Hugging Face "
                       "GPT-2 weights (model.safetensors, or the directory holding it with config.json) and write "
                       "our checkpoint OUT/step_000000, ready for `euler sft --init OUT` or `euler generate`.")
    p.add_argument("source", help="an llm.c .bin, a .safetensors file, or a Hugging Face model directory")
    p.add_argument("--out", required=True, help="run directory to create")
    p.add_argument("--format", choices=("llmc", "hf"), default=None, help="default: detected from the file")
    p.add_argument("--tokenizer", default=None,
                   help="gpt2, bytes or a .tiktoken file to record (default: gpt2 for a 50257 vocabulary when found)")
    p.add_argument("--n-head", type=flag_type(integer(1)), default=None, help="heads, when there is no config.json (default C/64)")
    p.set_defaults(func=_import)

    p = sub.add_parser("export", help="export a checkpoint as llm.c .bin or Hugging Face safetensors")
    p.add_argument("--checkpoint", required=True, help="a checkpoint or run directory (its latest)")
    p.add_argument("--format", required=True, choices=("llmc", "llmc-bf16", "hf", "hf-bf16"),
                   help="llmc: llm.c model file version 3 (float32); llmc-bf16: version 5; "
                   "hf: a directory with model.safetensors and config.json")
    p.add_argument("--out", required=True, help="the .bin file (llmc) or the directory (hf)")
    p.set_defaults(func=_export)


def _import(args) -> int:
    from . import import_weights
    import_weights(args.source, args.out, args.format, args.tokenizer, args.n_head)
    return 0


def _export(args) -> int:
    from . import export_weights
    export_weights(args.checkpoint, args.out, args.format)
    return 0
