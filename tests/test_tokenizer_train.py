"""BPE training: the compiled incremental trainer against a plain recount-everything reference."""

from __future__ import annotations

from collections import Counter

import pytest

from euler_core.tokenizer.bpe import BPETokenizer
from euler_core.tokenizer.pattern import split
from euler_core.tokenizer.train import _initial_byte_ids, count_pieces, train_bpe
from tokenizer_corpus import stdlib_text


def reference_train(text: str, vocab_size: int, conventions: str = "nanoeuler") -> list[tuple[bytes, bytes]]:
    """The textbook loop: recount every pair of every word at each step, take the most frequent
    (ties: smallest pair of ids), merge it everywhere left to right. Returns the merges as bytes."""
    chunks = text.splitlines(keepends=True) if conventions == "hf" else [text]
    words = Counter(p.encode("utf-8") for chunk in chunks for p in split(chunk))
    byte_ids = _initial_byte_ids(conventions)
    vocab = {int(byte_ids[b]): bytes([b]) for b in range(256)}
    inverse = {v: k for k, v in vocab.items()}
    seqs = {w: [int(byte_ids[b]) for b in w] for w in words}
    merges = []
    n_tokens = 256
    while n_tokens < vocab_size - 1:  # one id is left for <|endoftext|>
        pairs = Counter()
        for w, seq in seqs.items():
            for pair in zip(seq, seq[1:]):
                pairs[pair] += words[w]
        if not pairs:
            break
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        merged = vocab[a] + vocab[b]
        new = inverse.get(merged)
        if new is None:
            new = n_tokens
            vocab[new] = merged
            inverse[merged] = new
            n_tokens += 1
        merges.append((vocab[a], vocab[b]))
        for w, seq in seqs.items():
            out, k = [], 0
            while k < len(seq):
                if k + 1 < len(seq) and seq[k] == a and seq[k + 1] == b:
                    out.append(new)
                    k += 2
                else:
                    out.append(seq[k])
                    k += 1
            seqs[w] = out
    return merges


@pytest.fixture(scope="module")
def small_corpus():
    text = stdlib_text(40_000, skip=200)[:40_000]
    return text + "\n\naaaa aaaa aaaaa abab ababab  \n\n\t\r\n日本語 日本 😀😀 don't"


@pytest.mark.parametrize("conventions", ["nanoeuler", "hf"])
def test_merges_equal_reference_trainer(small_corpus, conventions):
    result = train_bpe(small_corpus, 256 + 350 + 1, conventions=conventions)
    expected = reference_train(small_corpus, 256 + 350 + 1, conventions)
    assert result.merges == expected
    assert result.tokenizer.n_vocab == 256 + 350 + 1


def test_piece_counting_matches_regex():
    text = stdlib_text(1_500_000, skip=50)
    assert count_pieces([text]) == Counter(p.encode("utf-8") for p in split(text))
    lines = text.splitlines(keepends=True)
    assert count_pieces([text], per_line=True) == Counter(p.encode("utf-8") for line in lines for p in split(line))


def test_deterministic_and_roundtrips(tmp_path):
    text = stdlib_text(300_000, skip=400)
    a = train_bpe(text, 1024).tokenizer
    b = train_bpe(text, 1024).tokenizer
    assert a.mergeable_ranks == b.mergeable_ranks
    assert a.n_vocab == 1024 and a.eot_token == 1023
    sample = text[:50_000] + " ünïcödé 😀 \r\n"
    ids = a.encode_ordinary(sample)
    assert ids == a.encode_ordinary_reference(sample)
    assert a.decode(ids) == sample
    assert len(ids) < len(sample.encode()) / 2.5  # it compresses
    path = a.save(tmp_path / "tok.tiktoken")
    loaded = BPETokenizer.load(path)
    assert loaded.mergeable_ranks == a.mergeable_ranks and loaded.special_tokens == a.special_tokens
    assert loaded.encode(sample + "<|endoftext|>", allowed_special="all") == ids + [1023]


def test_special_tokens_are_not_merged_through():
    text = "hello<|endoftext|>hello<|endoftext|>" * 200
    tok = train_bpe(text, 300, special_tokens=["<|endoftext|>", "<|pad|>"]).tokenizer
    assert tok.special_tokens == {"<|endoftext|>": tok.n_vocab - 2, "<|pad|>": tok.n_vocab - 1}
    assert all(b"<|" not in t or t == b"<|" for t in tok.mergeable_ranks if len(t) > 2)
    assert tok.encode("hello<|endoftext|>", allowed_special="all")[-1] == tok.eot_token


def test_stops_when_no_pairs_are_left():
    tok = train_bpe("ab ab ab", 1000).tokenizer
    assert tok.n_vocab < 1000 and tok.encode_ordinary("ab ab") == tok.encode_ordinary_reference("ab ab")


def test_bad_vocab_size():
    with pytest.raises(ValueError, match="under 256"):
        train_bpe("some text", 200)
    with pytest.raises(ValueError, match="under 256"):
        train_bpe("some text", 256)  # 256 bytes + <|endoftext|> do not fit


def test_special_token_collisions():
    ranks = {bytes([b]): b for b in range(256)}
    ranks[b"ab"] = 256
    with pytest.raises(ValueError, match="also a mergeable token"):
        BPETokenizer(ranks, {"ab": 257})
    with pytest.raises(ValueError, match="collides with the mergeable token"):
        BPETokenizer(ranks, {"<|x|>": 256})
    with pytest.raises(ValueError, match="share an id"):
        BPETokenizer(ranks, {"<|x|>": 300, "<|y|>": 300})
    del ranks[b"a"]
    with pytest.raises(ValueError, match="not byte-level"):
        BPETokenizer(ranks)


def test_default_tokenizer_is_cached(tmp_path, monkeypatch):
    from euler_core.tokenizer import default_tokenizer, tokenizer_from_checkpoint

    text = stdlib_text(200_000, skip=300)
    monkeypatch.setenv("EULER_CACHE_DIR", str(tmp_path / "cache"))
    first = default_tokenizer(text, 512)
    files = sorted((tmp_path / "cache" / "tokenizers").iterdir())
    assert sorted(f.suffix for f in files) == [".json", ".sha256", ".tiktoken"]
    second = default_tokenizer(text, 512)
    assert second.mergeable_ranks == first.mergeable_ranks and second.n_vocab == 512
    other = default_tokenizer(text + "x", 512)  # another corpus, another cache entry
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 6
    assert other.n_vocab == 512
    # a checkpoint carries the tokenizer along
    meta = first.to_checkpoint(tmp_path / "ckpt")
    again = tokenizer_from_checkpoint(tmp_path / "ckpt", meta)
    assert again.encode_ordinary(text[:5000]) == first.encode_ordinary(text[:5000]) and again.eot_token == 511
