"""GPT-2's tokenizer against tiktoken: identical ids on real corpora, on every code point and on
random Unicode text.

tiktoken is built here from the ranks that ship with NanoEuler (no download); our fast path (numba)
and our reference path (the pattern with explicit classes, Python's `re`, a dict) must both agree
with it exactly, and decode(encode(s)) == s. The character classes themselves are compared with
tiktoken's over every code point (the generator's own probe, bench/tokenizer/unicode_classes.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import subprocess
import sys

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenizer_corpus import REPO, require_gpt2_ranks, stdlib_text


@pytest.fixture(scope="module")
def gpt2():
    from euler_core.tokenizer.gpt2 import gpt2_tokenizer

    return gpt2_tokenizer(require_gpt2_ranks())


@pytest.fixture(scope="module")
def reference_enc(gpt2):
    from euler_core.tokenizer.pattern import GPT2_PATTERN

    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=gpt2.mergeable_ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def test_known_ids(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.n_vocab == 50257 and gpt2.eot_token == 50256
    assert gpt2.encode("<|endoftext|>", allowed_special="all") == [50256]


def test_whole_corpus_matches_tiktoken(gpt2, reference_enc):
    text = stdlib_text(4_500_000)
    assert len(text.encode("utf-8")) >= 4_000_000
    expected = reference_enc.encode_ordinary(text)
    fast = gpt2.encode_ordinary(text)
    assert fast == expected
    assert gpt2.decode(fast) == text
    # the readable path on a slice (it is slower, and the fast path is checked against it below too)
    part = text[:400_000]
    assert gpt2.encode_ordinary_reference(part) == reference_enc.encode_ordinary(part)


def test_char_classes_are_tiktokens():
    """The committed ranges of \\p{L}, \\p{N} and \\s are exactly what tiktoken's engine matches, code
    point by code point (a tiktoken with other Unicode tables fails here: regenerate the table)."""
    spec = importlib.util.spec_from_file_location("unicode_classes_generator",
                                                  REPO / "bench" / "tokenizer" / "unicode_classes.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.differences(generator.probe_tiktoken()) == []


def test_explicit_pattern_refuses_classes_it_has_no_table_for():
    from euler_core.tokenizer.pattern import explicit_pattern

    with pytest.raises(ValueError, match=r"class \\p has no explicit table"):
        explicit_pattern(r" ?\p{Lu}+|\s+")


def every_code_point_in_context(chunk=4000):
    """Texts holding every code point (surrogates excepted) between letters, digits and spaces,
    `chunk` code points per text, in a shuffled order: each class boundary the pattern has."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    random.Random(0).shuffle(cps)
    for k in range(0, len(cps), chunk):
        yield k, "".join(f"a{chr(c)}b 1{chr(c)} {chr(c)}{chr(c)}  {chr(c)}x" for c in cps[k:k + chunk])


def test_every_code_point_matches_tiktoken(gpt2, reference_enc):
    """Our ids are tiktoken's on every code point in context (fast path), and the reference path's
    pre-split (`re`, explicit ranges) cuts those texts exactly where the fast path's scanner does."""
    import numpy as np

    from euler_core.tokenizer import fast
    from euler_core.tokenizer.pattern import compiled

    regex_split, table = compiled("gpt2"), fast.char_classes()
    for k, text in every_code_point_in_context():
        assert gpt2.encode_ordinary(text) == reference_enc.encode_ordinary(text), f"code points from #{k}"
        buf = np.frombuffer(text.encode("utf-8"), np.uint8)
        starts = fast.split_offsets(buf, table)
        fast_lengths = np.add.reduceat((buf & 0xC0) != 0x80, starts[:-1])  # characters: non-continuation bytes
        assert np.array_equal(fast_lengths, list(map(len, regex_split.findall(text)))), f"code points from #{k}"


def test_pre_split_imports_no_regex_module():
    """Both paths encode without the `regex` module (the installed release cannot matter)."""
    code = ("import sys; from euler_core.tokenizer import load_tokenizer; t = load_tokenizer('gpt2'); "
            "s = 'Hello, w\\u00f6rld 42 \\u65e5\\u672c \\U0001F600!'; "
            "assert t.encode_ordinary(s) == t.encode_ordinary_reference(s) == t.encode(s, allowed_special='all'); "
            "assert 'regex' not in sys.modules, 'regex was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


FRAGMENTS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "don't", "I'm", "'", "''",
             " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c",
             "\x1c", "\x85", "0", "42", "3.14", "1,000", "٣", "Ⅻ", "½", "hello", "World", "ABC", "é", "e\u0301",
             "a\u0308\u0304", "日本語", "中文", "한국어", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u200d", "\ufeff", "!", "?!",
             "...", "—", "«", "»", "$", "€", "<|endoftext|>", "\x00", "\U0010ffff", "\U000e0001", "\u0378", "ǅ"]

text_strategy = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=40).map("".join),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_strategy)
def test_random_text_matches_tiktoken(gpt2, reference_enc, s):
    expected = reference_enc.encode_ordinary(s)
    assert gpt2.encode_ordinary(s) == expected
    assert gpt2.encode_ordinary_reference(s) == expected
    assert gpt2.encode(s, allowed_special="all") == reference_enc.encode(s, allowed_special="all")
    assert gpt2.decode(expected) == s
    assert gpt2.decode_bytes(expected) == s.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50256), max_size=30))
def test_decode_of_any_ids_matches_tiktoken(gpt2, reference_enc, ids):
    """Token sequences that cut characters apart decode with U+FFFD exactly as tiktoken's."""
    assert gpt2.decode(ids) == reference_enc.decode(ids)
    assert gpt2.decode_bytes(ids) == reference_enc.decode_bytes(ids)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100))
def test_encode_bytes_is_exactly_inverted(gpt2, data):
    assert gpt2.decode_bytes(gpt2.encode_bytes(data)) == data


def test_special_token_rules_as_tiktoken(gpt2, reference_enc):
    s = "a <|endoftext|> b<|endoftext|>\n\n<|endoftext|>  "
    with pytest.raises(ValueError, match="disallowed special token"):
        gpt2.encode(s)
    for kwargs in ({"allowed_special": "all"}, {"allowed_special": {"<|endoftext|>"}}, {"disallowed_special": ()}):
        assert gpt2.encode(s, **kwargs) == reference_enc.encode(s, **kwargs), kwargs
    assert gpt2.encode_ordinary(s) == reference_enc.encode_ordinary(s)
    with pytest.raises(ValueError, match="does not have"):
        gpt2.encode(s, allowed_special={"<|im_start|>"})


def test_lone_surrogates_replaced_as_tiktoken(gpt2, reference_enc):
    s = "ab\ud800cd \udfff"
    assert gpt2.encode(s) == reference_enc.encode(s)
    assert gpt2.encode_ordinary(s) == reference_enc.encode_ordinary(s)


def test_long_pieces(gpt2, reference_enc):
    """Pieces over fast.LONG_PIECE bytes take the heap merge; it must give the same tokens."""
    cases = [" " * 5000 + "x", "=" * 3000, "ab" * 4000, "\n" * 100 + "  \t", "9" * 1000, "x" * 70, "a" * 40_000]
    rng = random.Random(1)
    alphabet = ["a", "b", "ab", "=", "-", "é", "日", "1", "th", "e", "in"]
    for _ in range(150):
        k = rng.randint(1, len(alphabet))
        cases.append("".join(rng.choice(alphabet[:k]) for _ in range(rng.randint(100, 2000))))
    for s in cases:
        assert gpt2.encode_ordinary(s) == reference_enc.encode_ordinary(s), s[:40]
    for s in [c for c in cases if len(c) <= 600][:20]:  # the reference is quadratic
        assert gpt2.encode_ordinary(s) == gpt2.encode_ordinary_reference(s)


def test_gpt2_ranks_ship_with_the_package(monkeypatch):
    """`--tokenizer gpt2` needs no download and no setting: the ranks and their licence are package data."""
    from euler_core.tokenizer import load_tokenizer
    from euler_core.tokenizer.gpt2 import PACKAGED_RANKS, R50K_SHA256, find_gpt2_ranks

    monkeypatch.delenv("EULER_GPT2_RANKS", raising=False)
    assert find_gpt2_ranks() == PACKAGED_RANKS
    assert hashlib.sha256(PACKAGED_RANKS.read_bytes()).hexdigest() == R50K_SHA256
    assert "Modified MIT License" in (PACKAGED_RANKS.parent / "LICENSE.gpt2").read_text()
    assert load_tokenizer("gpt2").encode("Hello world") == [15496, 995]


def test_gpt2_ranks_from_environment_override(tmp_path, monkeypatch):
    from euler_core.tokenizer.gpt2 import PACKAGED_RANKS, find_gpt2_ranks, gpt2_tokenizer

    copy = tmp_path / "r50k_base.tiktoken"
    copy.write_bytes(PACKAGED_RANKS.read_bytes())
    monkeypatch.setenv("EULER_GPT2_RANKS", str(copy))
    assert find_gpt2_ranks() == copy
    assert gpt2_tokenizer().encode("Hello world") == [15496, 995]
