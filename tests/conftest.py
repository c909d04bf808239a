import numpy as np
import pytest

from euler_core.data.shards import write_shard


def make_shards(directory):
    """A small train/val pair of llm.c shards over a 64-token vocabulary, with learnable structure
    (a noisy counting sequence) so the loss can fall."""
    rng = np.random.default_rng(0)
    def make(n):
        base = np.cumsum(rng.integers(1, 3, size=n)) % 64
        noise = rng.random(n) < 0.1
        base[noise] = rng.integers(0, 64, size=noise.sum())
        return base.astype(np.uint16)
    train = write_shard(directory / "tiny_train_000001.bin", make(20_000))
    val = write_shard(directory / "tiny_val_000000.bin", make(4_000))
    return str(train), str(val)


@pytest.fixture
def shards(tmp_path):
    return make_shards(tmp_path)


@pytest.fixture(autouse=True, scope="session")
def private_tokenizer_cache(tmp_path_factory):
    """Tokenizers trained by tests are cached in a temporary directory, never in the user's."""
    import os
    old = os.environ.get("EULER_CACHE_DIR")
    os.environ["EULER_CACHE_DIR"] = str(tmp_path_factory.mktemp("euler-cache"))
    yield
    if old is None:
        del os.environ["EULER_CACHE_DIR"]
    else:
        os.environ["EULER_CACHE_DIR"] = old
