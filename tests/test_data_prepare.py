"""`euler data prepare`: shards equal to encoding each document whole, split, formats, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from euler_core.data.loader import TokenSource
from euler_core.data.prepare import prepare, safe_cuts
from euler_core.data.shards import ShardError, open_shard, write_shard
from euler_core.tokenizer.train import train_bpe
from tokenizer_corpus import require_gpt2_ranks, stdlib_text


@pytest.fixture(scope="module")
def small_tok():
    return train_bpe(stdlib_text(200_000, skip=500), 600).tokenizer


def read_split(out, meta, split):
    parts = [np.asarray(open_shard(out / s["file"])) for s in meta[split]["shards"]]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def test_safe_cuts_do_not_change_tokens(small_tok):
    text = stdlib_text(600_000, skip=700)
    cuts = safe_cuts(text, 20_000)
    assert len(cuts) > 10
    pieces = [small_tok.encode_ordinary(text[a:b]) for a, b in zip(cuts, cuts[1:])]
    assert sum(pieces, []) == small_tok.encode_ordinary(text)


@pytest.mark.parametrize("workers", [1, 2])
def test_prepare_equals_whole_encoding(tmp_path, small_tok, workers):
    a, b = stdlib_text(400_000, skip=900), "second document\n\n  with <|endoftext|> in it  "
    (tmp_path / "a.txt").write_text(a)
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": b}) + "\n\n" + json.dumps({"text": "third"}) + "\n")
    out = tmp_path / "out"
    meta = prepare([tmp_path / "a.txt", tmp_path / "b.jsonl"], small_tok, out, val_fraction=0.1,
                   shard_tokens=50_000, workers=workers)
    eot = small_tok.eot_token
    expected = np.array([eot, *small_tok.encode_ordinary(a), eot, *small_tok.encode_ordinary(b), eot,
                         *small_tok.encode_ordinary("third")])
    got = np.concatenate([read_split(out, meta, "val"), read_split(out, meta, "train")])
    assert np.array_equal(got, expected)
    assert 0.07 < meta["val"]["tokens"] / len(expected) < 0.13
    assert len(meta["train"]["shards"]) >= 3 and all(s["tokens"] <= 50_000 for s in meta["train"]["shards"])
    assert (out / "data_train_000000.bin").exists() and (out / "data_val_000000.bin").exists()
    assert json.loads((out / "meta.json").read_text())["n_vocab"] == 600
    assert (out / "tokenizer.tiktoken").exists()
    # the training loader reads what was written
    src = TokenSource.from_shards(str(out / "data_train_*.bin"), "train")
    assert len(src) == meta["train"]["tokens"]


def test_prepare_with_gpt2(tmp_path):
    from euler_core.tokenizer.gpt2 import gpt2_tokenizer

    tok = gpt2_tokenizer(require_gpt2_ranks())
    (tmp_path / "a.txt").write_text("Hello world")
    meta = prepare([tmp_path / "a.txt"], tok, tmp_path / "out", val_fraction=0.0)
    assert read_split(tmp_path / "out", meta, "train").tolist() == [50256, 15496, 995]
    assert meta["token_dtype"] == "uint16" and meta["val"]["tokens"] == 0


def test_large_vocabulary_gives_uint32_shards(tmp_path):
    from euler_core.tokenizer.bpe import BPETokenizer

    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"he"] = 70_000  # a sparse id above 65535
    tok = BPETokenizer(ranks, {"<|endoftext|>": 70_001}, fast=False)
    (tmp_path / "a.txt").write_text("hehe")
    meta = prepare([tmp_path / "a.txt"], tok, tmp_path / "out", val_fraction=0.0)
    data = read_split(tmp_path / "out", meta, "train")
    assert data.dtype == np.uint32 and data.tolist() == [70_001, 70_000, 70_000] and meta["token_dtype"] == "uint32"


def test_bad_shards_are_rejected_by_the_loader(tmp_path):
    good = write_shard(tmp_path / "x_train_000000.bin", np.arange(100))
    raw = bytearray(good.read_bytes())
    raw[0:4] = (12345).to_bytes(4, "little")
    (tmp_path / "y_train_000000.bin").write_bytes(bytes(raw))
    with pytest.raises(ShardError, match="magic number 12345, expected 20240520"):
        TokenSource.from_shards(str(tmp_path / "y_train_*.bin"), "train")
    (tmp_path / "z_train_000000.bin").write_bytes(bytes(good.read_bytes())[:-10])
    with pytest.raises(ShardError, match="truncated"):
        open_shard(tmp_path / "z_train_000000.bin")


def test_prepare_errors(tmp_path, small_tok):
    with pytest.raises(FileNotFoundError, match="no such file"):
        prepare([tmp_path / "missing.txt"], small_tok, tmp_path / "out")
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(ValueError, match="line 1: expected a JSON object with a string 'text'"):
        prepare([tmp_path / "bad.jsonl"], small_tok, tmp_path / "out")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="val_fraction"):
        prepare([tmp_path / "a.txt"], small_tok, tmp_path / "out", val_fraction=1.5)
