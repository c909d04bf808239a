"""The GPT-2 ops, each named once: `OPS[name]` is its spec (math, shapes, counts, validation)."""

from .adamw import SPEC as ADAMW
from .attention import SPEC as ATTENTION
from .attention_cached import SPEC as ATTENTION_CACHED
from .base import OpSpec
from .classifier_crossentropy import SPEC as CLASSIFIER_CROSSENTROPY
from .crossentropy import SPEC as CROSSENTROPY
from .crossentropy_onepass import SPEC as CROSSENTROPY_ONEPASS
from .embedding import SPEC as EMBEDDING
from .gelu import SPEC as GELU
from .gelu_matmul import SPEC as GELU_MATMUL
from .layernorm import SPEC as LAYERNORM
from .layernorm_residual import SPEC as LAYERNORM_RESIDUAL
from .matmul import SPEC as MATMUL
from .matmul_gelu import SPEC as MATMUL_GELU
from .matmul_residual import SPEC as MATMUL_RESIDUAL
from .mlp import SPEC as MLP
from .residual import SPEC as RESIDUAL
from .sumsq import SPEC as SUMSQ

# the primitives, then the fused ops (each `replaces` some of the primitives: see base.py)
OPS: dict[str, OpSpec] = {s.name: s for s in (EMBEDDING, LAYERNORM, MATMUL, ATTENTION, GELU, RESIDUAL,
                                              CROSSENTROPY, ADAMW, SUMSQ, ATTENTION_CACHED,
                                              LAYERNORM_RESIDUAL, MATMUL_RESIDUAL, MATMUL_GELU, GELU_MATMUL, MLP,
                                              CLASSIFIER_CROSSENTROPY, CROSSENTROPY_ONEPASS)}

__all__ = ["OPS", "OpSpec"]
