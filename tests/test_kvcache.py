"""Generation with a KV cache: the same logits and the same (greedy) tokens as without it, on the
naive and numba backends, across block_size overflow; stop tokens; bad use of the cache."""

import numpy as np
import pytest

from euler_core.config import preset
from euler_core.generate import generate
from euler_core.kvcache import KVCache
from euler_core.model import GPT


@pytest.fixture(scope="module", params=["naive", "numba"])
def model(request):
    return GPT(preset("micro", vocab_size=50, block_size=24, n_embd=24, n_head=3), request.param,
               dtype="float64", seed=3)


def test_cached_logits_equal_the_full_forward_in_chunks(model):
    tokens = np.random.default_rng(0).integers(0, 50, size=(2, 20))  # (B,T)
    full, _ = model.forward(tokens)
    cache = KVCache(model, batch=2)
    chunks = [model.forward_cached(tokens[:, a:b], cache) for a, b in ((0, 7), (7, 8), (8, 9), (9, 20))]
    np.testing.assert_allclose(np.concatenate(chunks, axis=1), full, rtol=1e-12, atol=1e-12)
    assert (cache.lengths == 20).all()
    last = KVCache(model, batch=2)
    np.testing.assert_allclose(model.forward_cached(tokens, last, last_only=True)[:, 0], full[:, -1],
                               rtol=1e-12, atol=1e-12)


def test_greedy_tokens_with_and_without_cache_are_identical(model):
    prompt = [5, 9, 11, 2]
    # 40 new tokens overflow block_size=24: both paths then slide the same window
    plain = generate(model, prompt, 40, temperature=0, use_cache=False)
    cached = generate(model, prompt, 40, temperature=0, use_cache=True)
    assert cached == plain and len(plain) == 40


def test_sampling_with_a_seed_is_identical_too(model):
    kw = dict(temperature=0.9, top_k=20, top_p=0.9, seed=7)
    assert generate(model, [1, 2, 3], 15, use_cache=True, **kw) == generate(model, [1, 2, 3], 15, use_cache=False, **kw)


def test_stop_tokens_end_the_generation(model):
    plain = generate(model, [5, 9], 10, temperature=0)
    stop = plain[3]
    cut = generate(model, [5, 9], 10, temperature=0, stop_token={stop, 10_000})
    assert cut == plain[:plain.index(stop)]


def test_cache_misuse_is_a_clear_error(model):
    cache = KVCache(model, batch=1)
    with pytest.raises(ValueError, match="block_size"):
        model.forward_cached(np.zeros((1, 25), dtype=np.int32), cache)
    with pytest.raises(ValueError, match="batch"):
        model.forward_cached(np.zeros((2, 3), dtype=np.int32), cache)
