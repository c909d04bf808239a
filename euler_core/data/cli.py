"""The `euler data` commands. `add_commands(subparsers)` adds them.

    euler data prepare     --input FILES --tokenizer gpt2|PATH --out DIR [--val-fraction F] ...
    euler data download    NAME [--out DIR]                          (tinyshakespeare, fineweb-edu-10B, ...)

Handlers return an exit status; errors are ValueError/FileNotFoundError with a clear message,
which the main CLI prints as "euler <command>: error: ...".
"""

from __future__ import annotations

import sys

from ..values import flag_type, integer, number, output_dir, text

SHARD_NAME = text(pattern=r"[A-Za-z0-9][A-Za-z0-9._-]*", says="a name of letters, digits, '.', '_' and '-' "
                  "(it prefixes NAME_train_000000.bin)")


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("data", help="prepare token shards, download data sets",
                              description="Token data: llm.c-format .bin shards made from text, and standard data sets.")
    sub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")

    d = sub.add_parser("prepare", help="tokenize text files into llm.c-format .bin shards (train/val split)")
    d.add_argument("--input", nargs="+", required=True, metavar="FILE",
                   help="UTF-8 text files (one document each) or .jsonl files (one document per line, 'text' field)")
    d.add_argument("--tokenizer", default="gpt2", help="gpt2, bytes, or a .tiktoken file (default: gpt2)")
    d.add_argument("--out", required=True, metavar="DIR", help="output directory")
    d.add_argument("--name", type=flag_type(SHARD_NAME), default="data",
                   help="shard name prefix: NAME_train_000000.bin (default: data)")
    d.add_argument("--val-fraction", type=flag_type(number(0, 1, high_open=True)), default=0.01,
                   help="leading fraction of the input (by bytes) for validation (in [0, 1); default: 0.01)")
    d.add_argument("--shard-tokens", type=flag_type(integer(1)), default=100_000_000,
                   help="tokens per shard (default: 1e8)")
    d.add_argument("--workers", type=flag_type(integer(1)), default=None,
                   help="encoding processes (default: CPU count for large inputs)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_prepare)

    from .download import DATASETS

    g = sub.add_parser("download", help="download a standard data set (checksummed, resumable)")
    g.add_argument("name", choices=sorted(DATASETS), help="; ".join(f"{k}: {v.description}" for k, v in sorted(DATASETS.items())))
    g.add_argument("--out", default=None, metavar="DIR", help="destination directory (default: data/NAME)")
    g.add_argument("--shards", type=flag_type(integer(0)), default=None,
                   help="for sharded sets (fineweb-edu): how many training shards (default: all)")
    g.add_argument("--base-url", default=None, help="fetch from this mirror instead (same file layout)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.set_defaults(func=_download)


def _prepare(args) -> int:
    from .prepare import prepare

    meta = prepare(args.input, args.tokenizer, args.out, val_fraction=args.val_fraction,
                   shard_tokens=args.shard_tokens, name=args.name, workers=args.workers,
                   progress=False if args.no_progress else None, log=lambda m: print(m, file=sys.stderr))
    print(f"{args.out}: train {meta['train']['tokens']:,} tokens in {len(meta['train']['shards'])} shard(s), "
          f"val {meta['val']['tokens']:,} tokens in {len(meta['val']['shards'])} shard(s); "
          f"vocabulary {meta['n_vocab']} ({meta['token_dtype']})", file=sys.stderr)
    return 0


def _download(args) -> int:
    from .download import download

    if args.out is not None:
        output_dir(args.out, "--out")
    paths = download(args.name, out=args.out, shards=args.shards, base_url=args.base_url,
                     progress=False if args.no_progress else None)
    for p in paths:
        print(p)
    return 0
