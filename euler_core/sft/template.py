"""The chat template: how a conversation becomes tokens, which of them carry loss, and the special
tokens (and embedding rows) it needs.

A conversation is written as

    <|endoftext|><|system|>You are terse.<|end|><|user|>What is 2 plus 3?<|end|><|assistant|>5<|end|>

one special token opening each message with its role, one closing it. `<|endoftext|>` opens each
conversation, so that conversations packed into one row are separated as documents are in
pretraining. The loss is on the assistant's content and its closing `<|end|>` only (the model learns
to answer and to stop); everything else, the roles' tokens included, has target -1. Generation
prompts with the conversation so far plus `<|assistant|>` and stops at `<|end|>` or `<|endoftext|>`.

Message contents are encoded as plain text: a user who types "<|end|>" gets the characters, never
the special token.

Special tokens missing from the tokenizer are added after its last id (`prepare_tokenizer`), and
the model's token embedding grows to match (`grow_vocabulary`): each new row starts at the mean of
the existing rows, so a new token's logit starts at an average token's and none dominates the
softmax, plus a little noise so that the new tokens differ from one another.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import GPTConfig
from ..tokenizer.bpe import ENDOFTEXT, BPETokenizer

ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
END = "<|end|>"
FORMAT = "nanoeuler-chat-1"


def prepare_tokenizer(tokenizer) -> tuple[BPETokenizer, list[str]]:
    """The tokenizer with every special token of the template (new ones appended after its last id),
    and the names of those added. A byte tokenizer becomes the equivalent BPE with no merges."""
    if tokenizer.kind == "bytes":
        tokenizer = BPETokenizer({bytes([i]): i for i in range(256)}, {}, pattern="gpt2", name="bytes")
    if not isinstance(tokenizer, BPETokenizer):
        raise TypeError(f"chat template: a {type(tokenizer).__name__} cannot take special tokens")
    specials = dict(tokenizer.special_tokens)
    added = []
    for text in (ENDOFTEXT, *ROLE_TOKENS.values(), END):
        if text not in specials:
            specials[text] = tokenizer.n_vocab + len(added)
            added.append(text)
    if not added:
        return tokenizer, []
    grown = BPETokenizer(tokenizer.mergeable_ranks, specials, pattern=tokenizer.pattern, name=tokenizer.name)
    return grown, added


def grow_vocabulary(config: GPTConfig, params: dict, vocab_size: int, seed: int = 0) -> tuple[GPTConfig, dict]:
    """(config, params) with the vocabulary grown to `vocab_size` (padded rows stay zero)."""
    if vocab_size < config.vocab_size:
        raise ValueError(f"grow_vocabulary: {vocab_size} is smaller than the model's {config.vocab_size}")
    if vocab_size == config.vocab_size:
        return config, params
    new_config = dataclasses.replace(config, vocab_size=vocab_size)
    old = np.asarray(params["wte.weight"])[:config.vocab_size]  # (V,C) the real rows
    wte = np.zeros((new_config.padded_vocab_size, config.n_embd), dtype=old.dtype)  # (Vp',C)
    wte[:config.vocab_size] = old
    mean = old.mean(axis=0)
    spread = float((old - mean).std())
    rng = np.random.default_rng(seed)
    n_new = vocab_size - config.vocab_size
    wte[config.vocab_size:vocab_size] = mean + rng.normal(0.0, 0.1 * spread, size=(n_new, config.n_embd))
    return new_config, {**params, "wte.weight": wte}


class ChatTemplate:
    """Encodes conversations for training (ids and a loss mask) and for generation (a prompt)."""

    def __init__(self, tokenizer):
        missing = [t for t in (ENDOFTEXT, *ROLE_TOKENS.values(), END) if t not in getattr(tokenizer, "special_tokens", {})]
        if missing:
            raise ValueError(f"chat template: the tokenizer lacks special tokens {missing}; "
                             "prepare it with prepare_tokenizer()")
        self.tokenizer = tokenizer
        sp = tokenizer.special_tokens
        self.bos = sp[ENDOFTEXT]
        self.role = {role: sp[text] for role, text in ROLE_TOKENS.items()}
        self.end = sp[END]
        self.stop_tokens = (self.end, self.bos)

    def _text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, disallowed_special=())

    def encode(self, messages: list[dict]) -> tuple[list[int], list[bool]]:
        """ids of the whole conversation, and per id whether it is a target that carries loss."""
        ids, mask = [self.bos], [False]
        for m in messages:
            content = self._text(m["content"])
            train = m["role"] == "assistant"
            ids += [self.role[m["role"]], *content, self.end]
            mask += [False] + [train] * len(content) + [train]
        return ids, mask

    def prompt(self, messages: list[dict]) -> list[int]:
        """The conversation so far, then the opening of the assistant's turn."""
        ids = [self.bos]
        for m in messages:
            ids += [self.role[m["role"]], *self._text(m["content"]), self.end]
        return ids + [self.role["assistant"]]

    def to_meta(self) -> dict:
        return {"format": FORMAT, "roles": dict(ROLE_TOKENS), "end": END, "bos": ENDOFTEXT}
