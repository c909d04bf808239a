"""The PyTorch reference GPT-2 (bench/euler-torch-reference/euler_torch_reference/gpt2.py) and the mapping
of our parameter names onto it (weights.py). The mapping needs no torch and is checked everywhere;
the model itself is checked against ours where torch is installed in this interpreter, and skipped
with the reason where it is not (CI)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from euler_core.config import preset
from euler_core.model import GPT, parameter_layout

REFERENCE = Path(__file__).resolve().parents[1] / "bench" / "euler-torch-reference"
# weights.py alone (NumPy only), without putting the distribution on sys.path for every other test
_spec = importlib.util.spec_from_file_location("euler_torch_reference_weights", REFERENCE / "euler_torch_reference" / "weights.py")
weights = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(weights)


def layout_of(config):
    return weights.reference_layout(config.n_layer, config.n_embd, config.block_size, config.padded_vocab_size)


@pytest.mark.parametrize("name", ["micro", "gpt2"])
def test_the_reference_holds_every_parameter_of_ours_under_its_nanogpt_name(name):
    config = preset(name)
    ours = dict(parameter_layout(config))
    theirs = dict(layout_of(config))
    assert {n: s for n, s in theirs.items() if n != "lm_head.weight"} == {"transformer." + n: s for n, s in ours.items()}
    assert theirs["lm_head.weight"] == ours["wte.weight"] == (config.padded_vocab_size, config.n_embd)


def test_our_weights_map_onto_the_reference_and_back_unchanged():
    model = GPT(preset("micro", vocab_size=60, vocab_multiple=16), "naive", dtype="float32", seed=3)
    named = model.named_parameters()
    state = weights.to_reference(named, layout_of(model.config))
    assert list(state) == [n for n, _ in layout_of(model.config)]
    assert state["lm_head.weight"] is named["wte.weight"] and state["transformer.h.1.mlp.c_proj.weight"] is \
        named["h.1.mlp.c_proj.weight"]
    back = weights.from_reference(state)
    assert back.keys() == named.keys() and all(back[k] is named[k] for k in named)


def test_a_mismatch_names_the_parameters():
    config = preset("micro")
    named = GPT(config, "naive", dtype="float32", seed=0).named_parameters()
    layout = layout_of(config)
    missing = {k: v for k, v in named.items() if k != "h.0.ln_2.bias"}
    with pytest.raises(ValueError, match=r"missing \['h.0.ln_2.bias'\]"):
        weights.to_reference(missing, layout)
    with pytest.raises(ValueError, match=r"not in the reference model \['lm_head.bias'\]"):
        weights.to_reference({**named, "lm_head.bias": np.zeros(3)}, layout)
    with pytest.raises(ValueError, match=r"h.1.attn.c_attn.weight \(16, 48\) \(expected \(48, 16\)\)"):
        weights.to_reference({**named, "h.1.attn.c_attn.weight": named["h.1.attn.c_attn.weight"].T}, layout)
    state = weights.to_reference(named, layout)
    with pytest.raises(ValueError, match="lm_head.weight is not tied"):
        weights.from_reference({**state, "lm_head.weight": state["lm_head.weight"] + 1})


def test_the_reference_trains_exactly_as_ours_from_the_same_weights(monkeypatch):
    """float64 on the CPU: the same losses and gradient norms, step after step, to 1e-8."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the reference model (a benchmark "
                                                "tool, never a dependency) is checked only where it is")
    monkeypatch.syspath_prepend(str(REFERENCE))
    from euler_core.optim import AdamW
    from euler_core.step import TrainStep
    from euler_torch_reference.gpt2 import GPT as Reference, optimizer
    config = preset("micro", vocab_size=60, vocab_multiple=16)
    ours = GPT(config, "naive", dtype="float64", seed=3)
    ref = Reference(config.n_layer, config.n_head, config.n_embd, config.block_size, config.vocab_size,
                    config.padded_vocab_size)
    assert [(k, tuple(v.shape)) for k, v in ref.state_dict().items()] == layout_of(config)
    ref.load_named(ours.named_parameters())
    ref.double()
    ours.load_parameters({k: v.astype(np.float32) for k, v in ours.named_parameters().items()})  # the same rounding
    step = TrainStep(ours, AdamW(ours), batch_size=3, seq_len=16, grad_clip=1.0, graph=False)
    opt_ref = optimizer(ref, 1e-2, 0.1, fused=False)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, y = rng.integers(0, 60, (3, 16)), rng.integers(0, 60, (3, 16))
        y[0, :5] = -1                                   # ignored targets, as SFT makes them
        result = step.run([(x, y)], 1e-2)
        opt_ref.zero_grad()
        ref_loss = ref(torch.from_numpy(x), torch.from_numpy(y))
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt_ref.step()
        assert ref_loss.item() == pytest.approx(result.loss, rel=1e-8)
        assert ref_norm.item() == pytest.approx(result.grad_norm, rel=1e-6)
