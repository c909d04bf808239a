"""Generation on the GPU (skipped without one): the triton backend's cached generation gives the
same greedy tokens as the uncached one and as the same model on the CPU, batched and unbatched;
the CUDA-graph decoding step gives exactly the tokens of the step launched from Python (greedy and
sampled); the cache and the sampling stay on the device; a 16-bit model agrees with float32 on
the first 32 greedy tokens of a trained checkpoint (EULER_TRAINED_CHECKPOINT, made by
bench/device/generate.sh)."""

import os

import pytest

from euler_core.device import cuda_unavailable_reason

pytestmark = pytest.mark.skipif(cuda_unavailable_reason() is not None,
                                reason=f"needs a CUDA GPU: {cuda_unavailable_reason()}")

from euler_core.config import preset  # noqa: E402
from euler_core.generate import generate  # noqa: E402
from euler_core.model import GPT  # noqa: E402

PROMPTS = [[5, 9, 11, 2], [7], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]]


@pytest.fixture(scope="module")
def models():
    config = preset("micro", vocab_size=50, block_size=24, n_embd=64, n_head=4)
    gpu = GPT(config, "triton", dtype="float32", seed=3)
    cpu = GPT(config, "naive", dtype="float64", seed=3)
    return gpu, cpu


def test_the_cache_and_the_model_live_on_the_gpu(models):
    import cupy
    from euler_core.generate import decode_step, Sampler
    gpu, _ = models
    step = decode_step(gpu, 2, Sampler(50, temperature=0), graph=True)
    assert isinstance(step.cache.k[0], cupy.ndarray) and step.cache.k[0].shape == (2, 24, 64)
    assert gpu.kernels["attention_cached"].variant.qualname == "triton:split"


def test_greedy_cached_uncached_batched_and_cpu_agree(models):
    gpu, cpu = models
    alone = [generate(gpu, p, 12, temperature=0) for p in PROMPTS]
    assert generate(gpu, PROMPTS, 12, temperature=0) == alone
    assert generate(gpu, PROMPTS, 12, temperature=0, use_cache=False) == alone
    assert generate(gpu, PROMPTS, 12, temperature=0, graph=False) == alone
    assert [generate(cpu, p, 12, temperature=0) for p in PROMPTS] == alone


def test_the_graph_replays_exactly_what_python_launches(models):
    gpu, _ = models
    kw = dict(temperature=0.8, top_k=20, top_p=0.9, seed=5)
    with_graph = generate(gpu, PROMPTS, 16, **kw)
    assert with_graph == generate(gpu, PROMPTS, 16, graph=False, **kw)
    assert with_graph == generate(gpu, PROMPTS, 16, **kw)  # the kept graph, replayed again


def test_a_16_bit_model_agrees_with_float32_on_a_trained_checkpoint():
    path = os.environ.get("EULER_TRAINED_CHECKPOINT")
    if not path:
        pytest.skip("EULER_TRAINED_CHECKPOINT not set (bench/device/generate.sh trains one)")
    from euler_core.checkpoint import load_checkpoint
    ckpt = load_checkpoint(path, with_optimizer=False)
    models = {}
    for dtype in ("float32", "bfloat16"):
        try:
            models[dtype] = GPT(ckpt.config, "triton", dtype=dtype, seed=None)
        except ValueError as e:
            pytest.skip(f"no {dtype} models here: {e}")
        models[dtype].load_parameters(ckpt.params)
    from euler_core.tokenizer import tokenizer_from_checkpoint
    tokenizer = tokenizer_from_checkpoint(ckpt.path, ckpt.meta["tokenizer"])
    prompts = [tokenizer.encode(text) for text in ("def main(", "import os\nimport sys\n",
                                                   "class Parser:\n    def __init__(self, text):\n")]
    full = generate(models["float32"], prompts, 32, temperature=0)
    half = generate(models["bfloat16"], prompts, 32, temperature=0)
    assert half == full, [sum(a == b for a, b in zip(x, y)) for x, y in zip(half, full)]
