"""Model configurations: GPT-2's four sizes and small presets that train on a laptop CPU."""

from __future__ import annotations

from dataclasses import asdict, dataclass


MAX_VOCAB_MULTIPLE = 4096  # llm.c pads to a multiple of 128; more than this is no real model


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a GPT-2 model.

    n_layer, n_head, n_embd   depth, heads per layer, channels C (n_embd % n_head == 0)
    block_size                the longest context (rows of the position embedding, maxT)
    vocab_size                the tokenizer's vocabulary V
    vocab_multiple            the vocabulary is padded up to a multiple of this (llm.c pads GPT-2's
                              50257 to 50304 = 393 * 128 for faster matmuls); the padded rows of wte
                              exist but are never read as tokens nor trained as targets. At most
                              MAX_VOCAB_MULTIPLE: a file's metadata cannot make the padding huge
    """

    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    vocab_size: int = 50257
    vocab_multiple: int = 128

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "vocab_multiple"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig: {name} must be a positive int, got {value!r}")
        if self.vocab_multiple > MAX_VOCAB_MULTIPLE:
            raise ValueError(f"GPTConfig: vocab_multiple must be at most {MAX_VOCAB_MULTIPLE}, got {self.vocab_multiple}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd={self.n_embd} is not divisible by n_head={self.n_head}")

    @property
    def padded_vocab_size(self) -> int:
        m = self.vocab_multiple
        return (self.vocab_size + m - 1) // m * m

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"GPTConfig: unknown field(s) {sorted(unknown)}; expected {sorted(known)}")
        return cls(**d)


PRESETS: dict[str, GPTConfig] = {
    # GPT-2 as OpenAI released it (vocabulary 50257, padded to 50304).
    "gpt2": GPTConfig(12, 12, 768),
    "gpt2-medium": GPTConfig(24, 16, 1024),
    "gpt2-large": GPTConfig(36, 20, 1280),
    "gpt2-xl": GPTConfig(48, 25, 1600),
    # Small models for the CPU; their vocabulary follows the tokenizer (set at training time).
    "baby": GPTConfig(6, 6, 384, block_size=256, vocab_size=65, vocab_multiple=1),  # nanoGPT's char model
    "small": GPTConfig(4, 4, 128, block_size=128, vocab_size=256, vocab_multiple=64),  # `euler train` default
    "micro": GPTConfig(2, 2, 16, block_size=16, vocab_size=64, vocab_multiple=1),  # tests
}


def preset(name: str, **overrides) -> GPTConfig:
    """A preset by name, with fields overridden (e.g. vocab_size to match a tokenizer)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    return GPTConfig.from_dict({**PRESETS[name].to_dict(), **overrides})


MIXED = ("bfloat16", "float16")  # 16-bit model dtypes: float32 master weights beside a 16-bit working copy


def parameter_layout(config: GPTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter, in buffer order: the 2-D (decayed) ones first."""
    C, L = config.n_embd, config.n_layer
    weights = [("wte.weight", (config.padded_vocab_size, C)), ("wpe.weight", (config.block_size, C))]
    vectors = []
    for i in range(L):
        p = f"h.{i}."
        weights += [(p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_proj.weight", (C, C)),
                    (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_proj.weight", (C, 4 * C))]
        vectors += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                    (p + "attn.c_attn.bias", (3 * C,)), (p + "attn.c_proj.bias", (C,)),
                    (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                    (p + "mlp.c_fc.bias", (4 * C,)), (p + "mlp.c_proj.bias", (C,))]
    vectors += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return weights + vectors
