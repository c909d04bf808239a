"""Training with conventions="hf" reproduces Hugging Face `tokenizers`' BpeTrainer merge for merge.

`tokenizers` is a test-only reference, installed by the `dev` extra (CI has it); it is never a
dependency of NanoEuler itself. Without it (a bare install) the test skips with that reason. The corpus is real text: a slice of the standard library's source.
"""

from __future__ import annotations

import pytest

from euler_core.tokenizer.train import bytes_to_unicode, train_bpe
from tokenizer_corpus import stdlib_text

tokenizers = pytest.importorskip("tokenizers", reason="Hugging Face tokenizers is not installed (pip install -e '.[dev]')")


def hf_train(path, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(path)], trainer)
    import json

    model = json.loads(tok.to_str())["model"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


@pytest.mark.parametrize("size,vocab", [(300_000, 2000), (2_000_000, 8192)])
def test_hf_conventions_reproduce_hf_merges(tmp_path, size, vocab):
    text = stdlib_text(size)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    expected = hf_train(path, vocab)
    ours = train_bpe(path.read_text(encoding="utf-8"), vocab, conventions="hf").merges
    b2u = bytes_to_unicode()
    ours_as_hf = [("".join(b2u[x] for x in a), "".join(b2u[x] for x in b)) for a, b in ours]
    assert len(ours_as_hf) == len(expected)
    first_difference = next((k for k, (x, y) in enumerate(zip(ours_as_hf, expected)) if x != y), None)
    assert first_difference is None, (first_difference, ours_as_hf[first_difference], expected[first_difference])
