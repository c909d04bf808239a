"""Checkpoints in and out: llm.c .bin (float32, bfloat16) and Hugging Face safetensors round trips,
a file written with Hugging Face's own names and layout, and bad files refused clearly."""

import json
import struct

import numpy as np
import pytest

from euler_core.checkpoint import load_checkpoint, save_checkpoint
from euler_core.config import preset
from euler_core.convert import export_weights, import_weights
from euler_core.convert.hf import CONV1D, HFFormatError, load_hf
from euler_core.convert.llmc import LLMCFormatError, read_llmc
from euler_core.convert.safetensors import (SafetensorsError, float32_to_bf16_bits, read_safetensors,
                                            write_safetensors)
from euler_core.model import GPT

quiet = dict(log=lambda *a: None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A micro model with a padded vocabulary (60 -> 64) and non-trivial weights, saved as ours."""
    config = preset("micro", vocab_size=60, vocab_multiple=32, n_embd=24, n_head=3)
    model = GPT(config, "naive", dtype="float32", seed=5)
    rng = np.random.default_rng(1)
    host = model.named_parameters()
    for name, v in host.items():
        v += rng.normal(0, 0.05, v.shape).astype(np.float32)  # biases and gains away from 0 and 1
    host["wte.weight"][config.vocab_size:] = 0.0
    model.load_parameters(host)
    run = tmp_path_factory.mktemp("ours")
    save_checkpoint(run, 7, model)
    return model, run


def logits_of(config, params):
    m = GPT(config, "naive", dtype="float32", seed=None)
    m.load_parameters(params)
    tokens = np.arange(24).reshape(2, 12) % config.vocab_size
    return m.forward(tokens)[0]


def same_shape(a, b):
    """Configs alike; llm.c files record the padded size Vp, not the multiple that made it."""
    assert a.padded_vocab_size == b.padded_vocab_size
    assert {**a.to_dict(), "vocab_multiple": 0} == {**b.to_dict(), "vocab_multiple": 0}


def same_weights(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_llmc_round_trip_is_exact(trained, tmp_path):
    model, run = trained
    export_weights(run, tmp_path / "m.bin", "llmc", **quiet)
    header = np.fromfile(tmp_path / "m.bin", dtype="<i4", count=8)
    c = model.config
    assert header.tolist() == [20240326, 3, c.block_size, 60, c.n_layer, c.n_head, c.n_embd, 64]
    import_weights(tmp_path / "m.bin", tmp_path / "back", **quiet)
    back = load_checkpoint(tmp_path / "back")
    same_shape(back.config, model.config)
    same_weights(back.params, model.named_parameters())
    np.testing.assert_array_equal(logits_of(back.config, back.params), logits_of(model.config, model.named_parameters()))


def test_llmc_bf16_holds_the_rounded_weights(trained, tmp_path):
    model, run = trained
    export_weights(run, tmp_path / "m16.bin", "llmc-bf16", **quiet)
    config, params, dtype = read_llmc(tmp_path / "m16.bin")
    assert dtype == "bfloat16"
    same_shape(config, model.config)
    for name, v in model.named_parameters().items():
        expected = (float32_to_bf16_bits(v).astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(params[name], expected, err_msg=name)
        np.testing.assert_allclose(params[name], v, rtol=2 ** -8, atol=1e-30)
    ref = logits_of(model.config, model.named_parameters())
    assert np.abs(logits_of(config, params) - ref).max() < 0.05 * np.abs(ref).max()


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, np.inf, np.nan], dtype=np.float32)
    bits = float32_to_bf16_bits(x)
    assert bits[:5].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80]  # ties go to the even mantissa
    assert np.isnan((bits[5:].astype(np.uint32) << 16).view(np.float32)).all()


def test_safetensors_round_trip_is_exact(trained, tmp_path):
    model, run = trained
    export_weights(run, tmp_path / "hf", "hf", **quiet)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"]) == (2, 3, 24, 60)
    tensors, meta = read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert tensors["wte.weight"].shape == (60, 24) and meta["format"] == "pt"
    assert tensors["h.0.attn.c_attn.weight"].shape == (24, 72)  # Conv1D: (in, out)
    import_weights(tmp_path / "hf", tmp_path / "back", **quiet)
    back = load_checkpoint(tmp_path / "back")
    assert back.config == model.config
    same_weights(back.params, model.named_parameters())
    np.testing.assert_array_equal(logits_of(back.config, back.params), logits_of(model.config, model.named_parameters()))


def test_hugging_face_names_and_layout_load_with_matching_logits(trained, tmp_path):
    """A file as transformers writes GPT2LMHeadModel: `transformer.` prefix, Conv1D (in, out) weights,
    V rows of wte, the attention-mask buffers, a tied lm_head; built here by hand from our weights."""
    model, _ = trained
    c = model.config
    ours = model.named_parameters()
    hf = {}
    for name, v in ours.items():
        if name == "wte.weight":
            v = v[:c.vocab_size]
        elif name.endswith(CONV1D):
            v = v.T
        hf["transformer." + name] = np.ascontiguousarray(v)
    for i in range(c.n_layer):
        hf[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((c.block_size, c.block_size), np.float32))[None, None]
    hf["lm_head.weight"] = hf["transformer.wte.weight"].copy()
    (tmp_path / "gpt2").mkdir()
    write_safetensors(tmp_path / "gpt2" / "model.safetensors", hf, {"format": "pt"})
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd,
         "n_positions": c.block_size, "vocab_size": c.vocab_size}))
    config, params, notes = load_hf(tmp_path / "gpt2")
    assert (config.n_layer, config.n_head, config.n_embd, config.vocab_size) == (2, 3, 24, 60)
    assert config.padded_vocab_size == 128  # Hugging Face files carry no padding: GPT-2's multiple of 128
    ref = logits_of(c, ours)
    got = logits_of(config, params)
    np.testing.assert_allclose(got[..., :c.vocab_size], ref[..., :c.vocab_size], rtol=1e-6, atol=1e-6)
    # BF16 files (how many hub models are stored) load too, as their rounded values
    write_safetensors(tmp_path / "gpt2" / "model.safetensors", hf, {"format": "pt"}, float_dtype="BF16")
    _, params16, _ = load_hf(tmp_path / "gpt2")
    assert np.abs(params16["h.1.mlp.c_fc.weight"] - params["h.1.mlp.c_fc.weight"]).max() < 0.01


def test_safetensors_byte_layout(tmp_path):
    path = write_safetensors(tmp_path / "x.safetensors", {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                                                          "b": np.array([1, 2], dtype=np.int64)}, {"k": "v"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["a"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    assert header["b"] == {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}
    assert header["__metadata__"] == {"k": "v"} and (8 + n) % 8 == 0
    assert np.frombuffer(raw[8 + n:8 + n + 24], "<f4").tolist() == [0, 1, 2, 3, 4, 5]
    try:
        from safetensors.numpy import load_file  # the reference reader, when installed
    except ImportError:
        return
    loaded = load_file(str(path))
    np.testing.assert_array_equal(loaded["a"], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_bad_files_are_refused_clearly(trained, tmp_path):
    model, run = trained
    export_weights(run, tmp_path / "m.bin", "llmc", **quiet)
    raw = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "short.bin").write_bytes(raw[:-100])
    with pytest.raises(LLMCFormatError, match="truncated or not matching"):
        read_llmc(tmp_path / "short.bin")
    header = np.frombuffer(raw[:1024], "<i4").copy()
    header[6] = 48  # C in the header no longer matches the data
    (tmp_path / "wrongC.bin").write_bytes(header.tobytes() + raw[1024:])
    with pytest.raises(LLMCFormatError, match="describes"):
        read_llmc(tmp_path / "wrongC.bin")
    header[1] = 1
    (tmp_path / "v1.bin").write_bytes(header.tobytes() + raw[1024:])
    with pytest.raises(LLMCFormatError, match="version 1"):
        read_llmc(tmp_path / "v1.bin")
    (tmp_path / "junk.safetensors").write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    with pytest.raises(SafetensorsError, match="header length"):
        read_safetensors(tmp_path / "junk.safetensors")
    # a tensor whose shape does not fit the model its config.json describes
    export_weights(run, tmp_path / "hf", "hf", **quiet)
    tensors, meta = read_safetensors(tmp_path / "hf" / "model.safetensors")
    tensors["h.1.mlp.c_fc.weight"] = tensors["h.1.mlp.c_fc.weight"][:, :-1].copy()
    write_safetensors(tmp_path / "hf" / "model.safetensors", tensors, meta)
    with pytest.raises(HFFormatError, match=r"h.1.mlp.c_fc.weight has shape \(95, 24\)"):
        load_hf(tmp_path / "hf")
    # an untied head
    tensors, meta = read_safetensors(tmp_path / "hf" / "model.safetensors")
    with pytest.raises(HFFormatError, match="lm_head"):
        from euler_core.convert.hf import from_hf
        from_hf({**tensors, "lm_head.weight": tensors["wte.weight"] + 1})


def test_cli_import_export_and_mismatched_checkpoint(trained, tmp_path, capsys):
    from euler_core.cli import main
    model, run = trained
    assert main(["export", "--checkpoint", str(run), "--format", "llmc", "--out", str(tmp_path / "m.bin")]) == 0
    assert main(["import", str(tmp_path / "m.bin"), "--out", str(tmp_path / "imp")]) == 0
    same_shape(load_checkpoint(tmp_path / "imp").config, model.config)
    assert main(["import", str(tmp_path / "nothing.bin"), "--out", str(tmp_path / "x")]) == 2
    assert "no such file" in capsys.readouterr().err
    # a checkpoint whose shapes do not match its config: a clear error, not a crash
    ckpt = load_checkpoint(tmp_path / "imp")
    meta = json.loads((ckpt.path / "meta.json").read_text())
    meta["config"]["n_embd"] = 48
    meta["config"]["n_head"] = 4
    (ckpt.path / "meta.json").write_text(json.dumps(meta))
    assert main(["export", "--checkpoint", str(tmp_path / "imp"), "--format", "hf", "--out", str(tmp_path / "o")]) == 2
    assert "wte.weight has shape (64, 24), config expects (64, 48)" in capsys.readouterr().err
