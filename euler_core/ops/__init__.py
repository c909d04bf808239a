"""The GPT-2 ops, each named once: `OPS[name]` is its spec (math, shapes, counts, validation)."""

from .adamw import SPEC as ADAMW
from .attention import SPEC as ATTENTION
from .attention_cached import SPEC as ATTENTION_CACHED
from .base import OpSpec
from .crossentropy import SPEC as CROSSENTROPY
from .embedding import SPEC as EMBEDDING
from .gelu import SPEC as GELU
from .layernorm import SPEC as LAYERNORM
from .matmul import SPEC as MATMUL
from .residual import SPEC as RESIDUAL
from .sumsq import SPEC as SUMSQ

OPS: dict[str, OpSpec] = {s.name: s for s in (EMBEDDING, LAYERNORM, MATMUL, ATTENTION, GELU, RESIDUAL,
                                              CROSSENTROPY, ADAMW, SUMSQ, ATTENTION_CACHED)}

__all__ = ["OPS", "OpSpec"]
