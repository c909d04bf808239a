"""The `euler tokenizer` and `euler data` commands. `add_commands(subparsers)` adds both.

    euler tokenizer train  --input FILES --vocab-size N --out PATH [--special TOK ...] [--conventions hf]
    euler tokenizer encode --tokenizer gpt2|PATH [--input FILE]      ids on stdout, separated by spaces
    euler tokenizer decode --tokenizer gpt2|PATH [--input FILE]      the exact bytes on stdout
    euler data prepare     --input FILES --tokenizer gpt2|PATH --out DIR [--val-fraction F] ...
    euler data download    NAME [--out DIR]                          (tinyshakespeare, fineweb-edu-10B, ...)

Handlers return an exit status; errors are ValueError/FileNotFoundError with a clear message,
which the main CLI prints as "euler <command>: error: ...".
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..values import flag_type, input_file, integer, number, output_dir, output_file, text

SHARD_NAME = text(pattern=r"[A-Za-z0-9][A-Za-z0-9._-]*", says="a name of letters, digits, '.', '_' and '-' "
                  "(it prefixes NAME_train_000000.bin)")


def add_commands(subparsers) -> None:
    _add_tokenizer(subparsers)
    _add_data(subparsers)


# ---- euler tokenizer ------------------------------------------------------------------------------

def _add_tokenizer(subparsers) -> None:
    p = subparsers.add_parser("tokenizer", help="train a BPE tokenizer, encode and decode",
                              description="Byte-level BPE tokenizers: train one, encode text to ids, decode ids.")
    sub = p.add_subparsers(dest="tokenizer_command", required=True, metavar="ACTION")

    t = sub.add_parser("train", help="train a byte-level BPE vocabulary on text files")
    t.add_argument("--input", nargs="+", required=True, metavar="FILE", help="UTF-8 text files (each one a document)")
    t.add_argument("--vocab-size", type=flag_type(integer(257)), required=True,
                   help="ids in all, special tokens included (>= 257)")
    t.add_argument("--out", required=True, help="output .tiktoken file (its specials and pattern go to OUT.json)")
    t.add_argument("--special", action="append", default=None, metavar="TOKEN",
                   help="a special token (repeatable; default: <|endoftext|>)")
    t.add_argument("--conventions", choices=["nanoeuler", "hf"], default="nanoeuler",
                   help="nanoeuler (default): documents pre-split whole, ties to the smallest byte pair; "
                        "hf: reproduce Hugging Face tokenizers' BpeTrainer merges exactly")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=_train)

    for name, helptext in (("encode", "encode text (a file, or stdin) to ids separated by spaces"),
                           ("decode", "decode ids (a file, or stdin) to the exact bytes they stand for")):
        e = sub.add_parser(name, help=helptext)
        e.add_argument("--tokenizer", default="gpt2", help="gpt2 (GPT-2's ranks, shipped with NanoEuler, or "
                       "$EULER_GPT2_RANKS), or the path of a .tiktoken file (default: gpt2)")
        e.add_argument("--input", default=None, metavar="FILE", help="read this file instead of stdin")
        if name == "encode":
            e.add_argument("--specials", choices=["error", "allow", "ordinary"], default="error",
                           help="text that spells a special token: error (default, as tiktoken), allow (encode "
                                "it as the special token), ordinary (encode it as plain text)")
        e.set_defaults(func=_encode if name == "encode" else _decode)


def _read_input(path) -> bytes:
    if path is None:
        return sys.stdin.buffer.read()
    return input_file(path, "--input").read_bytes()


def _train(args) -> int:
    from .train import train_bpe

    out = output_file(args.out, "--out")
    texts = []
    for f in args.input:
        path = input_file(f, "--input")
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(f"tokenizer train: {path} is not UTF-8 text ({e})") from None
    specials = args.special if args.special is not None else ["<|endoftext|>"]
    result = train_bpe(texts, args.vocab_size, special_tokens=specials, conventions=args.conventions,
                       progress=False if args.no_progress else None, name=Path(args.out).stem)
    tok = result.tokenizer
    if tok.n_vocab < args.vocab_size:
        raise ValueError(f"--vocab-size: {args.vocab_size} is not allowed for this corpus: it has byte pairs "
                         f"enough for only {tok.n_vocab} ids (specials included); give --vocab-size {tok.n_vocab} "
                         "or less, or more text")
    out = tok.save(out)
    print(f"wrote {out} ({len(tok.mergeable_ranks)} mergeable tokens, specials {tok.special_tokens}) "
          f"and {out.name}.json", file=sys.stderr)
    return 0


def _encode(args) -> int:
    from . import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    data = _read_input(args.input)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:  # not UTF-8: byte-level BPE still encodes it, exactly invertibly
        ids = tok.encode_bytes(data)
    elif args.specials == "allow":
        ids = tok.encode(text, allowed_special="all")
    elif args.specials == "ordinary":
        ids = tok.encode_ordinary(text)
    else:
        ids = tok.encode(text)
    sys.stdout.write(" ".join(map(str, ids)) + "\n")
    return 0


def _decode(args) -> int:
    from . import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    fields = _read_input(args.input).split()
    try:
        ids = [int(f) for f in fields]
    except ValueError:
        bad = next(f for f in fields if not f.lstrip(b"-").isdigit())
        raise ValueError(f"tokenizer decode: {bad[:20].decode('utf-8', 'replace')!r} is not a token id "
                         "(expected integers separated by whitespace)") from None
    data = tok.decode_bytes(ids)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


# ---- euler data -----------------------------------------------------------------------------------

def _add_data(subparsers) -> None:
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

    from ..data.download import DATASETS

    g = sub.add_parser("download", help="download a standard data set (checksummed, resumable)")
    g.add_argument("name", choices=sorted(DATASETS), help="; ".join(f"{k}: {v.description}" for k, v in sorted(DATASETS.items())))
    g.add_argument("--out", default=None, metavar="DIR", help="destination directory (default: data/NAME)")
    g.add_argument("--shards", type=flag_type(integer(0)), default=None,
                   help="for sharded sets (fineweb-edu): how many training shards (default: all)")
    g.add_argument("--base-url", default=None, help="fetch from this mirror instead (same file layout)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.set_defaults(func=_download)


def _prepare(args) -> int:
    from ..data.prepare import prepare

    meta = prepare(args.input, args.tokenizer, args.out, val_fraction=args.val_fraction,
                   shard_tokens=args.shard_tokens, name=args.name, workers=args.workers,
                   progress=False if args.no_progress else None, log=lambda m: print(m, file=sys.stderr))
    print(f"{args.out}: train {meta['train']['tokens']:,} tokens in {len(meta['train']['shards'])} shard(s), "
          f"val {meta['val']['tokens']:,} tokens in {len(meta['val']['shards'])} shard(s); "
          f"vocabulary {meta['n_vocab']} ({meta['token_dtype']})", file=sys.stderr)
    return 0


def _download(args) -> int:
    from ..data.download import download

    if args.out is not None:
        output_dir(args.out, "--out")
    paths = download(args.name, out=args.out, shards=args.shards, base_url=args.base_url,
                     progress=False if args.no_progress else None)
    for p in paths:
        print(p)
    return 0
