"""`euler data prepare`: text files -> llm.c-format token shards, with a train/validation split.

Input: text files (each file is one document) and JSONL files (`.jsonl`: one document per line, in
its "text" field). Every document is preceded by the end-of-text token, as llm.c's data scripts do,
so documents never run into each other. The first `val_fraction` of the input (by bytes, cut at a
line boundary) becomes the validation split, the rest the training split, each written as shards of
at most `shard_tokens` tokens:

    OUT/{name}_val_000000.bin, OUT/{name}_train_000000.bin, OUT/{name}_train_000001.bin, ...
    OUT/meta.json          what was made: tokenizer, vocabulary, token counts, shards
    OUT/tokenizer.tiktoken the tokenizer itself (BPE tokenizers other than gpt2), for training/sampling

Everything is written into a hidden staging folder in OUT first. Only when the whole data set is
there does it replace the previous one of the same name: meta.json goes first, then the new shards
are renamed in, the old shards of that name that are not among them are deleted (a folder that
held 2,772 shards and now gets 1 ends with 1), and the new meta.json is written last. A prepare
that fails or is interrupted before that point leaves the previous data set as it was.

Shards are uint16 (llm.c's version 1) when the vocabulary fits, uint32 (version 2) otherwise.

Large inputs are cut into chunks of about 1 MB and encoded by several processes. A chunk boundary
is placed only where the pre-split is sure to have a boundary whatever the context (a single
newline between two non-space characters: "x\\nY" always splits as "x", "\\n", "Y..."), so the
tokens are exactly those of encoding each document whole (tested).
"""

from __future__ import annotations

import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from ..values import input_file, output_dir
from ..files import leftovers, parse_json, remove_tree, rename, write_text_atomic
from .shards import write_shard

CHUNK_BYTES = 1 << 20
# a boundary at k is safe when text[k-2] is not whitespace, text[k-1] == "\n", text[k] is not whitespace
_SAFE = re.compile(r"(?<=\S\n)(?=\S)")


def safe_cuts(text: str, every: int) -> list[int]:
    """Offsets (characters) at which `text` can be cut into pieces of about `every` characters with
    no change to its tokens. Always starts with 0 and ends with len(text)."""
    cuts = [0]
    pos = every
    while pos < len(text):
        m = _SAFE.search(text, pos)
        if m is None:
            break
        cuts.append(m.start())
        pos = m.start() + every
    cuts.append(len(text))
    return cuts


def iter_documents(paths):
    """(path, text) for every document: a whole text file, or each line's "text" of a .jsonl file."""
    for path in paths:
        path = input_file(path, "--input")
        if path.suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        doc = parse_json(line, f"{path}, line {lineno}")
                        text = doc.get("text") if isinstance(doc, dict) else None
                    except ValueError:
                        text = None
                    if not isinstance(text, str):
                        raise ValueError(f"data prepare: {path}, line {lineno}: expected a JSON object with a "
                                         "string 'text' field")
                    yield path, text
        else:
            try:
                yield path, path.read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"data prepare: {path} is not UTF-8 text ({e})") from None


# ---- the worker side: one tokenizer per process ---------------------------------------------------

_WORKER_TOKENIZER = None


def _worker_init(tokenizer):
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode_chunk(item):
    text, starts_doc = item
    tok = _WORKER_TOKENIZER
    if hasattr(tok, "encode_ordinary_numpy"):
        ids = tok.encode_ordinary_numpy(text)
    else:
        ids = np.asarray(tok.encode(text), dtype=np.int64)
    if starts_doc and tok.eot_token is not None:
        ids = np.concatenate([np.array([tok.eot_token], dtype=np.int64), ids])
    return ids


class _ShardWriter:
    """Collects tokens of one split and writes a shard each time `shard_tokens` are there."""

    def __init__(self, out: Path, name: str, split: str, shard_tokens: int, vocab_size: int):
        """Shards go to `out` (the staging folder) as {name}_{split}_NNNNNN.bin."""
        self.out, self.name, self.split = out, name, split
        self.shard_tokens, self.vocab_size = shard_tokens, vocab_size
        self.parts: list[np.ndarray] = []
        self.pending = 0
        self.shards: list[dict] = []
        self.total = 0

    def add(self, ids: np.ndarray):
        self.parts.append(ids)
        self.pending += len(ids)
        self.total += len(ids)
        while self.pending >= self.shard_tokens:
            self._flush(self.shard_tokens)

    def _flush(self, n):
        allids = np.concatenate(self.parts) if len(self.parts) != 1 else self.parts[0]
        path = self.out / f"{self.name}_{self.split}_{len(self.shards):06d}.bin"
        write_shard(path, allids[:n], vocab_size=self.vocab_size)
        self.shards.append({"file": path.name, "tokens": int(n)})
        rest = allids[n:]
        self.parts = [rest] if len(rest) else []
        self.pending = len(rest)

    def close(self):
        if self.pending:
            self._flush(self.pending)


def prepare(inputs, tokenizer, out, *, val_fraction: float = 0.01, shard_tokens: int = 100_000_000,
            name: str = "data", workers: int | None = None, progress: bool | None = None,
            tokenizer_spec: str | None = None, log=lambda message: None) -> dict:
    """Tokenize `inputs` into shards under `out`; return (and write as meta.json) what was made.

    tokenizer: a tokenizer object, or a spec ("gpt2", "bytes", or a .tiktoken path).
    workers: processes for encoding (default: the CPU count, 1 for small inputs).
    """
    from ..tokenizer import load_tokenizer

    if not inputs:
        raise ValueError("data prepare: no input files")
    inputs = [input_file(p, "--input") for p in inputs]
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"data prepare: val_fraction must be in [0, 1), got {val_fraction}")
    if shard_tokens < 1:
        raise ValueError(f"data prepare: shard_tokens must be positive, got {shard_tokens}")
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer_spec = str(tokenizer)
        tokenizer = load_tokenizer(tokenizer)
    out = output_dir(out, "--out")
    total_bytes = sum(p.stat().st_size for p in inputs)
    val_target = int(val_fraction * total_bytes)
    if workers is None:
        workers = 1 if total_bytes < 4 * CHUNK_BYTES else max(1, os.cpu_count() or 1)
    chunk = max(4096, min(CHUNK_BYTES, total_bytes // max(1, 4 * workers)))

    from ..rundir import run_lock

    with run_lock(out, "euler data prepare"):
        for old in leftovers(out):  # staging folders of prepares that were interrupted
            remove_tree(old)
        stage = out / f".prepare-{name}.tmp{os.getpid()}"
        stage.mkdir()
        try:
            meta = _prepare_into(stage, inputs, tokenizer, tokenizer_spec, name, val_fraction, shard_tokens,
                                 total_bytes, val_target, workers, chunk, progress)
            _replace_data_set(out, stage, name, meta, log)
        finally:
            remove_tree(stage)
    return meta


def _prepare_into(out: Path, inputs, tokenizer, tokenizer_spec, name, val_fraction, shard_tokens, total_bytes,
                  val_target, workers, chunk, progress) -> dict:
    """Tokenize and write every shard (and the tokenizer file) into `out`; return the meta."""
    writers = {s: _ShardWriter(out, name, s, shard_tokens, tokenizer.n_vocab) for s in ("val", "train")}

    def items():
        """(text, starts_document, split) in order; the split changes at a safe cut near val_target."""
        consumed = 0  # bytes of the documents before this one
        for _, text in iter_documents(inputs):
            size = len(text.encode("utf-8"))
            cuts = safe_cuts(text, chunk)
            if consumed + size <= val_target:
                val_end = len(text)
            elif consumed >= val_target:
                val_end = 0
            else:  # the split falls inside this document: cut it at a safe place near the byte target
                at = len(text.encode("utf-8")[:val_target - consumed].decode("utf-8", "ignore"))
                m = _SAFE.search(text, at)
                val_end = m.start() if m else len(text)
                cuts = sorted(set(cuts) | {val_end})
            consumed += size
            for k in range(len(cuts) - 1):
                yield text[cuts[k]:cuts[k + 1]], k == 0, "val" if cuts[k + 1] <= val_end else "train"

    bar = None
    if progress is None:
        progress = sys.stderr.isatty() and total_bytes > 8 * CHUNK_BYTES
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing", leave=False)

    def consume(results):
        for (text, _starts, split), ids in results:
            writers[split].add(ids)
            if bar is not None:
                bar.update(len(text.encode("utf-8")))

    if workers <= 1:
        _worker_init(tokenizer)
        consume((it, _encode_chunk(it[:2])) for it in items())
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=(tokenizer,)) as pool:
            window: list = []
            for it in items():
                window.append((it, pool.submit(_encode_chunk, it[:2])))
                if len(window) >= 4 * workers:  # bounded memory: keep a few chunks in flight
                    consume([(window[0][0], window[0][1].result())])
                    window.pop(0)
            consume((w[0], w[1].result()) for w in window)
    if bar is not None:
        bar.close()
    for w in writers.values():
        w.close()
    if writers["train"].total == 0:
        why = (f"the validation split is cut at the first line break after the first {val_fraction:g} of the "
               f"input ({val_target:,} of {total_bytes:,} bytes), where the next line starts with a non-blank "
               "character, and the input has no such line break after that point; add line breaks, more "
               "data, or give --val-fraction 0") if writers["val"].total else "the input holds no tokens"
        raise ValueError(f"data prepare: the training split is empty: {why}")
    meta = {
        "format": "llm.c token shards", "magic": 20240520,
        "tokenizer": tokenizer_spec or getattr(tokenizer, "name", None) or type(tokenizer).__name__,
        "n_vocab": int(tokenizer.n_vocab), "eot_token": tokenizer.eot_token,
        "token_dtype": "uint16" if tokenizer.n_vocab <= 2**16 else "uint32",
        "inputs": [str(p) for p in inputs], "input_bytes": total_bytes, "val_fraction": val_fraction,
        "train": {"tokens": writers["train"].total, "shards": writers["train"].shards},
        "val": {"tokens": writers["val"].total, "shards": writers["val"].shards},
    }
    if getattr(tokenizer, "kind", None) == "bpe" and tokenizer_spec != "gpt2":
        tokenizer.save(out / "tokenizer.tiktoken")
        meta["tokenizer_file"] = "tokenizer.tiktoken"
    return meta


SHARD = re.compile(r"(.+)_(train|val)_\d{6}\.bin")


def _replace_data_set(out: Path, stage: Path, name: str, meta: dict, log) -> None:
    """Move the staged data set into `out` in place of the previous one of the same name."""
    old_shards = {p.name for p in out.iterdir() if (m := SHARD.fullmatch(p.name)) and m.group(1) == name}
    remove_tree(out / "meta.json")
    for staged in sorted(stage.iterdir()):
        rename(staged, out / staged.name)
    new = {s["file"] for split in ("train", "val") for s in meta[split]["shards"]}
    stale = sorted(old_shards - new)
    for path in stale:
        remove_tree(out / path)
    if "tokenizer_file" not in meta:
        for path in ("tokenizer.tiktoken", "tokenizer.tiktoken.json"):
            remove_tree(out / path)
    write_text_atomic(out / "meta.json", json.dumps(meta, indent=1) + "\n")
    if stale:
        log(f"note: removed {len(stale)} shard(s) of the previous {name!r} data set in {out}")
    others = sorted({m.group(1) for p in out.iterdir() if (m := SHARD.fullmatch(p.name)) and m.group(1) != name})
    if others:
        log(f"note: {out} also holds shards named {', '.join(others)}_*: a glob over {out}/*_train_*.bin "
            "trains on them too")
