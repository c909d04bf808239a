"""The `euler tokenizer` commands (`euler data` is euler_core/data/cli.py).

    euler tokenizer train  --input FILES --vocab-size N --out PATH [--special TOK ...] [--conventions hf]
    euler tokenizer encode --tokenizer gpt2|PATH [--input FILE]      ids on stdout, separated by spaces
    euler tokenizer decode --tokenizer gpt2|PATH [--input FILE]      the exact bytes on stdout

Handlers return an exit status; errors are ValueError/FileNotFoundError with a clear message,
which the main CLI prints as "euler <command>: error: ...".
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..values import flag_type, input_file, integer, output_file


def add_commands(subparsers) -> None:
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
