"""GPT-2's own tokenizer: its merge ranks ship with NanoEuler (nothing is downloaded).

The ranks are `data/gpt2.tiktoken` in this package: GPT-2's vocabulary in tiktoken's format, the
file OpenAI publishes as `r50k_base.tiktoken`, released with GPT-2 under the licence in
`data/LICENSE.gpt2` (data/README.md says where it comes from and what is checked).
`EULER_GPT2_RANKS=PATH` names another copy to use instead.

Whichever file is used, its SHA-256 is checked against the hash tiktoken pins for
`r50k_base.tiktoken`: "gpt2" means exactly GPT-2's ranks. The tokenizer is 50,256 mergeable
tokens, `<|endoftext|>` = 50256 and GPT-2's pre-split pattern.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .bpe import ENDOFTEXT, BPETokenizer, load_tiktoken_ranks

PACKAGED_RANKS = Path(__file__).resolve().parent / "data" / "gpt2.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_N_MERGEABLE = 50256
GPT2_EOT = 50256


def find_gpt2_ranks() -> Path:
    """The path of GPT-2's ranks: `$EULER_GPT2_RANKS` when set, else the copy in this package."""
    env = os.environ.get("EULER_GPT2_RANKS")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"EULER_GPT2_RANKS={env}: no such file "
                                    f"(unset it to use the ranks that ship with NanoEuler, {PACKAGED_RANKS})")
        return path
    if not PACKAGED_RANKS.is_file():
        raise FileNotFoundError(f"GPT-2's ranks {PACKAGED_RANKS} are missing from this installation "
                                "(reinstall NanoEuler, or set EULER_GPT2_RANKS to a copy of r50k_base.tiktoken)")
    return PACKAGED_RANKS


def gpt2_tokenizer(path: str | os.PathLike | None = None, fast: bool | None = None) -> BPETokenizer:
    """GPT-2's tokenizer from `path` or from where `find_gpt2_ranks` finds it, checksum verified."""
    path = Path(path) if path is not None else find_gpt2_ranks()
    if not path.is_file():
        raise FileNotFoundError(f"GPT-2 ranks file {path}: no such file")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != R50K_SHA256:
        raise ValueError(f"GPT-2 ranks file {path}: sha256 {digest[:12]}... is not GPT-2's ({R50K_SHA256[:12]}...); "
                         "for another vocabulary pass the file itself as the tokenizer, not 'gpt2'")
    ranks = load_tiktoken_ranks(path)
    return BPETokenizer(ranks, {ENDOFTEXT: GPT2_EOT}, pattern="gpt2", name="gpt2", fast=fast)
