"""Every value a command takes is checked in one place, with a message naming the flag, the value
and what is allowed (issue 16, items 10, 15 and 16)."""

import os
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from euler_core.checkpoint import save_checkpoint
from euler_core.cli import main
from euler_core.config import preset
from euler_core.model import GPT
from euler_core.sft.run import SFTConfig
from euler_core.train import TrainConfig

TRAIN = ["train", "--preset", "micro", "--steps", "1"]
GENERATE = ["generate", "--checkpoint", "nowhere"]

REFUSED = [  # (argv, the flag, the value as typed, what is allowed)
    (TRAIN + ["--total-batch", "-256"], "--total-batch", "-256", "an integer >= 1"),
    (TRAIN + ["--total-batch", "0"], "--total-batch", "0", "an integer >= 1"),
    (TRAIN + ["--seq-len", "0"], "--seq-len", "0", "an integer >= 1"),
    (TRAIN + ["--seq-len", "-4"], "--seq-len", "-4", "an integer >= 1"),
    (TRAIN + ["--eval-every", "-1"], "--eval-every", "-1", "an integer >= 0"),
    (TRAIN + ["--checkpoint-every", "-1"], "--checkpoint-every", "-1", "an integer >= 0"),
    (TRAIN + ["--warmup", "-5"], "--warmup", "-5", "an integer >= 0"),
    (TRAIN + ["--min-lr-frac", "5"], "--min-lr-frac", "5", "a finite number in [0, 1]"),
    (TRAIN + ["--grad-clip", "-1"], "--grad-clip", "-1", "a finite number >= 0"),
    (TRAIN + ["--lr", "nan"], "--lr", "nan", "a finite number in (0, 1]"),
    (TRAIN + ["--lr", "inf"], "--lr", "inf", "a finite number in (0, 1]"),
    (TRAIN + ["--lr", "1e6"], "--lr", "1e6", "a finite number in (0, 1]"),
    (TRAIN + ["--seed", "-1"], "--seed", "-1", "an integer >= 0"),
    (TRAIN + ["--batch-size", "two"], "--batch-size", "two", "an integer >= 1"),
    (TRAIN + ["--dtype", "half"], "--dtype", "'half'", "one of float32, float64, bfloat16, float16"),
    (GENERATE + ["--top-p", "2"], "--top-p", "2", "a finite number in (0, 1]"),
    (GENERATE + ["--top-k", "-5"], "--top-k", "-5", "an integer >= 0"),
    (GENERATE + ["--max-new-tokens", "-1"], "--max-new-tokens", "-1", "an integer >= 1"),
    (GENERATE + ["--temperature", "nan"], "--temperature", "nan", "a finite number >= 0"),
    (GENERATE + ["--seed", "-1"], "--seed", "-1", "an integer >= 0"),
    (["chat", "--checkpoint", "nowhere", "--top-p", "0"], "--top-p", "0", "a finite number in (0, 1]"),
    (["sft", "--val-frac", "1"], "--val-frac", "1", "a finite number in [0, 1)"),
    (["sft", "--epochs", "0"], "--epochs", "0", "a finite number > 0"),
    (["data", "prepare", "--input", "x", "--out", "y", "--val-fraction", "-0.1"], "--val-fraction", "-0.1",
     "a finite number in [0, 1)"),
    (["data", "prepare", "--input", "x", "--out", "y", "--name", "a/b"], "--name", "'a/b'", "a name of letters"),
    (["import", "x", "--out", "y", "--n-head", "0"], "--n-head", "0", "an integer >= 1"),
]


@pytest.mark.parametrize("argv, flag, shown, allowed", REFUSED, ids=[" ".join(r[0][-2:]) for r in REFUSED])
def test_a_value_that_is_not_allowed_is_refused_naming_flag_value_and_what_is_allowed(capsys, argv, flag, shown,
                                                                                        allowed):
    """Items 10, 15, 16: --total-batch -256 trained on nothing ("-1 micro-batch(es)", exit 0), --lr nan
    was a traceback, --seq-len -4 said "negative dimensions are not allowed", --temperature nan said
    "Probabilities contain NaN" ... Each is refused before any work, naming the flag and the value."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {shown} is not allowed: expected {allowed}" in err, err


def test_the_python_api_refuses_the_same_values_with_the_same_words():
    with pytest.raises(ValueError, match=r"train: --total-batch: -256 is not allowed: expected an integer >= 1; "
                                         r"--lr: nan is not allowed"):
        TrainConfig(total_batch=-256, lr=float("nan")).validate()


def test_every_setting_declares_what_it_allows_and_the_docs_list_what_a_resume_may_change():
    from euler_core.values import resumable, rule_of
    for config_class in (TrainConfig, SFTConfig):
        for f in fields(config_class):
            assert rule_of(f).allows(f.default), f"{config_class.__name__}.{f.name}: its default is not allowed"
    page = (Path(__file__).parent.parent / "docs" / "run-directory.md").read_text()
    for flag in resumable(TrainConfig) + resumable(SFTConfig):
        assert f"`{flag}`" in page, f"docs/run-directory.md does not say a resume may change {flag}"


def test_a_total_batch_that_does_not_divide_names_the_flags(shards, tmp_path, capsys):
    assert main(["train", "--preset", "micro", "--train-data", shards[0], "--val-data", shards[1], "--vocab-size",
                 "64", "--batch-size", "4", "--seq-len", "16", "--total-batch", "100", "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    assert "--total-batch 100 is not a multiple of --batch-size x --seq-len = 4 x 16 = 64" in capsys.readouterr().err


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory nobody may write into: permissions for a user, a read-only tmpfs for root (whom
    permissions do not stop)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"running as root without a way to make a read-only directory: {mounted.stderr.decode()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A checkpoint, a safetensors file and a text corpus for the commands below."""
    from euler_core.convert.hf import to_hf
    from euler_core.convert.safetensors import write_safetensors
    root = tmp_path_factory.mktemp("inputs")
    model = GPT(preset("micro"), "naive", seed=0)
    save_checkpoint(root / "run", 1, model)
    write_safetensors(root / "m.safetensors", to_hf(model.config, model.named_parameters()))
    (root / "c.txt").write_text("".join(f"line {i}: some words to tokenize\n" for i in range(300)))
    (root / "a-file").write_text("not a directory")
    return root


COMMANDS = {  # command -> argv without --out, and whether its --out is a file (else a directory)
    "train": (["train", "--preset", "micro", "--steps", "1", "--no-progress"], False),
    "import": (["import", "{root}/m.safetensors", "--n-head", "2"], False),
    "export": (["export", "--checkpoint", "{root}/run", "--format", "hf"], False),
    "tokenizer train": (["tokenizer", "train", "--input", "{root}/c.txt", "--vocab-size", "260"], True),
    "data prepare": (["data", "prepare", "--input", "{root}/c.txt", "--tokenizer", "bytes", "--no-progress"], False),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("where", ["a file", "under a file", "read-only"])
def test_an_out_that_cannot_be_written_is_a_message(inputs, read_only_dir, capsys, command, where):
    """Item 15: --out that is a file, under a file, or read-only was a traceback in train, import,
    export, tokenizer train and data prepare."""
    argv, is_file = COMMANDS[command]
    argv = [a.format(root=inputs) for a in argv]
    out = {"a file": inputs / "a-file", "under a file": inputs / "a-file" / "x",
           "read-only": read_only_dir / "x"}[where]
    if where == "a file" and is_file:
        out = inputs  # for a command whose --out is a file, the counterpart is a directory
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: --out: " in err and "Traceback" not in err, err
    assert any(s in err for s in ("is a file", "cannot be made", "cannot create", "cannot write into",
                                  "is a directory")), err


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    """A checkpoint with a BPE tokenizer that has <|endoftext|>."""
    from euler_core.tokenizer.train import train_bpe
    tokenizer = train_bpe("".join(f"word{i} and more words\n" for i in range(200)), 280).tokenizer
    root = tmp_path_factory.mktemp("bpe")
    save_checkpoint(root / "run", 1, GPT(preset("micro", vocab_size=280), "naive", seed=0), tokenizer=tokenizer)
    return root / "run"


def test_prompts_with_special_tokens_and_empty_prompts(bpe_checkpoint, capsys):
    """Item 16: a prompt containing <|endoftext|> was refused with advice to pass a Python-only
    allowed_special=. Special tokens in a prompt are now encoded as themselves; an empty prompt is
    refused naming --prompt and saying how to sample unconditionally."""
    gen = ["generate", "--checkpoint", str(bpe_checkpoint), "--max-new-tokens", "3", "--seed", "1"]
    assert main(gen + ["--prompt", "word1<|endoftext|>word2"]) == 0
    assert capsys.readouterr().out.startswith("word1<|endoftext|>word2")
    assert main(gen + ["--prompt", "<|endoftext|>"]) == 0
    assert main(gen + ["--prompt", ""]) == 2
    err = capsys.readouterr().err
    assert "--prompt: '' is not allowed: expected text that makes at least one token" in err
    assert "'<|endoftext|>'" in err


def test_data_prepare_and_tokenizer_train_say_what_is_wrong(inputs, tmp_path, capsys):
    """Item 16: `data prepare` on a folder said "no such file"; `tokenizer train --vocab-size 5000`
    on a small corpus silently gave 271 tokens."""
    assert main(["data", "prepare", "--input", str(inputs), "--tokenizer", "bytes", "--out", str(tmp_path / "d")]) == 2
    assert f"--input: '{inputs}' is a directory; give the files in it" in capsys.readouterr().err
    out = tmp_path / "t.tiktoken"
    assert main(["tokenizer", "train", "--input", str(inputs / "c.txt"), "--vocab-size", "5000",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--vocab-size: 5000 is not allowed for this corpus: it has byte pairs enough for only" in err, err
    assert not out.exists()


def test_optional_number_settings_get_a_flag_that_parses_numbers():
    """A `float | None` field (what an annotation-to-type map could not turn into a parser) gets its
    --flag from its declared rule: a number when given, None when not, refused outside the rule."""
    import argparse
    from dataclasses import dataclass

    from euler_core.cli_options import add_config_options
    from euler_core.values import number, optional, setting

    @dataclass
    class Config:
        top_p: float | None = setting(None, optional(number(0, 1, low_open=True)))

    parser = argparse.ArgumentParser(prog="euler")
    add_config_options(parser, Config, {"top_p": "nucleus sampling mass"}, skip=())
    assert parser.parse_args(["--top-p", "0.5"]).top_p == 0.5
    assert parser.parse_args([]).top_p is None
    assert "a finite number in (0, 1]" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--top-p", "1.5"])
