"""The model built from naive kernels: its gradients against finite differences, its parameter
layout, and its refusal of bad input."""

import numpy as np
import pytest

from euler_core.config import GPTConfig, preset
from euler_core.model import GPT, parameter_layout


def tiny_model(dtype="float64", seed=0):
    config = GPTConfig(n_layer=2, n_head=2, n_embd=8, block_size=6, vocab_size=11, vocab_multiple=4)
    model = GPT(config, "naive", dtype=dtype, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for p in model.params.values():  # move off the init so biases and gains matter
        p[...] += rng.normal(0, 0.1, p.shape)
    model.params["wte.weight"][config.vocab_size:] = 0.0
    return model


def test_full_model_gradients_match_central_finite_differences():
    """Every parameter tensor of a small float64 model: relative error <= 1e-6."""
    model = tiny_model()
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 11, size=(2, 5))
    targets = rng.integers(0, 11, size=(2, 5))
    targets[0, 1] = -1  # an ignored position takes part too
    model.forward(tokens, targets)
    model.zero_grad()
    model.backward()
    eps = 1e-6
    worst = {}
    for name, p in model.params.items():
        numeric = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            old = p[i]
            p[i] = old + eps
            up = model.forward(tokens, targets)[1]
            p[i] = old - eps
            down = model.forward(tokens, targets)[1]
            p[i] = old
            numeric[i] = (up - down) / (2 * eps)
        analytic = model.grads[name]
        scale = max(np.linalg.norm(numeric), 1e-12)
        worst[name] = np.linalg.norm(analytic - numeric) / scale
    bad = {k: v for k, v in worst.items() if v > 1e-6}
    assert not bad, f"gradients off finite differences: {bad}"
    assert len(worst) == len(parameter_layout(model.config))


def test_padded_vocabulary_rows_get_no_gradient_and_logits_cover_padding():
    model = tiny_model()
    assert model.config.padded_vocab_size == 12
    tokens = np.array([[1, 2, 3]])
    model.forward(tokens, np.array([[2, 3, 4]]))
    model.zero_grad()
    model.backward()
    assert np.all(model.grads["wte.weight"][11:] == 0)
    logits, _ = model.forward(tokens)  # with targets, a fused classifier (naive's) keeps no logits
    assert logits.shape == (1, 3, 12)


def test_gradients_accumulate_and_loss_scale_halves():
    model = tiny_model()
    tokens, targets = np.array([[1, 2, 3, 4]]), np.array([[2, 3, 4, 5]])
    model.zero_grad()
    model.forward(tokens, targets)
    model.backward()
    once = model.flat_grads.copy()
    model.forward(tokens, targets, loss_scale=0.5)
    model.backward()
    np.testing.assert_allclose(model.flat_grads, 1.5 * once, rtol=1e-12, atol=1e-15)


def test_layout_is_contiguous_weights_first_and_tied_embedding():
    config = preset("gpt2")
    layout = parameter_layout(config)
    sizes = [int(np.prod(s)) for _, s in layout]
    assert sum(sizes) == 124_475_904  # llm.c's count for GPT-2 124M with the padded vocabulary
    dims = [len(s) for _, s in layout]
    assert dims == sorted(dims, reverse=True), "2-D weights must come before every 1-D parameter"
    assert config.padded_vocab_size == 50304
    model = GPT(preset("micro"), "naive", seed=0)
    assert np.shares_memory(model.params["wte.weight"], model.flat_params)
    assert not any(name.startswith("lm_head") for name in model.params)


def test_init_is_gpt2s():
    model = GPT(preset("small"), "naive", dtype="float64", seed=3)
    p = model.params
    assert np.all(p["h.0.ln_1.weight"] == 1) and np.all(p["h.0.attn.c_attn.bias"] == 0)
    assert abs(p["h.0.mlp.c_fc.weight"].std() - 0.02) < 0.002
    assert abs(p["h.0.mlp.c_proj.weight"].std() - 0.02 / np.sqrt(8)) < 0.001


def test_bad_input_is_a_clear_error():
    model = GPT(preset("micro"), "naive", seed=0)
    with pytest.raises(ValueError, match="block_size"):
        model.forward(np.zeros((1, 17), dtype=np.int64))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 64\)"):
        model.forward(np.array([[1, 64]]))
    with pytest.raises(ValueError, match="targets must lie"):
        model.forward(np.array([[1, 2]]), np.array([[1, 99]]))
    with pytest.raises(ValueError, match="every target is -1"):
        model.forward(np.array([[1, 2]]), np.array([[-1, -1]]))
    with pytest.raises(RuntimeError, match="call forward"):
        model.backward()
    with pytest.raises(ValueError, match="not divisible"):
        GPTConfig(n_head=5, n_embd=16)
