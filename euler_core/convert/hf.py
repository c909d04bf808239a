"""Hugging Face GPT-2 weights: `model.safetensors` (+ `config.json`) with GPT-2's names and layout.

Hugging Face's GPT-2 names its tensors as we do, optionally under a `transformer.` prefix
(`h.0.attn.c_attn.weight`, `wte.weight`, ...), but its four linear layers per block are `Conv1D`
modules whose weight is stored (in, out), the transpose of ours (out, in):

    attn.c_attn.weight (C,3C)   attn.c_proj.weight (C,C)   mlp.c_fc.weight (C,4C)   mlp.c_proj.weight (4C,C)

Its wte has the real vocabulary's V rows (ours are padded to Vp: the extra rows are zero). Files may
also hold buffers that are not parameters (`h.{i}.attn.bias`, the causal mask, and
`h.{i}.attn.masked_bias`), ignored here, and `lm_head.weight`, which GPT-2 ties to wte (accepted
when it equals wte; an untied head is refused, since our model ties them).

n_head cannot be read off the tensors' shapes: it comes from config.json beside the weights, else
from `n_head=`, else GPT-2's head size of 64 (n_head = C / 64), said in the returned notes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import MAX_VOCAB_MULTIPLE, GPTConfig
from ..files import parse_json
from ..values import check_value, integer, refusal
from .safetensors import read_safetensors, write_safetensors

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BUFFERS = (".attn.bias", ".attn.masked_bias")
PREFIX = "transformer."


class HFFormatError(ValueError):
    """Weights that do not form a GPT-2 model (missing or misshapen tensors, untied head, ...)."""


def to_hf(config: GPTConfig, params: dict) -> dict[str, np.ndarray]:
    """Our named parameters -> Hugging Face GPT-2 tensors (no prefix, Conv1D transposed, V rows)."""
    out = {}
    for name, value in params.items():
        value = np.asarray(value)
        if name == "wte.weight":
            value = value[:config.vocab_size]
        elif name.endswith(CONV1D):
            value = value.T
        out[name] = np.ascontiguousarray(value)
    return out


def hf_config(config: GPTConfig) -> dict:
    """A config.json Hugging Face's GPT2LMHeadModel loads, for this shape."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "n_layer": config.n_layer, "n_head": config.n_head, "n_embd": config.n_embd,
            "n_positions": config.block_size, "n_ctx": config.block_size, "vocab_size": config.vocab_size,
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "n_inner": None,
            "bos_token_id": config.vocab_size - 1, "eos_token_id": config.vocab_size - 1}


def from_hf(tensors: dict, hf_cfg: dict | None = None, n_head: int | None = None,
            vocab_multiple: int = 128, source: str = "weights") -> tuple[GPTConfig, dict, list[str]]:
    """Hugging Face GPT-2 tensors -> (our config, our named parameters, notes)."""
    notes = []
    named = {}
    for name, value in tensors.items():
        short = name[len(PREFIX):] if name.startswith(PREFIX) else name
        if short.endswith(BUFFERS):
            continue
        named[short] = value
    head = named.pop("lm_head.weight", None)
    if "wte.weight" not in named or "wpe.weight" not in named:
        raise HFFormatError(f"{source}: no wte.weight/wpe.weight: not GPT-2 weights (tensors: "
                            f"{sorted(tensors)[:6]}...)")
    wte, wpe = named["wte.weight"], named["wpe.weight"]
    for name, value in (("wte.weight", wte), ("wpe.weight", wpe)):
        if value.ndim != 2 or 0 in value.shape:
            raise HFFormatError(f"{source}: {name} has shape {tuple(value.shape)}, expected a 2-D (rows, C) matrix")
    V, C = wte.shape
    maxT = wpe.shape[0]
    if head is not None and (head.shape != wte.shape or not np.array_equal(head, wte)):
        raise HFFormatError(f"{source}: lm_head.weight differs from wte.weight; GPT-2 ties them and so does "
                            "this model (an untied head cannot be loaded)")
    layers = sorted({int(n.split(".")[1]) for n in named if n.startswith("h.")})
    L = len(layers)
    if layers != list(range(L)):
        raise HFFormatError(f"{source}: layers {layers} are not numbered 0..{L - 1}")
    hf_cfg = hf_cfg or {}
    if n_head is None and "n_head" in hf_cfg:
        n_head = check_value(f"{source}: config.json n_head", hf_cfg["n_head"], integer(1))
    if n_head is None:
        if C % 64:
            raise HFFormatError(f"{source}: no config.json and C={C} is not a multiple of 64: pass n_head")
        n_head = C // 64
        notes.append(f"no config.json: n_head = C/64 = {n_head} (GPT-2's head size)")
    for key, value in (("n_embd", C), ("vocab_size", V), ("n_layer", L)):
        if key in hf_cfg and hf_cfg[key] != value:
            raise HFFormatError(f"{source}: config.json says {key}={hf_cfg[key]}, the weights have {value}")
    try:
        config = GPTConfig(n_layer=L, n_head=int(n_head), n_embd=C, block_size=maxT, vocab_size=V,
                           vocab_multiple=vocab_multiple)
    except ValueError as e:
        raise HFFormatError(f"{source}: {e}") from None
    from ..model import parameter_layout
    params = {}
    for name, shape in parameter_layout(config):
        if name not in named:
            raise HFFormatError(f"{source}: missing tensor {name} (a GPT-2 of {L} layers, C={C} needs it)")
        value = np.asarray(named.pop(name), dtype=np.float32)
        if name == "wte.weight":
            padded = np.zeros(shape, dtype=np.float32)
            padded[:V] = value
            value = padded
        elif name.endswith(CONV1D):
            value = value.T
        if value.shape != shape:
            raise HFFormatError(f"{source}: {name} has shape {value.shape}"
                                f"{' (after the Conv1D transpose)' if name.endswith(CONV1D) else ''}, "
                                f"a GPT-2 with n_embd={C} needs {shape}")
        params[name] = np.ascontiguousarray(value)
    if named:
        raise HFFormatError(f"{source}: tensors that are not GPT-2 parameters: {sorted(named)[:6]}")
    return config, params, notes


def find_weights(path) -> tuple[Path, Path | None]:
    """(the .safetensors file, its config.json or None) from a file or a model directory."""
    path = Path(path)
    if path.is_dir():
        weights = path / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"{path}: no model.safetensors in this directory")
    else:
        weights = path
        if not weights.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    config = weights.parent / "config.json"
    return weights, (config if config.is_file() else None)


def load_hf(path, n_head: int | None = None) -> tuple[GPTConfig, dict, list[str]]:
    """Read Hugging Face GPT-2 weights (a model.safetensors, or the directory holding it)."""
    weights, config_path = find_weights(path)
    tensors, metadata = read_safetensors(weights)
    hf_cfg = None
    if config_path is not None:
        hf_cfg = parse_json(config_path.read_bytes(), config_path, HFFormatError)
        if not isinstance(hf_cfg, dict):
            raise HFFormatError(f"{config_path}: holds {type(hf_cfg).__name__}, expected a JSON object")
    multiple = metadata.get("nanoeuler.vocab_multiple", "128")
    rule = integer(1, MAX_VOCAB_MULTIPLE)
    try:
        multiple = rule.parse(multiple)
    except ValueError:
        pass  # refused just below, with the text as it is
    if not rule.allows(multiple):
        raise HFFormatError(refusal(f"{weights}: metadata nanoeuler.vocab_multiple", multiple, rule))
    return from_hf(tensors, hf_cfg, n_head, vocab_multiple=multiple, source=str(weights))


def save_hf(directory, config: GPTConfig, params: dict, dtype: str = "float32") -> Path:
    """Write `model.safetensors` and `config.json` into `directory` (Hugging Face's GPT-2 layout)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    code = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}.get(dtype)
    if code is None:
        raise ValueError(f"save_hf: dtype must be float32, bfloat16 or float16, got {dtype!r}")
    metadata = {"format": "pt", "nanoeuler.vocab_multiple": str(config.vocab_multiple)}
    path = write_safetensors(directory / "model.safetensors", to_hf(config, params), metadata, float_dtype=code)
    (directory / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
    return path
