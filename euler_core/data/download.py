"""`euler data download NAME`: standard data sets, checksummed, resumable.

    tinyshakespeare   Karpathy's char-rnn Tiny Shakespeare (1,115,394 bytes of text), SHA-256 pinned.
                      Tokenize it with `euler data prepare --input DIR/input.txt --tokenizer gpt2 ...`.
    fineweb-edu       FineWeb-Edu already tokenized with GPT-2, in llm.c's shard format, as llm.c
                      publishes it (Hugging Face: karpathy/fineweb-edu-100B-gpt2-token-shards): the
                      validation shard edu_fineweb_val_000000.bin and training shards
                      edu_fineweb_train_000001.bin... (100M tokens, about 200 MB, each).

How a file is checked: against its pinned SHA-256 where the catalogue has one (tinyshakespeare);
otherwise against the SHA-256 the server states for it (Hugging Face sends the LFS object's SHA-256
in the `X-Linked-ETag` header), and every token shard's llm.c header and length are checked too
(`open_shard`). A file that fails is removed and the command fails with the reason.

Resuming: bytes arrive in `FILE.part`; an interrupted download (Ctrl-C, a dropped connection) picks
up where it stopped with an HTTP Range request, and a failed read is retried a few times by itself.
A file already complete (and verified) is not fetched again.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class RemoteFile:
    name: str                 # path relative to the base URL, and the local file name
    sha256: str | None = None  # pinned checksum, when known
    shard: bool = False       # an llm.c token shard (its header is checked after download)


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    base_url: str
    files: Callable[[int | None], list[RemoteFile]]


def _fineweb_edu(shards: int | None) -> list[RemoteFile]:
    n = 10 if shards is None else shards
    if not 0 <= n <= 1001:
        raise ValueError(f"fineweb-edu has 1001 training shards; asked for {n}")
    return ([RemoteFile("edu_fineweb_val_000000.bin", shard=True)]
            + [RemoteFile(f"edu_fineweb_train_{k:06d}.bin", shard=True) for k in range(1, n + 1)])


DATASETS = {
    "tinyshakespeare": Dataset(
        "tinyshakespeare", "Tiny Shakespeare text (1.1 MB)",
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/",
        lambda shards: [RemoteFile("input.txt", sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed")]),
    "fineweb-edu": Dataset(
        "fineweb-edu", "FineWeb-Edu GPT-2 token shards as llm.c publishes them (val + --shards train shards, default 10)",
        "https://huggingface.co/datasets/karpathy/fineweb-edu-100B-gpt2-token-shards/resolve/main/",
        _fineweb_edu),
}

CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")


class DownloadError(ValueError):
    """A download that could not be completed or verified."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _stated_sha256(headers) -> str | None:
    """The SHA-256 a server states for the file (Hugging Face: X-Linked-ETag of an LFS object)."""
    for key in ("X-Linked-ETag", "X-Checksum-Sha256"):
        value = headers.get(key)
        if value:
            value = value.strip().strip('"').lower()
            if value.startswith("w/"):
                value = value[2:].strip('"')
            if _HEX64.fullmatch(value):
                return value
    return None


def fetch(url: str, dest: Path, sha256: str | None = None, progress: bool = False, retries: int = 3,
          timeout: float = 60.0) -> Path:
    """Download `url` to `dest`, resuming from `dest`.part, verifying the checksum; return dest."""
    import urllib.error
    import urllib.request

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    stated = None
    attempt = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        request = urllib.request.Request(url, headers={"User-Agent": "nanoeuler"})
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                stated = stated or _stated_sha256(response.headers)
                if have and response.status != 206:  # the server ignored the Range: start over
                    have = 0
                mode = "ab" if have else "wb"
                total = response.headers.get("Content-Length")
                total = int(total) + have if total is not None else None
                bar = None
                if progress:
                    from tqdm import tqdm

                    bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name, leave=False)
                try:
                    with open(part, mode) as f:
                        while True:
                            block = response.read(CHUNK)
                            if not block:
                                break
                            f.write(block)
                            if bar is not None:
                                bar.update(len(block))
                finally:
                    if bar is not None:
                        bar.close()
                if total is not None and part.stat().st_size < total:
                    raise ConnectionError(f"connection closed after {part.stat().st_size} of {total} bytes")
            break
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:  # Range not satisfiable: the part is already whole (or bad)
                break
            raise DownloadError(f"download {url}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            attempt += 1
            if attempt > retries:
                raise DownloadError(f"download {url}: {e} (after {retries} retries; run the command again to "
                                    f"resume from the {part.stat().st_size if part.exists() else 0} bytes in {part})") from None
            time.sleep(min(0.2 * 2 ** attempt, 5.0))
    expected = sha256 or stated
    if expected is not None:
        actual = _sha256(part)
        if actual != expected:
            part.unlink()
            raise DownloadError(f"download {url}: SHA-256 {actual} does not match the expected {expected}; "
                                "the partial file was removed, run the command again")
    os.replace(part, dest)
    return dest


def download(name: str, out: str | os.PathLike | None = None, shards: int | None = None,
             base_url: str | None = None, progress: bool | None = None) -> list[Path]:
    """Download data set `name` into `out` (default data/NAME); return the paths of its files."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r} (known: {', '.join(sorted(DATASETS))})")
    ds = DATASETS[name]
    out = Path(out) if out is not None else Path("data") / name
    base = base_url or ds.base_url
    if not base.endswith("/"):
        base += "/"
    if progress is None:
        progress = sys.stderr.isatty()
    paths = []
    for rf in ds.files(shards):
        dest = out / rf.name
        if dest.is_file() and (rf.sha256 is None or _sha256(dest) == rf.sha256):
            paths.append(dest)
            continue
        fetch(base + rf.name, dest, sha256=rf.sha256, progress=progress)
        if rf.shard:
            from .shards import ShardError, open_shard

            try:
                open_shard(dest)
            except ShardError as e:
                dest.unlink()
                raise DownloadError(f"download {base + rf.name}: not a valid token shard ({e}); removed") from None
        paths.append(dest)
    return paths
