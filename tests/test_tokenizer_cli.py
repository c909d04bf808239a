"""`euler tokenizer train|encode|decode` and `euler data prepare` through the command line."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import pytest

from euler_core.tokenizer import cli
from tokenizer_corpus import REPO, require_gpt2_ranks, stdlib_text


def run(argv, stdin: bytes = b"", capsys=None, monkeypatch=None):
    parser = argparse.ArgumentParser(prog="euler")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_commands(sub)
    args = parser.parse_args(argv)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    return args.func(args)


def test_train_encode_decode_roundtrip(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(stdlib_text(150_000, skip=1000))
    out = tmp_path / "tok.tiktoken"
    assert run(["tokenizer", "train", "--input", str(corpus), "--vocab-size", "500", "--out", str(out),
                "--no-progress"], monkeypatch=monkeypatch) == 0
    assert out.exists() and (tmp_path / "tok.tiktoken.json").exists()
    capsys.readouterr()
    text = "def f(x):\n    return x  # ünïcode 😀\r\n"
    assert run(["tokenizer", "encode", "--tokenizer", str(out)], stdin=text.encode(), monkeypatch=monkeypatch) == 0
    ids = capsys.readouterr().out
    assert all(0 <= int(i) < 500 for i in ids.split())
    (tmp_path / "ids.txt").write_text(ids)
    assert run(["tokenizer", "decode", "--tokenizer", str(out), "--input", str(tmp_path / "ids.txt")],
               monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out == text


def test_encode_decode_gpt2_and_invalid_utf8(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EULER_GPT2_RANKS", str(require_gpt2_ranks()))
    assert run(["tokenizer", "encode", "--tokenizer", "gpt2"], stdin=b"Hello world", monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out == "15496 995\n"
    raw = b"ok \xff\xfe bytes \xe2\x82"
    (tmp_path / "raw.bin").write_bytes(raw)
    run(["tokenizer", "encode", "--input", str(tmp_path / "raw.bin")], monkeypatch=monkeypatch)
    ids = capsys.readouterr().out
    out = subprocess.run([sys.executable, "-c", "import sys; from euler_core.tokenizer import cli; import argparse;"
                          "p=argparse.ArgumentParser(); s=p.add_subparsers(); cli.add_commands(s);"
                          "a=p.parse_args(['tokenizer','decode']); sys.exit(a.func(a))"],
                         input=ids.encode(), capture_output=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "EULER_GPT2_RANKS": str(require_gpt2_ranks())})
    assert out.returncode == 0 and out.stdout == raw, out.stderr
    with pytest.raises(ValueError, match="disallowed special token"):
        run(["tokenizer", "encode"], stdin=b"a<|endoftext|>", monkeypatch=monkeypatch)
    run(["tokenizer", "encode", "--specials", "allow"], stdin=b"a<|endoftext|>", monkeypatch=monkeypatch)
    assert capsys.readouterr().out == "64 50256\n"


def test_cli_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EULER_GPT2_RANKS", str(tmp_path / "nope.tiktoken"))
    with pytest.raises(FileNotFoundError, match="EULER_GPT2_RANKS=.*no such file"):
        run(["tokenizer", "encode"], stdin=b"x", monkeypatch=monkeypatch)
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("IQ== 0\nnot base64!! x\n")
    with pytest.raises(ValueError, match="bad.tiktoken, line 2: malformed"):
        run(["tokenizer", "encode", "--tokenizer", str(bad)], stdin=b"x", monkeypatch=monkeypatch)
    monkeypatch.setenv("EULER_GPT2_RANKS", str(bad))
    with pytest.raises(ValueError, match="is not GPT-2's"):
        run(["tokenizer", "encode"], stdin=b"x", monkeypatch=monkeypatch)
    (tmp_path / "c.txt").write_text("abc")
    with pytest.raises(SystemExit):
        run(["tokenizer", "train", "--input", str(tmp_path / "c.txt"), "--vocab-size", "100", "--out",
             str(tmp_path / "t.tiktoken")], monkeypatch=monkeypatch)
    assert "argument --vocab-size: 100 is not allowed: expected an integer >= 257" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a token id"):
        run(["tokenizer", "decode", "--tokenizer", "bytes"], stdin=b"1 2 x", monkeypatch=monkeypatch)


def test_through_the_main_cli(tmp_path):
    """`python -m euler_core.cli` wires these commands in (once the lead's CLI calls add_commands)."""
    main_cli = (REPO / "euler_core" / "cli.py").read_text()
    if "tokenizer.cli" not in main_cli and "add_commands" not in main_cli.replace("conformance_cli.add_commands", ""):
        pytest.skip("the main euler CLI does not wire in the tokenizer commands yet")
    corpus = tmp_path / "c.txt"
    corpus.write_text(stdlib_text(100_000, skip=1200))
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "euler_core.cli", "data", "prepare", "--input", str(corpus),
                        "--tokenizer", "bytes", "--out", str(tmp_path / "out"), "--no-progress"],
                       capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "data_train_000000.bin").exists()
    r = subprocess.run([sys.executable, "-m", "euler_core.cli", "tokenizer", "train", "--input", str(corpus),
                        "--vocab-size", "10", "--out", str(tmp_path / "t.tiktoken")], capture_output=True, text=True,
                       env=env, cwd=REPO)
    assert r.returncode == 2 and "--vocab-size: 10 is not allowed: expected an integer >= 257" in r.stderr
