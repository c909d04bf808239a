"""SFT: data formats and bad lines, the chat template and its special tokens, packing, exact loss
masking, and whole runs through `euler sft` / `euler chat` on the naive and numba backends."""

import io
import json

import numpy as np
import pytest

from euler_core.checkpoint import load_checkpoint, save_checkpoint
from euler_core.cli import main
from euler_core.config import preset
from euler_core.model import GPT
from euler_core.sft import (ChatTemplate, PackedSource, SFTConfig, SFTDataError, grow_vocabulary, pack,
                            prepare_tokenizer, read_jsonl, sft)
from euler_core.tokenizer import ByteTokenizer

quiet = dict(log=lambda *a: None)


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def template():
    return ChatTemplate(prepare_tokenizer(ByteTokenizer())[0])


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A small random model over bytes, saved as a pretraining checkpoint (context 64)."""
    run = tmp_path_factory.mktemp("base")
    model = GPT(preset("micro", vocab_size=256, block_size=64, n_embd=32, n_head=2, vocab_multiple=64),
                "naive", seed=0)
    save_checkpoint(run, 10, model, tokenizer=ByteTokenizer())
    return run


# ---- data ----------------------------------------------------------------------------------------
def test_three_record_shapes_become_messages(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"}]},
        {"prompt": "2+2?", "completion": "4"},
        {"instruction": "Reverse", "input": "abc", "output": "cba"},
        {"instruction": "Say yes", "output": "yes"},
    ])
    convs, problems = read_jsonl(path)
    assert problems == []
    assert [m["role"] for m in convs[0].messages] == ["system", "user", "assistant"]
    assert convs[1].messages == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    assert convs[2].messages[0]["content"] == "Reverse\n\nabc" and convs[3].messages[0]["content"] == "Say yes"


def test_bad_lines_are_reported_with_line_numbers_or_refused_with_strict(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"prompt": "a", "completion": "b"},
        "{not json",
        {"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]},
        "",
        {"messages": [{"role": "user", "content": "only a question"}]},
        {"prompt": "c"},
        {"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "late"},
                      {"role": "assistant", "content": "a"}]},
        {"prompt": "ok", "completion": 5},
        {"prompt": "d", "completion": "e"},
    ])
    convs, problems = read_jsonl(path)
    assert [c.line for c in convs] == [1, 9]
    assert [p.split(":")[1] for p in problems] == ["2", "3", "5", "6", "7", "8"]
    assert "not valid JSON" in problems[0] and "unknown role 'wizard'" in problems[1]
    assert "no assistant message" in problems[2] and "needs both" in problems[3]
    assert "system message may only come first" in problems[4] and "must be a string" in problems[5]
    with pytest.raises(SFTDataError, match=r"d.jsonl:2: not valid JSON.*--strict"):
        read_jsonl(path, strict=True)
    with pytest.raises(SFTDataError, match="no valid conversation"):
        read_jsonl(write_jsonl(tmp_path / "bad.jsonl", ["[1, 2]", "{}"]))


# ---- template and tokenizer ----------------------------------------------------------------------
def test_template_adds_special_tokens_and_masks_only_the_assistant(template):
    tok = template.tokenizer
    assert tok.n_vocab == 256 + 5 and tok.special_tokens["<|end|>"] == 260
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi <|end|>"},
            {"role": "assistant", "content": "yo"}, {"role": "user", "content": "?"},
            {"role": "assistant", "content": "k"}]
    ids, mask = template.encode(msgs)
    sp = tok.special_tokens
    assert ids[:3] == [sp["<|endoftext|>"], sp["<|system|>"], ord("s")]
    assert sp["<|end|>"] not in ids[6:ids.index(sp["<|assistant|>"]) - 1]  # typed "<|end|>" stays text
    trained = [tok.decode([i]) for i, m in zip(ids, mask) if m]
    assert trained == ["y", "o", "<|end|>", "k", "<|end|>"]
    assert template.prompt(msgs[:2])[-1] == sp["<|assistant|>"]
    assert prepare_tokenizer(tok)[1] == []  # already prepared: nothing added


def test_growing_the_vocabulary_keeps_old_rows_and_starts_new_ones_at_the_mean():
    config = preset("micro", vocab_size=50, vocab_multiple=16)  # padded 64
    model = GPT(config, "naive", seed=1)
    new_config, params = grow_vocabulary(config, model.named_parameters(), 70)
    wte, old = params["wte.weight"], model.params["wte.weight"]
    assert new_config.vocab_size == 70 and wte.shape == (80, config.n_embd)  # 70 padded to 80
    np.testing.assert_array_equal(wte[:50], old[:50])
    mean = old[:50].mean(axis=0)
    assert np.abs(wte[50:70] - mean).max() < 0.5 * np.abs(old[:50] - mean).max()
    assert not np.array_equal(wte[50], wte[51]) and (wte[70:] == 0).all()
    GPT(new_config, "naive", seed=None).load_parameters(params)  # fits the grown model


# ---- packing -------------------------------------------------------------------------------------
def test_packing_keeps_conversations_whole_and_skips_the_too_long():
    ex = [([1] * 4, [False] * 4), ([2] * 5, [True] * 5), ([3] * 12, [True] * 12), ([4] * 3, [True] * 3)]
    tokens, loss, skipped = pack(ex, T=8, pad_id=0)  # rows of 9
    assert skipped == 1
    assert tokens.tolist() == [[1, 1, 1, 1, 2, 2, 2, 2, 2], [4, 4, 4, 0, 0, 0, 0, 0, 0]]
    assert loss.sum() == 8 and not loss[1, 3:].any()
    src = PackedSource(tokens, loss, "t")
    x, y = src.batch(0, 2, 8, seed=0)
    assert x.shape == y.shape == (2, 8) and set(np.unique(y)) <= {-1, 2, 4}
    assert {tuple(r) for r in x.tolist()} == {tuple(r[:-1]) for r in tokens.tolist()}  # one epoch: each row once


# ---- loss masking is exact -----------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["naive", "numba"])
def test_prompt_targets_never_matter_and_assistant_targets_do(template, backend):
    convs = [[{"role": "user", "content": "what is 12 plus 7?"}, {"role": "assistant", "content": "19"}],
             [{"role": "system", "content": "terse"}, {"role": "user", "content": "reverse abc"},
              {"role": "assistant", "content": "cba"}]]
    tokens, loss, _ = pack([template.encode(m) for m in convs], T=63, pad_id=template.bos)
    model = GPT(preset("micro", vocab_size=261, block_size=64, n_embd=16, vocab_multiple=1), backend,
                dtype="float64", seed=2)

    def run(tokens_for_targets):
        x, _ = PackedSource(tokens, loss, "x", shuffle=False).batch(0, 1, 63, 0)          # inputs unchanged
        _, y = PackedSource(tokens_for_targets, loss, "y", shuffle=False).batch(0, 1, 63, 0)
        model.zero_grad()
        _, value = model.forward(x, y)
        model.backward()
        logits, _ = model.forward(x)  # with targets, a fused classifier (naive's) keeps no logits
        return value, model.flat_grads.copy(), logits, y

    base_loss, base_grads, logits, y = run(tokens)
    # the loss is the mean over exactly the assistant's tokens of -log p(target)
    p = logits[0] - logits[0].max(-1, keepdims=True)
    logp = p - np.log(np.exp(p).sum(-1, keepdims=True))
    where = np.flatnonzero(loss[0, 1:])
    assert (y[0] >= 0).sum() == len(where) == 2 + 1 + 3 + 1
    assert base_loss == pytest.approx(-logp[where, y[0, where]].mean(), rel=1e-12)
    prompt_pos = [j for j in range(63) if not loss[0, j + 1]]
    for j in prompt_pos[::5]:                      # a prompt token's target changes: nothing changes
        alt = tokens.copy()
        alt[0, j + 1] = (alt[0, j + 1] + 1) % 256
        value, grads, _, _ = run(alt)
        assert value == base_loss and np.array_equal(grads, base_grads)
    for j in where:                                # an assistant token's target changes: both change
        alt = tokens.copy()
        alt[0, j + 1] = (alt[0, j + 1] + 1) % 256
        value, grads, _, _ = run(alt)
        assert value != base_loss and not np.allclose(grads, base_grads)


# ---- whole runs ----------------------------------------------------------------------------------
def arithmetic(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"prompt": f"{a}+{b}=", "completion": str(a + b)} for a, b in rng.integers(0, 10, size=(n, 2))]


@pytest.mark.parametrize("backend", ["naive", "numba,attention=naive"])
def test_sft_run_writes_metrics_checkpoints_and_learns(base_run, tmp_path, backend):
    data = write_jsonl(tmp_path / "d.jsonl", arithmetic(120) + ["{broken", {"prompt": "x" * 200, "completion": "y"}])
    logs = []
    summary = sft(SFTConfig(init=str(base_run), data=str(data), out=str(tmp_path / "sft"), backend=backend,
                            batch_size=4, steps=30, lr=3e-3, eval_every=10, checkpoint_every=15, progress=False),
                  log=logs.append)
    text = "\n".join(logs)
    assert "d.jsonl:121: not valid JSON" in text and "skipped 1 conversation(s) longer than the context" in text
    records = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(30)) and "val_loss" in records[-1]
    assert summary["val_loss"] < summary["first_val_loss"] - 0.5
    ckpt = load_checkpoint(tmp_path / "sft")
    assert ckpt.meta["step"] == 30 and ckpt.meta["chat_template"]["end"] == "<|end|>"
    assert ckpt.config.vocab_size == 261 and ckpt.meta["data"]["bad_lines"] == 1
    assert "<|assistant|>" in ckpt.meta["tokenizer"]["special_tokens"]


def test_cli_sft_resume_chat_and_generate(base_run, tmp_path, monkeypatch, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", arithmetic(60))
    out = tmp_path / "sft"
    args = ["sft", "--init", str(base_run), "--data", str(data), "--out", str(out), "--batch-size", "4",
            "--eval-every", "5", "--checkpoint-every", "5", "--no-progress", "--lr", "3e-3"]
    assert main(args + ["--steps", "5"]) == 0
    capsys.readouterr()
    assert main(["sft", "--resume", "--out", str(out), "--steps", "10", "--lr", "0.1"]) == 2  # the run's own lr
    assert "cannot change --lr 0.1 (the run's is 0.003)" in capsys.readouterr().err
    write_jsonl(data, arithmetic(61))  # the data changed: its batches would not be the run's
    assert main(["sft", "--resume", "--out", str(out), "--steps", "10"]) == 2
    assert "the data changed since" in capsys.readouterr().err
    write_jsonl(data, arithmetic(60))
    assert main(["sft", "--resume", "--out", str(out), "--steps", "10", "--no-progress"]) == 0
    assert load_checkpoint(out).meta["step"] == 10
    monkeypatch.setattr("sys.stdin", io.StringIO("1+2=\n/reset\n3+4=\n/quit\n"))
    assert main(["chat", "--checkpoint", str(out), "--temperature", "0", "--max-new-tokens", "8"]) == 0
    said = capsys.readouterr().out
    assert said.count("assistant> ") == 2 and "(conversation reset)" in said
    assert main(["generate", "--checkpoint", str(out), "--prompt", "1+", "--max-new-tokens", "5"]) == 0
    assert main(["chat", "--checkpoint", str(base_run)]) == 2  # not fine-tuned: a clear error
    assert "euler sft" in capsys.readouterr().err
    bad = write_jsonl(tmp_path / "bad.jsonl", arithmetic(3) + ["{oops"])
    assert main(["sft", "--init", str(base_run), "--data", str(bad), "--out", str(tmp_path / "s2"), "--strict",
                 "--no-progress"]) == 2
    assert "bad.jsonl:4: not valid JSON" in capsys.readouterr().err


def test_sft_switches_given_false_reach_the_config(monkeypatch, tmp_path):
    """`euler sft --no-graph` turns the CUDA graph off as `euler train --no-graph` does (a switch given
    as False is given; the SFT command once dropped it with the flags left unset)."""
    import euler_core.sft.run as sft_run
    seen = {}

    def fake_sft(cfg):
        seen["cfg"] = cfg
        return {"steps": 0}

    monkeypatch.setattr(sft_run, "sft", fake_sft)
    monkeypatch.setattr("euler_core.train.describe_summary", lambda summary: "done")
    assert main(["sft", "--init", str(tmp_path), "--data", str(tmp_path / "x.jsonl"), "--no-graph",
                 "--no-progress"]) == 0
    assert seen["cfg"].graph is False and seen["cfg"].strict is False and seen["cfg"].progress is False
