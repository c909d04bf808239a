"""Batched generation and sampling on the device: prompts of different lengths give, batched, the
tokens each gives alone, with and without the KV cache; the sampler's filters keep what they say
and its draws follow softmax; the decoding step equals forward_cached; bad input is a clear error
(empty prompt, prompt longer than the context, a prompt file with an empty line, a batch too large
for memory)."""

import numpy as np
import pytest

from euler_core.config import preset
from euler_core.generate import DecodeStep, Sampler, generate
from euler_core.kvcache import KVCache, forward_cached
from euler_core.model import GPT

PROMPTS = [[5, 9, 11, 2], [7], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]]  # 20 of block 24


@pytest.fixture(scope="module", params=["naive", "numba"])
def model(request):
    return GPT(preset("micro", vocab_size=50, block_size=24, n_embd=24, n_head=3), request.param,
               dtype="float64", seed=3)


def test_batched_greedy_equals_each_prompt_alone_cached_or_not(model):
    # 12 new tokens: the 20-token prompt outgrows block_size 24 and slides while the others do not
    alone = [generate(model, p, 12, temperature=0) for p in PROMPTS]
    assert all(len(a) == 12 for a in alone)
    assert generate(model, PROMPTS, 12, temperature=0) == alone
    assert generate(model, PROMPTS, 12, temperature=0, use_cache=False) == alone


def test_batched_sampling_with_a_seed_equals_the_uncached_path(model):
    kw = dict(temperature=0.9, top_k=20, top_p=0.9, seed=11)
    cached = generate(model, PROMPTS, 10, **kw)
    assert cached == generate(model, PROMPTS, 10, use_cache=False, **kw)
    assert cached != generate(model, PROMPTS, 10, **{**kw, "seed": 12})


def test_rows_stop_on_their_own(model):
    alone = generate(model, PROMPTS[0], 10, temperature=0)
    stop = alone[4]
    outs = generate(model, PROMPTS, 10, temperature=0, stop_token=stop)
    assert outs[0] == alone[:alone.index(stop)]
    for p, out in zip(PROMPTS[1:], outs[1:]):
        full = generate(model, p, 10, temperature=0)
        assert out == (full[:full.index(stop)] if stop in full else full)


def test_right_padded_prefill_keeps_each_row_as_it_would_be_alone(model):
    lengths = [len(p) for p in PROMPTS]
    padded = np.zeros((3, max(lengths)), dtype=np.int32)
    for b, p in enumerate(PROMPTS):
        padded[b, :len(p)] = p
    cache = KVCache(model, batch=3)
    last = forward_cached(model, padded, cache, last_only=True, lengths=lengths)[:, 0]  # (B,Vp)
    assert list(cache.lengths) == lengths
    for b, p in enumerate(PROMPTS):
        full, _ = model.forward(np.array([p]))
        np.testing.assert_allclose(last[b], full[0, -1], rtol=1e-12, atol=1e-12)
    # one decoding step of every row at its own position, against the full forward of each
    nxt = np.array([[1], [2], [3]], dtype=np.int32)
    step = forward_cached(model, nxt, cache)[:, 0]
    for b, p in enumerate(PROMPTS):
        full, _ = model.forward(np.array([p + [int(nxt[b, 0])]]))
        np.testing.assert_allclose(step[b], full[0, -1], rtol=1e-12, atol=1e-12)


def test_decode_step_samples_what_forward_cached_gives(model):
    greedy = Sampler(model.config.vocab_size, temperature=0)
    step = DecodeStep(model, 2, greedy, graph=True)  # no graph on the CPU: the same eager call
    b = KVCache(model, 2)
    prompt = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    forward_cached(model, prompt, step.cache)
    forward_cached(model, prompt, b)
    step.tokens[:, 0] = [7, 8]
    step(step.cache.lengths.copy(), Sampler.counter(0, 1))
    expected = forward_cached(model, np.array([[7], [8]]), b)[:, 0, :model.config.vocab_size].argmax(axis=1)
    np.testing.assert_array_equal(step.tokens[:, 0], expected)


# ---- the sampler ------------------------------------------------------------------------------------
def _draws(sampler, logits, n, step=0, seed=1):
    rows = np.arange(n, dtype=np.uint64)
    return sampler(np.repeat(logits[None], n, axis=0), Sampler.counter(seed, step), rows)


def test_greedy_is_the_argmax_of_the_real_vocabulary():
    logits = np.array([[0.1, 3.0, -1.0, 9.0], [2.0, 1.0, 0.5, 9.0]], dtype=np.float32)  # column 3: padding
    s = Sampler(3, temperature=0)
    np.testing.assert_array_equal(s(logits, Sampler.counter(0, 0), np.arange(2, dtype=np.uint64)), [1, 0])


def test_draws_follow_softmax():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(8).astype(np.float32)
    n = 40_000
    counts = np.bincount(_draws(Sampler(8, temperature=0.7), logits, n, seed=5), minlength=8)
    p = np.exp(logits / 0.7 - (logits / 0.7).max())
    p /= p.sum()
    chi2 = float((((counts - n * p) ** 2) / (n * p)).sum())
    assert chi2 < 30, f"chi-square {chi2:.1f} over 7 degrees of freedom: the draws do not follow softmax"


def test_top_k_keeps_the_k_largest_and_top_p_the_smallest_set_reaching_p():
    logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15], dtype=np.float32))
    assert set(_draws(Sampler(5, top_k=2), logits, 4000)) == {1, 3}
    # sorted: 0.4, 0.3 (0.7), 0.15 (0.85), ...: top_p 0.8 keeps three, 0.7 keeps two
    assert set(_draws(Sampler(5, top_p=0.8), logits, 4000)) == {1, 3, 4}
    assert set(_draws(Sampler(5, top_p=0.7), logits, 4000)) == {1, 3}
    assert set(_draws(Sampler(5, top_k=3, top_p=0.5), logits, 4000)) == {1, 3}


def test_a_draw_depends_on_seed_step_and_row_only():
    logits = np.zeros(50, dtype=np.float32)
    s = Sampler(50)
    a = _draws(s, logits, 64, step=7, seed=3)
    np.testing.assert_array_equal(a, _draws(Sampler(50), logits, 64, step=7, seed=3))
    assert (a != _draws(s, logits, 64, step=8, seed=3)).any() and (a != _draws(s, logits, 64, step=7, seed=4)).any()
    assert len(set(a)) > 20


@pytest.mark.parametrize("kw, match", [(dict(temperature=float("nan")), "temperature"),
                                       (dict(temperature=-1.0), "temperature"),
                                       (dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"),
                                       (dict(top_p=1.5), "top_p")])
def test_bad_sampling_settings_are_clear_errors(model, kw, match):
    with pytest.raises(ValueError, match=match):
        generate(model, [1, 2], 3, **kw)


# ---- bad input -------------------------------------------------------------------------------------
def test_bad_prompts_are_clear_errors(model):
    with pytest.raises(ValueError, match="the prompt is empty"):
        generate(model, [], 3)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(model, [[1, 2], []], 3)
    with pytest.raises(ValueError, match=r"25 tokens, more than the model's context \(block_size 24\)"):
        generate(model, list(range(25)), 3)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        generate(model, [[1, 2], [50]], 3)


def test_a_batch_too_large_for_memory_is_a_clear_error(model, monkeypatch):
    with pytest.raises(ValueError, match=r"KV cache of 1000000000 rows .* GiB.*smaller batch"):
        KVCache(model, batch=10**9)    # what generate allocates first, before any work
    import euler_core.kvcache as kvcache
    monkeypatch.setattr(kvcache.os, "sysconf", lambda name: 1)  # a machine with 1 byte free
    with pytest.raises(ValueError, match=r"KV cache of 3 rows .* smaller batch"):
        generate(model, PROMPTS, 3)


def test_prompt_file_with_an_empty_line_is_a_clear_error(tmp_path, capsys):
    from euler_core.cli import main
    path = tmp_path / "prompts.txt"
    path.write_text("def main(\n\nclass A:\n", encoding="utf-8")
    assert main(["generate", "--checkpoint", str(tmp_path / "nowhere"), "--prompt-file", str(path)]) == 2
    assert "line 2 is empty" in capsys.readouterr().err


def test_cli_generates_a_prompt_file_in_batches(tmp_path, capsys):
    from euler_core.checkpoint import save_checkpoint
    from euler_core.cli import main
    from euler_core.tokenizer import ByteTokenizer
    model = GPT(preset("micro", vocab_size=256, block_size=32), "naive", dtype="float32", seed=1)
    run = tmp_path / "run"
    save_checkpoint(run, 1, model, tokenizer=ByteTokenizer())
    path = tmp_path / "prompts.txt"
    path.write_text("def main(\nclass A:\nimport os\n", encoding="utf-8")
    args = ["generate", "--checkpoint", str(run), "--prompt-file", str(path), "--max-new-tokens", "6",
            "--temperature", "0"]
    assert main(args + ["--batch-size", "2"]) == 0
    batched = capsys.readouterr().out
    assert batched.count("=== ") == 3 and "class A:" in batched
    assert main(args + ["--batch-size", "1", "--no-kv-cache"]) == 0
    assert capsys.readouterr().out == batched
