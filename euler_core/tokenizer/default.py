"""The tokenizer `euler train` uses when it is given none: a small BPE vocabulary trained on the
default corpus itself, cached on disk so that only the first run pays for the training.

The cache key is a SHA-256 of the corpus text and every setting that changes the result (vocabulary
size, conventions, pattern, special tokens, trainer version), so a different corpus or size never
reuses a stale vocabulary. The cache directory is `cache_dir`, else `$EULER_CACHE_DIR`, else
`~/.cache/nanoeuler`; files are `tokenizers/bpe-<vocab>-<key>.tiktoken` plus their `.json` sidecar,
written atomically (two runs racing to write the same file both write the same bytes), and a
`.sha256` of both: an entry whose files no longer match it (damaged, edited) is trained again.
A resumed run never reads this cache: it uses the copy saved in its checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..files import write_text_atomic
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
    check = path.with_name(path.name + ".sha256")
    try:
        if check.read_text().strip() == _content_digest(path):
            return BPETokenizer.load(path)
    except (ValueError, OSError):
        pass  # missing, damaged or edited: rebuilt below
    tok = train_bpe(text, vocab_size, special_tokens=[ENDOFTEXT], name=f"default-{int(vocab_size)}").tokenizer
    try:
        tok.save(path)
        write_text_atomic(check, _content_digest(path) + "\n")
    except OSError:
        pass  # an unwritable cache costs a retraining next time, nothing else
    return tok


def _content_digest(path: Path) -> str:
    """SHA-256 of a cached tokenizer's two files, as written: a cache file changed since is not used."""
    return hashlib.sha256(path.read_bytes() + b"\0" + sidecar_path(path).read_bytes()).hexdigest()
