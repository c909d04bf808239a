"""NanoEuler's parameter names -> the PyTorch reference model's state_dict names, and back.

Needs neither torch nor nanoeuler (NumPy only), so CI checks the mapping where torch is absent.

Both models use GPT-2's names and llm.c's layout: a linear layer's weight is (out, in), exactly as
nn.Linear stores it, so no tensor is transposed. NanoEuler names a parameter as Hugging Face does
without the `transformer.` prefix (euler_core/model.py); the reference (gpt2.py) is laid out as
nanoGPT is, under `transformer.` with a separate `lm_head` whose weight *is* the token embedding
(tied). So the mapping adds the prefix, and `lm_head.weight` is the same array as `wte.weight`:

    ours                          reference
    wte.weight (Vp,C)             transformer.wte.weight, and lm_head.weight (tied: the same tensor)
    wpe.weight (maxT,C)           transformer.wpe.weight
    h.{i}.ln_1.weight/bias (C)    transformer.h.{i}.ln_1.weight/bias
    h.{i}.attn.c_attn.* (3C,C)    transformer.h.{i}.attn.c_attn.*       (and so on for every block)
    ln_f.weight/bias (C)          transformer.ln_f.weight/bias
"""

from __future__ import annotations

import numpy as np

PREFIX = "transformer."
TIED = {"lm_head.weight": "wte.weight"}  # reference name -> our name of the tensor it shares


def reference_layout(n_layer: int, n_embd: int, block_size: int, padded_vocab: int) -> list[tuple[str, tuple]]:
    """(name, shape) of every entry of the reference model's state_dict, in its order."""
    C = n_embd
    layout = [(PREFIX + "wte.weight", (padded_vocab, C)), (PREFIX + "wpe.weight", (block_size, C))]
    for i in range(n_layer):
        p = f"{PREFIX}h.{i}."
        layout += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                   (p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_attn.bias", (3 * C,)),
                   (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                   (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                   (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_fc.bias", (4 * C,)),
                   (p + "mlp.c_proj.weight", (C, 4 * C)), (p + "mlp.c_proj.bias", (C,))]
    layout += [(PREFIX + "ln_f.weight", (C,)), (PREFIX + "ln_f.bias", (C,)), ("lm_head.weight", (padded_vocab, C))]
    return layout


def to_reference(named: dict, layout: list[tuple[str, tuple]]) -> dict:
    """Our named arrays as the reference's state_dict (same arrays, renamed; the tied head added).

    Every name the layout expects must come from `named` with its exact shape, and nothing may be
    left over: a mismatch is a ValueError that names the parameters concerned."""
    ours = {_our_name(name): shape for name, shape in layout}
    missing = [n for n in ours if n not in named]
    unknown = sorted(set(named) - set(ours))
    if missing or unknown:
        raise ValueError(f"to_reference: parameters missing {missing[:5]}, not in the reference model {unknown[:5]}")
    wrong = [f"{n} {tuple(np.shape(named[n]))} (expected {s})" for n, s in ours.items() if tuple(np.shape(named[n])) != s]
    if wrong:
        raise ValueError(f"to_reference: shapes differ: {', '.join(wrong[:5])}")
    return {name: named[_our_name(name)] for name, _ in layout}


def from_reference(state: dict) -> dict:
    """The reference's state_dict (arrays) under our names; the tied head must equal wte."""
    named = {}
    for name, value in state.items():
        if name in TIED:
            if not np.array_equal(np.asarray(value), np.asarray(state[PREFIX + TIED[name]])):
                raise ValueError(f"from_reference: {name} is not tied to {PREFIX + TIED[name]} (they differ)")
            continue
        if not name.startswith(PREFIX):
            raise ValueError(f"from_reference: unexpected entry {name!r} (the reference names start with {PREFIX!r})")
        named[name[len(PREFIX):]] = value
    return named


def _our_name(reference_name: str) -> str:
    if reference_name in TIED:
        return TIED[reference_name]
    return reference_name[len(PREFIX):] if reference_name.startswith(PREFIX) else reference_name
