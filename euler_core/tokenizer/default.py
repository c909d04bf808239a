"""The tokenizer `euler train` uses when it is given none: a small BPE vocabulary trained on the
default corpus itself, cached on disk so that only the first run pays for the training.

The cache key is a SHA-256 of the corpus text and every setting that changes the result (vocabulary
size, conventions, pattern, special tokens, trainer version), so a different corpus or size never
reuses a stale vocabulary. The cache directory is `cache_dir`, else `$EULER_CACHE_DIR`, else
`~/.cache/nanoeuler`; files are `tokenizers/bpe-<vocab>-<key>.tiktoken` plus their `.json` sidecar,
written atomically (two runs racing to write the same file both write the same bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .bpe import ENDOFTEXT, BPETokenizer, sidecar_path

TRAINER_VERSION = 1  # bump when training would give different merges for the same input


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("EULER_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "nanoeuler"


def default_tokenizer(text: str, vocab_size: int, cache_dir: str | os.PathLike | None = None) -> BPETokenizer:
    """A BPE tokenizer of `vocab_size` ids (the last is `<|endoftext|>`) trained on `text`, cached."""
    from .train import train_bpe

    settings = {"vocab_size": int(vocab_size), "conventions": "nanoeuler", "pattern": "gpt2",
                "special_tokens": [ENDOFTEXT], "trainer": TRAINER_VERSION}
    digest = hashlib.sha256()
    digest.update(json.dumps(settings, sort_keys=True).encode())
    digest.update(b"\0")
    digest.update(text.encode("utf-8", errors="surrogatepass"))
    key = digest.hexdigest()[:20]
    path = cache_root(cache_dir) / "tokenizers" / f"bpe-{int(vocab_size)}-{key}.tiktoken"
    if path.is_file() and sidecar_path(path).is_file():
        try:
            return BPETokenizer.load(path)
        except (ValueError, OSError):
            pass  # a damaged cache entry is rebuilt below
    tok = train_bpe(text, vocab_size, special_tokens=[ENDOFTEXT], name=f"default-{int(vocab_size)}").tokenizer
    try:
        tok.save(path)
    except OSError:
        pass  # an unwritable cache costs a retraining next time, nothing else
    return tok
