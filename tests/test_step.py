"""The training step (euler_core/step.py) and mixed precision (euler_core/model.py) on the CPU.

What runs here without a GPU: the eager TrainStep against the model's own forward/backward and
AdamW by hand; clipping and a bad step on the device side (the update skipped, the op named);
mixed precision through the triton kernels under Triton's interpreter in float16 (bfloat16 is
broken there), against float64 naive; the arena's arithmetic. The CUDA-graph path is checked on the
GPU (tests/test_step_gpu.py there skips here).
"""

import numpy as np
import pytest

import conformance
from euler_core.activations import Activations, MemoryPlan, arena_bytes, largest_batch, layout, step_bytes
from euler_core.config import GPTConfig, preset
from euler_core.kernels import Kernel, Kernels
from euler_core.model import GPT
from euler_core.optim import AdamW
from euler_core.registry import Backend, Registry, Variant, hookimpl
from euler_core.step import TrainStep

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")


def micro(dtype="float64", backend="naive", seed=0, registry=None, recompute=False, n_layer=2):
    config = GPTConfig(n_layer=n_layer, n_head=2, n_embd=16, block_size=16, vocab_size=29, vocab_multiple=8)
    return GPT(config, Kernels(backend, dtype=dtype, registry=registry), dtype=dtype, seed=seed, recompute=recompute)


def batches(k, B=2, T=8, V=29, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        x, y = rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))
        y[0, :3] = -1
        out.append((x, y))
    return out


def test_train_step_equals_forward_backward_and_adamw_by_hand():
    """Two micro-batches, clipping on: the same loss, norm and weights as the model's own calls."""
    a, b = micro(), micro()
    step = TrainStep(a, AdamW(a), batch_size=2, seq_len=8, accum=2, grad_clip=0.5)
    opt_b = AdamW(b)
    data = batches(2)
    lr = 2.0 ** -7  # exact in float32: the step passes lr as a float32 device scalar
    result = step.run(data, lr=lr)

    b.zero_grad()
    loss = 0.0
    for x, y in data:
        loss += b.forward(x, y, loss_scale=0.5)[1] / 2
        b.backward()
    norm = b.grad_norm()
    opt_b.step_count += 1
    opt_b.update(lr, 1, grad_scale=min(1.0, 0.5 / norm))
    assert result.loss == pytest.approx(loss, rel=1e-12)
    assert result.grad_norm == pytest.approx(norm, rel=1e-12)
    assert norm > 0.5  # clipping was active
    np.testing.assert_allclose(a.flat_master, b.flat_master, rtol=1e-12, atol=1e-14)
    assert a.flat_params is a.flat_master  # float64: no working copy


def test_a_second_step_continues_from_the_first():
    model = micro()
    step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8)
    first = step.run(batches(1), lr=1e-2).loss
    again = step.run(batches(1), lr=1e-2).loss
    assert again < first  # the same batch: the update helped
    assert step.optimizer.step_count == 2


def test_bad_input_is_refused_with_what_was_expected():
    model = micro()
    step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8)
    x, y = batches(1)[0]
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 29\)"):
        step.run([(x + 100, y)], lr=1e-3)
    with pytest.raises(ValueError, match=r"must be \(B,T\) = \(2, 8\)"):
        step.run([(x[:, :4], y[:, :4])], lr=1e-3)
    with pytest.raises(ValueError, match="2 micro-batches given, the step takes 1"):
        step.run(batches(2), lr=1e-3)
    with pytest.raises(ValueError, match="CUDA graph needs the model and every selected kernel on the GPU"):
        TrainStep(model, AdamW(model), batch_size=2, seq_len=8, graph=True)


class _NanGelu:
    """gelu that puts a NaN into its output: a planted bad op."""

    def forward(self, inputs, attrs, out=None):
        from backends.naive import gelu
        y, saved = gelu.forward(inputs, attrs, out)
        y.reshape(-1)[3] = np.nan
        return y, saved

    def backward(self, saved, dout, grads):
        from backends.naive import gelu
        return gelu.backward(saved, dout, grads)


class _Planted:
    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("nanny", "a NaN-making gelu", [Variant("gelu", "nan", impl="test_step:NAN_GELU", device="cpu",
                                                               dtypes=("float64", "float32"))])]


NAN_GELU = _NanGelu()


def test_a_nan_stops_the_step_names_the_op_and_skips_the_update():
    from backends.naive import plugin as naive
    registry = Registry(plugins=[naive, _Planted()], entry_points=False)
    model = micro(backend="naive,gelu=nanny:nan", registry=registry)
    before = model.flat_master.copy()
    step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8)
    result = step.run(batches(1), lr=1e-2)
    with pytest.raises(FloatingPointError, match=r"gelu forward \(nanny:nan\).*1 of 1024 elements"):
        result.check()
    np.testing.assert_array_equal(model.flat_master, before)  # nothing changed


def test_check_finite_mode_stops_at_the_first_bad_call():
    from backends.naive import plugin as naive
    registry = Registry(plugins=[naive, _Planted()], entry_points=False)
    model = micro(backend="naive,gelu=nanny:nan", registry=registry)
    step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8, check_finite=True)
    with pytest.raises(FloatingPointError, match="gelu forward"):
        step.run(batches(1), lr=1e-2)


# ---- mixed precision ----------------------------------------------------------------------------
def _interpreted_triton_registry():
    pytest.importorskip("triton", reason="triton not installed")
    from backends.naive import plugin as naive
    from backends.triton._testing import interpreted_variant
    from backends.triton.plugin import _VARIANTS

    class Interpreted:
        @hookimpl
        def nanoeuler_backends(self):
            variants = [interpreted_variant(op) for op, _, _ in _VARIANTS]
            return [Backend("tritoncpu", "the triton kernels under the interpreter", variants)]

    return Registry(plugins=[naive, Interpreted()], entry_points=False)


def test_mixed_precision_model_step_through_the_triton_kernels():
    """float16 working copies and activations, float32 master weights and gradients, against float64
    naive: conformance's model check in mixed precision (bfloat16 runs it on the GPU)."""
    registry = _interpreted_triton_registry()
    conformance.check_model_step("tritoncpu", registry=registry, seed=0, dtype="float16")


def test_mixed_precision_model_step_with_the_gelu_in_the_projections_backward():
    """gelu_matmul (opt-in on triton): c_proj's dx GEMM multiplies by gelu'(c_fc's output) in its
    epilogue; the whole step against float64 naive in float16, the MLP composed otherwise."""
    registry = _interpreted_triton_registry()
    model = micro(dtype="float16", backend="tritoncpu,matmul_gelu=none,gelu_matmul=tritoncpu", registry=registry)
    assert model.fused["gelu_matmul"] and model.plan.gelu_in_proj
    conformance.check_model_step("tritoncpu,matmul_gelu=none,gelu_matmul=tritoncpu", registry=registry, seed=0, dtype="float16")


def test_mixed_precision_layout_and_update_refresh_the_working_copy():
    registry = _interpreted_triton_registry()
    model = micro(dtype="float16", backend="tritoncpu", registry=registry)
    assert model.flat_master.dtype == np.float32 and model.flat_grads.dtype == np.float32
    assert model.flat_params.dtype == np.float16 and model.params["wte.weight"].dtype == np.float16
    assert "float32 master weights" in repr(model)
    step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8)
    before = model.flat_params.copy()
    result = step.run(batches(1), lr=1e-2)
    assert np.isfinite(result.loss) and result.grad_norm > 0
    np.testing.assert_array_equal(model.flat_params, model.flat_master.astype(np.float16))
    assert (model.flat_params != before).mean() > 0.5  # the copy moved with the weights
    assert model.named_parameters()["wte.weight"].dtype == np.float32  # checkpoints hold the master


# ---- the arena --------------------------------------------------------------------------------
def test_the_arena_is_the_map_of_memory():
    config = preset("gpt2")
    N, C, L, Vp = 16 * 1024, 768, 12, config.padded_vocab_size
    unfused = arena_bytes(L, N, C, Vp, "bfloat16", MemoryPlan())
    fused = arena_bytes(L, N, C, Vp, "bfloat16", MemoryPlan(fused_classifier=True, fused_gelu=True))
    recomputed = arena_bytes(L, N, C, Vp, "bfloat16", MemoryPlan(recompute_gelu=True))
    # per layer 5 (N,C) + 3C + 2 x 4C = 16 C a row; once 2 C (+ Vp logits); scratch 6 C + 3C + 8C (+ Vp)
    per_row = L * 16 * C + 2 * C + 17 * C
    assert unfused == 2 * N * (per_row + 2 * Vp) + 4 * N
    # matmul_gelu: no pre a layer, and no dfch scratch (its backward forms dpre itself)
    assert fused == 2 * N * (per_row - L * 4 * C - 4 * C) + 4 * N
    # recompute: one GELU output among the scratch instead of one a layer (2.2 GB less at B=32)
    assert recomputed == unfused - 2 * N * (L - 1) * 4 * C
    assert arena_bytes(L, 2 * N, C, Vp, "bfloat16", MemoryPlan()) - \
        arena_bytes(L, 2 * N, C, Vp, "bfloat16", MemoryPlan(recompute_gelu=True)) == pytest.approx(2.2e9, rel=0.02)
    acts = Activations.allocate(np, GPTConfig(2, 2, 16, 16, 29, 8), 2, 8, "float32", MemoryPlan())
    assert acts.qkv.shape == (2, 16, 48) and acts.losses.shape == (16,)
    assert np.shares_memory(acts.qkv, acts.flat) and "total" in acts.describe()
    names = [n for n, _ in layout(2, 16, 16, 32, MemoryPlan(True, True))]
    assert "logits" not in names and "fch" not in names and "dfch" not in names
    shapes = dict(layout(2, 16, 16, 32, MemoryPlan(recompute_gelu=True)))
    assert shapes["fch_gelu"] == (16, 64) and shapes["fch"] == (2, 16, 64)
    # gelu_matmul keeps the GELU output itself and never writes d(GELU output): 4C a row a layer and
    # 4C of scratch fewer (step_bytes counts the op's copy among the saved values)
    in_proj = MemoryPlan(gelu_in_proj=True)
    assert arena_bytes(L, N, C, Vp, "bfloat16", in_proj) == unfused - 2 * N * (L + 1) * 4 * C
    assert step_bytes(config, 16, 1024, "bfloat16", in_proj)["saved"] == \
        step_bytes(config, 16, 1024, "bfloat16", MemoryPlan())["saved"] + 2 * N * L * 4 * C


def assert_trains_alike(a, b, steps=3):
    """Two models from the same weights: the same losses and weights after `steps` steps, bit for bit."""
    losses = []
    for model in (a, b):
        step = TrainStep(model, AdamW(model), batch_size=2, seq_len=8, grad_clip=1.0)
        losses.append([step.run([x], lr=1e-2).loss for x in batches(steps)])
    assert losses[0] == losses[1]
    np.testing.assert_array_equal(a.flat_master, b.flat_master)


def test_recompute_trains_bit_for_bit_like_keeping_the_gelu():
    """--recompute remakes each layer's GELU output in the backward from the same input by the same
    kernel: the same losses and weights, bit for bit, over steps; the last layer's is the one the
    forward left in the shared buffer, every other layer's must be remade (a backward that skipped it
    would use the last layer's output in every layer)."""
    kept = micro(n_layer=3, backend="naive,mlp=none,matmul_gelu=none")
    remade = micro(n_layer=3, recompute=True)
    for op in ("mlp", "matmul_gelu"):
        assert not remade.fused[op] and any(f"{op}: not used with recompute" in n for n in remade.kernels.notes)
    assert remade.activations(2, 8).fch_gelu.shape == (16, 64)
    assert_trains_alike(kept, remade)


def test_recompute_with_the_fused_gelu_is_refused():
    """The model composes the MLP under recompute (above); a plan asking for both is a bug, and so
    is one with the GELU fused into two ops."""
    with pytest.raises(ValueError, match="recompute.*matmul_gelu"):
        MemoryPlan(fused_gelu=True, recompute_gelu=True)
    with pytest.raises(ValueError, match="recompute.*gelu_matmul"):
        MemoryPlan(gelu_in_proj=True, recompute_gelu=True)
    with pytest.raises(ValueError, match="recompute.*fuses mlp.*mlp=none"):
        MemoryPlan(fused_mlp=True, recompute_gelu=True)
    for two in ({"fused_gelu": True, "gelu_in_proj": True}, {"fused_mlp": True, "fused_gelu": True},
                {"fused_mlp": True, "gelu_in_proj": True}):
        with pytest.raises(ValueError, match="one op at most"):
            MemoryPlan(**two)
    remade = micro(recompute=True, backend="naive,matmul_gelu=none")
    assert not remade.fused["gelu_matmul"] and not remade.fused["mlp"] and not remade.plan.fused_mlp
    for op in ("mlp", "gelu_matmul"):
        assert any(f"{op}: not used with recompute" in n for n in remade.kernels.notes)


def test_the_gelu_fused_into_the_projection_trains_like_the_composition():
    """naive's gelu_matmul is gelu's kernel then matmul's (and back): with matmul_gelu left out the
    model takes it, keeps no GELU output in the arena (the op does), and trains bit for bit like the
    MLP composed of the primitives. Where both GELU fusions are offered, c_fc's (matmul_gelu) wins."""
    fused = micro(n_layer=3, backend="naive,mlp=none,matmul_gelu=none")
    composed = micro(n_layer=3, backend="naive,mlp=none,matmul_gelu=none,gelu_matmul=none")
    assert fused.fused["gelu_matmul"] and not composed.fused["gelu_matmul"]
    assert not fused.activations(2, 8).has("fch_gelu") and not fused.activations(2, 8).has("dfch_gelu")
    assert_trains_alike(fused, composed)
    both = micro(backend="naive,mlp=none")
    assert both.fused["matmul_gelu"] and not both.fused["gelu_matmul"]
    assert not any("gelu_matmul" in note for note in both.kernels.notes)  # the user named neither
    named = micro(backend="naive,mlp=none,gelu_matmul=naive")
    assert named.fused["matmul_gelu"] and not named.fused["gelu_matmul"]
    assert "gelu_matmul: not used: the GELU goes into matmul_gelu (the selection offers both)" in named.kernels.notes


MLP_BUFFERS = ("fch", "fch_gelu", "dfch_gelu", "dfch")  # the arena's (N,4C) buffers, none of them mlp's


def op_calls(model, x, y) -> dict:
    """{(op, direction): calls} of one forward and backward of `model` (its gradients zeroed first)."""
    calls: dict = {}

    def count(kernel, direction, call):
        key = (kernel.spec.name, direction)
        calls[key] = calls.get(key, 0) + 1
        return call()
    Kernel.watchers.append(count)
    try:
        model.zero_grad()
        model.forward(x, y)
        model.backward()
    finally:
        Kernel.watchers.remove(count)
    return calls


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_whole_mlp_fused_gives_the_compositions_loss_and_gradients_bit_for_bit(dtype):
    """naive's mlp calls naive's matmul, gelu and matmul kernels in the order the model calls them
    unfused (and back): `--backend naive` takes it over both smaller GELU fusions (saying so), runs
    the MLP as one op a layer each way, keeps none of the MLP's (N,4C) buffers in the arena (the op
    keeps pre and h), and gives the loss and every gradient of the composition bit for bit: of
    matmul_gelu's MLP (`naive,mlp=none`) and of the three primitives; over steps too."""
    L = 3
    fused = micro(dtype, n_layer=L)
    assert fused.fused["mlp"] and fused.plan.fused_mlp
    assert not fused.fused["matmul_gelu"] and not fused.fused["gelu_matmul"]
    assert not any("not used" in note for note in fused.kernels.notes)  # the default run: naive offers all three
    named = micro(dtype, n_layer=L, backend="naive,matmul_gelu=naive")
    assert named.fused["mlp"] and not named.fused["matmul_gelu"]
    assert "matmul_gelu: not used: the GELU goes into mlp (the selection offers both)" in named.kernels.notes
    assert not any(fused.activations(2, 8).has(name) for name in MLP_BUFFERS)
    (x, y), = batches(1)
    calls = op_calls(fused, x, y)
    assert calls[("mlp", "forward")] == calls[("mlp", "backward")] == L
    # c_attn, and the attention projection writing the stream (the classifier is fused)
    assert calls[("matmul", "forward")] == calls[("matmul_residual", "forward")] == L
    assert not {"gelu", "matmul_gelu", "gelu_matmul"} & {op for op, _ in calls}
    loss = fused.forward(x, y)[1]
    fused.zero_grad()
    fused.backward()
    assert np.all(fused.grads["h.0.mlp.c_fc.weight"] != 0) and np.all(fused.grads["h.2.mlp.c_proj.bias"] != 0)
    composed_text = "naive,mlp=none,matmul_gelu=none,gelu_matmul=none"
    for text in ("naive,mlp=none", composed_text):
        composed = micro(dtype, n_layer=L, backend=text)
        assert not composed.fused["mlp"] and not composed.plan.fused_mlp
        assert composed.fused["matmul_gelu"] == (text == "naive,mlp=none")
        composed.zero_grad()
        assert composed.forward(x, y)[1] == loss
        composed.backward()
        for name in fused.grads:
            np.testing.assert_array_equal(fused.grads[name], composed.grads[name], err_msg=f"{text}: {name}")
    assert_trains_alike(micro(dtype, n_layer=L), micro(dtype, n_layer=L, backend=composed_text))


def test_the_model_runs_mlp_where_the_selection_has_it():
    """numba offers no mlp: the model composes the MLP from numba's matmul and gelu; named, naive's
    mlp runs beside numba's other kernels (the selection's usual mixing: all on the CPU)."""
    composed = micro(backend="numba")
    assert not composed.fused["mlp"] and not composed.plan.fused_mlp
    mixed = micro(backend="numba,mlp=naive")
    assert mixed.fused["mlp"] and mixed.plan.fused_mlp
    assert mixed.kernels.variants["mlp"].qualname == "naive:reference"
    assert mixed.kernels.variants["matmul"].backend == "numba"


def test_the_fused_mlp_keeps_pre_and_the_gelu_output_itself():
    """mlp keeps pre and h itself, two (N,4C) a layer that step_bytes counts among the saved values,
    and its backward needs no (N,4C) gradient scratch: the arena has no fch, fch_gelu, dfch_gelu or
    dfch. All that fusing saves of the step's memory is those two scratch buffers."""
    config = preset("gpt2")
    N, C, L, Vp = 16 * 1024, 768, 12, config.padded_vocab_size
    composed, plan = MemoryPlan(fused_classifier=True), MemoryPlan(fused_classifier=True, fused_mlp=True)
    assert not set(MLP_BUFFERS) & {n for n, _ in layout(L, N, C, Vp, plan)}
    assert set(MLP_BUFFERS) <= {n for n, _ in layout(L, N, C, Vp, composed)}
    assert arena_bytes(L, N, C, Vp, "bfloat16", plan) == \
        arena_bytes(L, N, C, Vp, "bfloat16", composed) - 2 * N * (2 * L + 2) * 4 * C
    ours, theirs = (step_bytes(config, 16, 1024, "bfloat16", p) for p in (plan, composed))
    assert ours["saved"] == theirs["saved"] + 2 * L * N * 4 * C * 2
    assert sum(theirs[k] for k in ("weights", "arena", "saved")) - \
        sum(ours[k] for k in ("weights", "arena", "saved")) == 2 * N * 4 * C * 2
    assert largest_batch(config, 1024, "bfloat16", plan, 80 * 2**30) >= \
        largest_batch(config, 1024, "bfloat16", composed, 80 * 2**30)


def test_the_step_says_which_batch_fits():
    """The out-of-memory message's arithmetic: step_bytes grows linearly in B, and the largest batch
    is the last one under the device's bytes."""
    config = preset("gpt2")
    plan = MemoryPlan(fused_classifier=True, fused_gelu=True)
    args = (config, 1024, "bfloat16", plan)
    device = 80 * 2**30
    fits = largest_batch(*args, device)
    assert step_bytes(config, fits, 1024, "bfloat16", plan)["total"] <= device
    assert step_bytes(config, fits + 1, 1024, "bfloat16", plan)["total"] > device
    unfused = largest_batch(config, 1024, "bfloat16", MemoryPlan(), device)
    assert unfused < fits  # the full logits cost rows
    assert largest_batch(config, 1024, "bfloat16", MemoryPlan(recompute_gelu=True), device) > unfused
    assert largest_batch(*args, 2**20) == 0


def test_the_loss_and_its_gradient_in_one_pass_train_like_the_composition():
    """crossentropy_onepass (dlogits computed in the loss's forward, the arena without its dlogits
    buffer) gives the composition's steps bit for bit on naive, whose variant composes the two."""
    fused = micro(n_layer=2, backend="naive,classifier_crossentropy=none")  # the unfused classifier's loss
    composed = micro(n_layer=2, backend="naive,classifier_crossentropy=none,crossentropy_onepass=none")
    assert fused.plan.fused_loss and not composed.plan.fused_loss
    assert not fused.activations(2, 8).has("dlogits") and composed.activations(2, 8).has("dlogits")
    assert_trains_alike(fused, composed)


def test_the_kernels_line_says_which_fused_ops_the_model_leaves_out():
    from euler_core.train import kernels_line
    model = micro(n_layer=1)
    line = kernels_line("naive", model.kernels, model)
    assert "mlp=naive:reference," in line and "layernorm_residual=naive:reference," in line
    assert "matmul_gelu=naive:reference (not used)" in line and "gelu_matmul=naive:reference (not used)" in line


class _LayerNormResidualRecorder:
    """naive's layernorm_residual, noting for each forward whether it was given b (the stream's sum
    still to make) and whether its x came back as the very input a."""

    calls: list = []

    def forward(self, inputs, attrs, out=None):
        from backends.naive import layernorm_residual
        (x, y), saved = layernorm_residual.forward(inputs, attrs, out)
        self.calls.append(("b" in inputs, x is inputs["a"]))
        return (x, y), saved

    def backward(self, saved, grad_output, grads):
        from backends.naive import layernorm_residual
        return layernorm_residual.backward(saved, grad_output, grads)


LNR_RECORDER = _LayerNormResidualRecorder()


class _Recording:
    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("recording", "naive's layernorm_residual, its calls noted", [
            Variant("layernorm_residual", "noted", impl="test_step:LNR_RECORDER", device="cpu",
                    dtypes=("float64", "float32"))])]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_projections_that_add_to_the_stream_give_the_compositions_loss_and_gradients_bit_for_bit(dtype):
    """naive offers matmul_residual and layernorm_residual: the attention projection writes the stream
    x + c_proj(att) itself (matmul_residual into res2), the fused MLP adds its output to the stream
    (mlp's residual into res3), and each layernorm after them only normalises that stream
    (layernorm_residual without b, its x the very stream array). The arena then has no proj scratch.
    The loss and every gradient are the composition's bit for bit: of `matmul_residual=none` (both adds
    back in layernorm_residual, the fused ops as they were), of `layernorm_residual=none` (every add
    with its layernorm, as numba composes it), and with the MLP composed (its projection through matmul_residual) against
    that MLP with no add fused; over steps too."""
    from backends.naive import plugin as naive
    L = 3
    registry = Registry(plugins=[naive, _Recording()], entry_points=False)
    fused = micro(dtype, n_layer=L, backend="naive,layernorm_residual=recording:noted", registry=registry)
    assert fused.fused["matmul_residual"] and fused.mlp_adds_stream and fused.plan.projections_add
    assert not fused.activations(2, 8).has("proj")
    assert micro(dtype, backend="naive,matmul_residual=none").activations(2, 8).has("proj")  # c_proj's output
    (x, y), = batches(1)
    calls = op_calls(fused, x, y)
    assert calls[("matmul_residual", "forward")] == calls[("matmul_residual", "backward")] == L  # c_proj
    assert calls[("mlp", "forward")] == L
    assert calls[("residual", "forward")] == 1  # only the backward's, the embedding's two gradients added
    assert calls[("matmul", "forward")] == L  # c_attn only (the classifier is fused with the loss)
    LNR_RECORDER.calls.clear()
    loss = fused.forward(x, y)[1]
    assert LNR_RECORDER.calls == [(False, True)] * (2 * L)  # ln_2 and the next layernorm of every layer
    fused.zero_grad()
    fused.backward()
    assert np.all(fused.grads["h.0.attn.c_proj.weight"] != 0) and np.all(fused.grads["h.2.ln_2.bias"] != 0)
    assert np.all(fused.grads["wpe.weight"][:8] != 0)  # the stream's gradient reached the embedding
    for text in ("naive,matmul_residual=none", "naive,layernorm_residual=none"):
        composed = micro(dtype, n_layer=L, backend=text)
        assert not composed.fused["matmul_residual"]
        assert not composed.mlp_adds_stream and composed.activations(2, 8).has("proj")
        composed.zero_grad()
        assert composed.forward(x, y)[1] == loss
        composed.backward()
        for name in fused.grads:
            np.testing.assert_array_equal(fused.grads[name], composed.grads[name], err_msg=f"{text}: {name}")
    mlp_composed = micro(dtype, n_layer=L, backend="naive,mlp=none")  # matmul_gelu, then matmul_residual
    assert mlp_composed.mlp_adds_stream and mlp_composed.plan.projections_add
    assert op_calls(mlp_composed, x, y)[("matmul_residual", "forward")] == 2 * L
    plain = micro(dtype, n_layer=L, backend="naive,mlp=none,matmul_residual=none,layernorm_residual=none")
    for model in (mlp_composed, plain):
        model.zero_grad()
        assert model.forward(x, y)[1] == loss
        model.backward()
    for name in fused.grads:
        np.testing.assert_array_equal(mlp_composed.grads[name], plain.grads[name], err_msg=name)
        np.testing.assert_array_equal(fused.grads[name], plain.grads[name], err_msg=name)
    assert_trains_alike(micro(dtype, n_layer=L), micro(dtype, n_layer=L, backend="naive,matmul_residual=none"))


def test_matmul_residual_is_used_only_with_the_fused_layernorm_after_it():
    """The stream it writes is normalised by layernorm_residual without b: where the selection does not
    fuse that layernorm (numba offers neither; or layernorm_residual=none) the model composes as
    before, keeps the proj scratch, and says so where matmul_residual was named."""
    for text in ("numba", "naive,layernorm_residual=none"):
        model = micro(backend=text)
        assert not model.fused["matmul_residual"] and not model.mlp_adds_stream and not model.plan.projections_add
        assert model.activations(2, 8).has("proj")
    named = micro(backend="naive,layernorm_residual=none,matmul_residual=naive")
    assert named.kernels.has("matmul_residual") and not named.fused["matmul_residual"]
    assert any(n.startswith("matmul_residual: not used") for n in named.kernels.notes)
    from euler_core.train import kernels_line
    assert "matmul_residual=naive:reference (not used)" in kernels_line("naive", named.kernels, named)


def test_the_arena_without_the_projections_scratch():
    """Both projections writing the stream leave the (N,C) proj buffer unused: the plan drops it."""
    config = preset("gpt2")
    N, C, L, Vp = 16 * 1024, 768, 12, config.padded_vocab_size
    base = MemoryPlan(fused_classifier=True, fused_mlp=True)
    adding = MemoryPlan(fused_classifier=True, fused_mlp=True, projections_add=True)
    assert arena_bytes(L, N, C, Vp, "bfloat16", adding) == arena_bytes(L, N, C, Vp, "bfloat16", base) - 2 * N * C
    assert [n for n, _ in layout(L, N, C, Vp, adding)] == [n for n, _ in layout(L, N, C, Vp, base) if n != "proj"]
