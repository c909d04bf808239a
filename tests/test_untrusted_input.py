"""Nothing trusted: crafted checkpoints, safetensors and JSON lines that cost disk or memory, recurse
too deeply, or used to end in a traceback (issue 16, items 6-8 and 15). Every file is built here."""

import json
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from euler_core.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from euler_core.cli import main
from euler_core.config import preset
from euler_core.convert.hf import to_hf
from euler_core.convert.safetensors import write_safetensors
from euler_core.model import GPT


@pytest.fixture(scope="module")
def model():
    return GPT(preset("micro"), "naive", dtype="float32", seed=3)


def safetensors_bytes(header: dict | str, buffer: bytes = b"") -> bytes:
    raw = header if isinstance(header, str) else json.dumps(header)
    return struct.pack("<Q", len(raw)) + raw.encode() + buffer


def hf_file(tmp_path, model, metadata=None, name="model.safetensors"):
    path = tmp_path / name
    write_safetensors(path, to_hf(model.config, model.named_parameters()), metadata)
    return path


def peak_bytes(fn):
    """(fn()'s result or the exception it raised, the most memory it held at once, numpy included)."""
    tracemalloc.start()
    try:
        outcome = fn()
    except Exception as e:  # the test looks at it
        outcome = e
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return outcome, peak


@pytest.mark.parametrize("multiple", [str(2**20), str(10**15), "0", "x"])
def test_import_refuses_a_vocab_multiple_that_would_allocate_what_the_file_does_not_hold(model, tmp_path, capsys,
                                                                                          multiple):
    """Item 6: a 2.5 KB safetensors with nanoeuler.vocab_multiple 268435456 imported (exit 0) into a
    4.3 GB model.npz; 10^15 tried to allocate 14 PiB. (2^20 here: 64 MB from a 32 KB file.)"""
    src = hf_file(tmp_path, model, {"nanoeuler.vocab_multiple": multiple})
    status, peak = peak_bytes(lambda: main(["import", str(src), "--out", str(tmp_path / "run"), "--n-head", "2"]))
    assert status == 2 and peak < 8 * 2**20, (status, peak)
    err = capsys.readouterr().err
    assert "nanoeuler.vocab_multiple" in err and "expected an integer in [1, 4096]" in err, err
    assert not list((tmp_path / "run").glob("step_*"))


def stream_zeros_member(zf: zipfile.ZipFile, name: str, shape, dtype="<f4") -> None:
    """A compressed .npy member of zeros, written in chunks (the test never holds it in memory)."""
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    with zf.open(name, "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, header)
        remaining = int(np.prod(shape)) * np.dtype(dtype).itemsize
        chunk = bytes(1 << 22)
        while remaining:
            f.write(chunk[:min(remaining, len(chunk))])
            remaining -= min(remaining, len(chunk))


def test_a_checkpoint_cannot_make_the_loader_decompress_what_it_does_not_need(model, tmp_path):
    """Item 7: loading decompressed every member of model.npz, unknown ones too: 2.1 MB holding
    2 GiB of compressed zeros took 2.1 GB of memory before it was refused. Here 256 MiB."""
    run = tmp_path / "run"
    ckpt = save_checkpoint(run, 1, model)
    with zipfile.ZipFile(ckpt / "model.npz", "a", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        stream_zeros_member(zf, "padding.npy", (64 * 2**20,))
    assert (ckpt / "model.npz").stat().st_size < 2 * 2**20
    error, peak = peak_bytes(lambda: load_checkpoint(run))
    assert isinstance(error, CheckpointError) and "unknown member(s) ['padding']" in str(error), error
    assert peak < 16 * 2**20, f"held {peak / 2**20:.0f} MiB to refuse a small file"


def test_a_checkpoint_whose_config_claims_a_huge_model_is_refused_before_allocating(tmp_path):
    """Item 7, the other way in: meta.json claims a large model and model.npz holds compressed zeros
    of exactly the claimed shapes. Refused from the sizes the file really holds."""
    config = preset("micro", n_embd=2048, n_head=2, vocab_size=4096)
    from euler_core.model import parameter_layout
    ckpt = tmp_path / "step_000001"
    ckpt.mkdir()
    with zipfile.ZipFile(ckpt / "model.npz", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, shape in parameter_layout(config):
            stream_zeros_member(zf, name + ".npy", shape)
    (ckpt / "meta.json").write_text(json.dumps({"format": "nanoeuler-checkpoint-1", "step": 1,
                                                "config": config.to_dict(), "dtype": "float32"}))
    error, peak = peak_bytes(lambda: load_checkpoint(ckpt))
    assert isinstance(error, CheckpointError) and "refused before allocating" in str(error), error
    assert peak < 16 * 2**20, f"held {peak / 2**20:.0f} MiB"


def test_json_nested_too_deeply_is_a_clear_error_or_a_skipped_line(model, tmp_path, capsys):
    """Item 8: a safetensors header nested 200,000 levels deep, or one deeply nested SFT JSONL line,
    raised RecursionError (the SFT one aborted the whole run instead of skipping the line)."""
    deep = "[" * 200_000 + "]" * 200_000
    src = tmp_path / "deep.safetensors"
    src.write_bytes(safetensors_bytes('{"a": ' + deep + "}"))
    assert main(["import", str(src), "--out", str(tmp_path / "run")]) == 2
    assert "nested too deeply" in capsys.readouterr().err
    from euler_core.sft.data import read_jsonl
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps(good) + "\n" + '{"messages": ' + deep + "}\n" + json.dumps(good) + "\n")
    conversations, problems = read_jsonl(data)
    assert [c.line for c in conversations] == [1, 3]
    assert len(problems) == 1 and "chat.jsonl:2: nested too deeply" in problems[0]
    ckpt = save_checkpoint(tmp_path / "r2", 1, model)
    (ckpt / "meta.json").write_text('{"format": ' + deep + "}")
    with pytest.raises(CheckpointError, match="meta.json: nested too deeply"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("meta", ["[]", "null", '"text"', "3"])
def test_meta_json_that_is_not_an_object(model, tmp_path, capsys, meta):
    """Item 15: meta.json holding [] or null was a traceback."""
    ckpt = save_checkpoint(tmp_path / "run", 1, model)
    (ckpt / "meta.json").write_text(meta)
    assert main(["generate", "--checkpoint", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "meta.json holds" in err and "expected a JSON object" in err, err
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        load_checkpoint(ckpt)


def test_optimizer_state_missing_a_member(shards, tmp_path, capsys):
    """Item 15: optimizer.npz missing `v` was a KeyError traceback on --resume."""
    run = tmp_path / "run"
    assert main(["train", "--preset", "micro", "--train-data", shards[0], "--val-data", shards[1], "--vocab-size",
                 "64", "--batch-size", "2", "--steps", "2", "--eval-every", "0", "--out", str(run),
                 "--no-progress"]) == 0
    opt = load_checkpoint(run).path / "optimizer.npz"
    with np.load(opt) as z:
        kept = {"m": z["m"], "step": z["step"]}
    np.savez(opt, **kept)
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(run), "--steps", "3", "--no-progress"]) == 2
    assert "optimizer.npz: lacks ['v']" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["metadata is a list", "0-d wpe", "1-d wte", "shape of strings",
                                  "dtype is a list"])
def test_malformed_safetensors_are_messages(model, tmp_path, capsys, case):
    """Item 15: safetensors __metadata__ that is a list, a 0-d wpe (and kin) were tracebacks."""
    tensors = to_hf(model.config, model.named_parameters())
    good = tmp_path / "good.safetensors"
    write_safetensors(good, tensors)
    raw = good.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, buffer = json.loads(raw[8:8 + n]), raw[8 + n:]
    if case == "metadata is a list":
        header["__metadata__"] = ["a", "b"]
    elif case == "0-d wpe":
        begin = header["wpe.weight"]["data_offsets"][0]
        header["wpe.weight"] = {"dtype": "F32", "shape": [], "data_offsets": [begin, begin + 4]}
    elif case == "1-d wte":
        w = header["wte.weight"]
        w["shape"] = [w["shape"][0] * w["shape"][1]]
    elif case == "shape of strings":
        header["wte.weight"]["shape"] = ["64", "16"]
    else:
        header["wte.weight"]["dtype"] = ["F32"]
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(safetensors_bytes(header, buffer))
    assert main(["import", str(bad), "--out", str(tmp_path / "run"), "--n-head", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("euler import: error: ") and "bad.safetensors" in err, err


def test_export_llmc_onto_a_directory_is_refused_and_leaves_nothing(model, tmp_path, capsys):
    """Item 15: `export --format llmc --out <existing dir>` was a traceback and left a .tmpPID."""
    run = tmp_path / "run"
    save_checkpoint(run, 1, model)
    target = tmp_path / "target"
    target.mkdir()
    assert main(["export", "--checkpoint", str(run), "--format", "llmc", "--out", str(target)]) == 2
    assert "--out: " in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == [run, target] and list(target.iterdir()) == []


def test_resume_on_an_imported_checkpoint_trains_from_its_weights(model, shards, tmp_path, capsys):
    """Item 15: `train --resume` on an imported checkpoint was `KeyError: 'train'`, though the docs
    say an imported checkpoint is a run directory like any other. It starts training from the weights
    (a fresh optimizer); the model's shape is the checkpoint's, so shape flags are refused."""
    run = tmp_path / "gpt"
    src = hf_file(tmp_path, model, {"nanoeuler.vocab_multiple": "1"})
    assert main(["import", str(src), "--out", str(run), "--n-head", "2"]) == 0
    data = ["--train-data", shards[0], "--val-data", shards[1], "--batch-size", "2", "--steps", "3",
            "--eval-every", "0", "--no-progress"]
    assert main(["train", "--resume", "--out", str(run), "--n-layer", "4", *data]) == 2
    assert "holds weights only" in capsys.readouterr().err
    assert main(["train", "--resume", "--out", str(run), *data]) == 0
    resumed = load_checkpoint(run)
    assert resumed.meta["step"] == 3 and resumed.config == model.config and resumed.optimizer is not None
    assert main(["train", "--resume", "--out", str(run), "--steps", "4", "--no-progress"]) == 0  # and goes on
    assert load_checkpoint(run).meta["step"] == 4


def test_a_checkpoint_cannot_name_a_tokenizer_file_outside_itself(tmp_path):
    from euler_core.tokenizer import tokenizer_from_checkpoint
    with pytest.raises(ValueError, match="not a file name inside the checkpoint"):
        tokenizer_from_checkpoint(tmp_path, {"kind": "bpe", "file": "../../etc/passwd"})
