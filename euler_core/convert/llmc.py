"""llm.c's GPT-2 model file (`gpt2_124M.bin`, `gpt2_124M_bf16.bin`, what llm.c's training writes).

Layout, as llm.c's `train_gpt2.py` writes it and `gpt2_build_from_checkpoint` reads it:

    header   256 int32: [0] magic 20240326, [1] version (3: float32, 5: bfloat16), [2] maxT,
             [3] V, [4] L, [5] NH, [6] C, [7] Vp (the padded vocabulary); the rest zero
    params   16 tensors back to back, each over all layers where it is per layer (L stacked first):
             wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C),
             attprojw (L,C,C), attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C),
             fcprojw (L,C,4C), fcprojb (L,C), lnfw (C), lnfb (C)
             every one float32 (version 3) or bfloat16 (version 5), little-endian

The weights are in (out, in) layout, ours too, so no transposes. The padded vocabulary maps to our
`vocab_multiple` (a multiple that pads V to exactly Vp). Reading is byte parsing only: no code runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import GPTConfig
from ..files import write_atomic
from .safetensors import bf16_bits_to_float32, float32_to_bf16_bits

MAGIC = 20240326
VERSIONS = {3: "float32", 5: "bfloat16"}
HEADER_INTS = 256

#: llm.c's tensor order: (its name, our per-layer or global name, per layer?)
ORDER = [("wte", "wte.weight", False), ("wpe", "wpe.weight", False),
         ("ln1w", "ln_1.weight", True), ("ln1b", "ln_1.bias", True),
         ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", True),
         ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", True),
         ("ln2w", "ln_2.weight", True), ("ln2b", "ln_2.bias", True),
         ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", True),
         ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", True),
         ("lnfw", "ln_f.weight", False), ("lnfb", "ln_f.bias", False)]


class LLMCFormatError(ValueError):
    """A file that is not an llm.c GPT-2 model file, or does not match its own header."""


def vocab_multiple_for(V: int, Vp: int) -> int:
    """A `vocab_multiple` that pads V to exactly Vp (128 for GPT-2's 50257 -> 50304)."""
    if Vp < V:
        raise LLMCFormatError(f"padded vocabulary {Vp} is smaller than the vocabulary {V}")
    for m in (128, 64, 32, 16, 8, 4, 2, 1):
        if (V + m - 1) // m * m == Vp:
            return m
    return Vp


def _shapes(config: GPTConfig) -> dict[str, tuple]:
    C, L, Vp, T = config.n_embd, config.n_layer, config.padded_vocab_size, config.block_size
    return {"wte": (Vp, C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def read_llmc(path) -> tuple[GPTConfig, dict[str, np.ndarray], str]:
    """(config, our named float32 parameters, 'float32' or 'bfloat16') from an llm.c model file."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_INTS * 4), dtype="<i4")
        if header.size < HEADER_INTS or header[0] != MAGIC:
            raise LLMCFormatError(f"{path}: not an llm.c model file (magic {header[0] if header.size else None}, "
                                  f"expected {MAGIC}; token shards have 20240520, state files 20240327)")
        version = int(header[1])
        if version not in VERSIONS:
            raise LLMCFormatError(f"{path}: llm.c model file version {version}; this reads versions 3 (float32) "
                                  "and 5 (bfloat16), the padded-vocabulary formats llm.c writes today")
        maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
        try:
            config = GPTConfig(n_layer=L, n_head=NH, n_embd=C, block_size=maxT, vocab_size=V,
                               vocab_multiple=vocab_multiple_for(V, Vp))
        except ValueError as e:
            raise LLMCFormatError(f"{path}: header (maxT={maxT}, V={V}, L={L}, NH={NH}, C={C}, Vp={Vp}) is not "
                                  f"a valid GPT-2 shape: {e}") from None
        dtype = VERSIONS[version]
        item = 4 if dtype == "float32" else 2
        shapes = _shapes(config)
        expected = HEADER_INTS * 4 + item * sum(int(np.prod(s)) for s in shapes.values())
        if size != expected:
            raise LLMCFormatError(f"{path}: {size} bytes, but its header (maxT={maxT}, V={V}, L={L}, NH={NH}, "
                                  f"C={C}, Vp={Vp}, {dtype}) describes {expected} bytes: truncated or not matching")
        raw = {}
        for name, shape in shapes.items():
            n = int(np.prod(shape))
            data = np.frombuffer(f.read(n * item), dtype="<f4" if item == 4 else "<u2")
            raw[name] = (data.astype(np.float32) if item == 4 else bf16_bits_to_float32(data)).reshape(shape)
    params = {}
    for llmc_name, ours, per_layer in ORDER:
        if per_layer:
            for i in range(L):
                params[f"h.{i}.{ours}"] = raw[llmc_name][i]
        else:
            params[ours] = raw[llmc_name]
    return config, params, dtype


def write_llmc(path, config: GPTConfig, params: dict, dtype: str = "float32") -> Path:
    """Write our named parameters as an llm.c model file (version 3 float32 or 5 bfloat16), atomically."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"write_llmc: dtype must be float32 or bfloat16, got {dtype!r}")
    path = Path(path)
    version = {v: k for k, v in VERSIONS.items()}[dtype]
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = (MAGIC, version, config.block_size, config.vocab_size, config.n_layer, config.n_head,
                  config.n_embd, config.padded_vocab_size)
    shapes = _shapes(config)
    path.parent.mkdir(parents=True, exist_ok=True)

    def fill(f):
        f.write(header.tobytes())
        for llmc_name, ours, per_layer in ORDER:
            if per_layer:
                t = np.stack([np.asarray(params[f"h.{i}.{ours}"]) for i in range(config.n_layer)])
            else:
                t = np.asarray(params[ours])
            if t.shape != shapes[llmc_name]:
                raise ValueError(f"write_llmc: {ours} has shape {t.shape[1:] if per_layer else t.shape}, "
                                 f"config {config} expects {shapes[llmc_name]}")
            t32 = t.astype(np.float32)
            f.write(t32.astype("<f4").tobytes() if dtype == "float32" else float32_to_bf16_bits(t32).astype("<u2").tobytes())
    write_atomic(path, fill)
    return path
