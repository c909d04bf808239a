"""Training end to end on the micro preset: metrics, schedule, checkpoints, resume after a kill,
and clear errors for corrupt inputs."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from euler_core.checkpoint import CheckpointError, load_checkpoint
from euler_core.cli import main
from euler_core.config import preset
from euler_core.model import GPT
from euler_core.optim import learning_rate
from euler_core.train import TrainConfig, train


def micro_config(shards, out, **kw):
    train_data, val_data = shards
    base = dict(preset="micro", train_data=train_data, val_data=val_data, vocab_size=64, batch_size=4,
                steps=12, lr=1e-2, warmup=2, eval_every=4, eval_batches=2, checkpoint_every=4, out=str(out),
                progress=False)
    base.update(kw)
    return TrainConfig(**base)


def read_metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_training_writes_metrics_and_checkpoints_and_learns(shards, tmp_path):
    summary = train(micro_config(shards, tmp_path / "run", steps=40, eval_every=10), log=lambda *a: None)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(40))
    assert all({"loss", "lr", "grad_norm", "tokens_per_s"} <= set(r) for r in records)
    assert [r["step"] for r in records if "val_loss" in r] == [0, 10, 20, 30, 39]
    assert summary["val_loss"] < summary["first_val_loss"] - 0.5
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.meta["step"] == 40 and ckpt.optimizer["step"] == 40
    assert sorted(p.name for p in (tmp_path / "run").glob("step_*")) == ["step_000036", "step_000040"]


def test_learning_rate_schedule():
    assert learning_rate(0, 1.0, 10, 100) == pytest.approx(0.1)
    assert learning_rate(9, 1.0, 10, 100) == pytest.approx(1.0)
    assert learning_rate(10, 1.0, 10, 100) == pytest.approx(1.0)
    assert learning_rate(55, 1.0, 10, 100) == pytest.approx(0.55)  # halfway down the cosine
    assert learning_rate(100, 1.0, 10, 100) == pytest.approx(0.1)


def test_gradient_accumulation_equals_the_full_batch():
    model = GPT(preset("micro"), "naive", dtype="float64", seed=0)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 64, (4, 8)), rng.integers(0, 64, (4, 8))
    model.zero_grad()
    model.forward(x, y)
    model.backward()
    full = model.flat_grads.copy()
    model.zero_grad()
    for half in (slice(0, 2), slice(2, 4)):
        model.forward(x[half], y[half], loss_scale=0.5)
        model.backward()
    np.testing.assert_allclose(model.flat_grads, full, rtol=1e-10, atol=1e-14)


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "euler_core.cli", *args], capture_output=True, text=True, **kw)


def test_resume_after_kill_reproduces_the_uninterrupted_losses(shards, tmp_path):
    common = ["train", "--preset", "micro", "--train-data", shards[0], "--val-data", shards[1], "--vocab-size", "64",
              "--batch-size", "4", "--steps", "30", "--lr", "0.01", "--warmup", "2", "--eval-every", "10",
              "--eval-batches", "2", "--checkpoint-every", "3", "--no-progress"]
    straight = tmp_path / "straight"
    assert run_cli(*common, "--out", str(straight)).returncode == 0

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "euler_core.cli", *common, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait for a checkpoint past the first, then kill without warning
        latest = killed / "latest"
        if latest.exists() and latest.read_text().strip() >= "step_000009":
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed_from = load_checkpoint(killed).meta["step"]
    assert 9 <= resumed_from < 30, "the kill should land mid-run"
    result = run_cli("train", "--resume", "--out", str(killed), "--steps", "30", "--no-progress")
    assert result.returncode == 0, result.stderr
    a, b = read_metrics(straight), read_metrics(killed)
    assert [r["step"] for r in b] == list(range(30))
    for ra, rb in zip(a, b):
        assert ra["loss"] == rb["loss"], f"step {ra['step']}: {ra['loss']} vs {rb['loss']}"
        assert ra.get("val_loss") == rb.get("val_loss")
    np.testing.assert_array_equal(load_checkpoint(straight).params["wte.weight"],
                                  load_checkpoint(killed).params["wte.weight"])


def test_existing_run_needs_resume(shards, tmp_path):
    train(micro_config(shards, tmp_path / "run", steps=2), log=lambda *a: None)
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        train(micro_config(shards, tmp_path / "run", steps=2), log=lambda *a: None)


def test_corrupt_and_truncated_checkpoints_are_clear_errors(shards, tmp_path, capsys):
    train(micro_config(shards, tmp_path / "run", steps=4), log=lambda *a: None)
    ckpt = tmp_path / "run" / "step_000004"
    data = (ckpt / "model.npz").read_bytes()
    (ckpt / "model.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "run")
    assert main(["generate", "--checkpoint", str(tmp_path / "run")]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    (ckpt / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="no such directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_checkpoint_with_wrong_shapes_is_refused(shards, tmp_path):
    train(micro_config(shards, tmp_path / "run", steps=2), log=lambda *a: None)
    ckpt = tmp_path / "run" / "step_000002"
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["config"]["n_embd"] = 32
    (ckpt / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"wte.weight has shape \(64, 16\), config expects \(64, 32\)"):
        load_checkpoint(ckpt)


def test_bad_shards_are_clear_errors(shards, tmp_path, capsys):
    bad = tmp_path / "bad_train.bin"
    raw = bytearray(open(shards[0], "rb").read())
    raw[0:4] = (12345).to_bytes(4, "little")
    bad.write_bytes(bytes(raw))
    assert main(["train", "--preset", "micro", "--train-data", str(bad), "--val-data", shards[1],
                 "--vocab-size", "64", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "magic number 12345, expected 20240520" in capsys.readouterr().err
    short = tmp_path / "short_train.bin"
    short.write_bytes(open(shards[0], "rb").read()[:5000])
    assert main(["train", "--preset", "micro", "--train-data", str(short), "--val-data", shards[1],
                 "--vocab-size", "64", "--out", str(tmp_path / "r2"), "--no-progress"]) == 2
    assert "truncated" in capsys.readouterr().err


def test_unknown_backend_exits_2_listing_what_exists(capsys):
    assert main(["train", "--backend", "attention=nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'nope'" in err and "naive" in err and "attention" in err and "layernorm" in err


def test_generate_from_a_checkpoint(tmp_path):
    """The default corpus and byte tokenizer end to end (a few steps), then `euler generate`."""
    out = tmp_path / "run"
    result = run_cli("train", "--preset", "micro", "--steps", "3", "--eval-every", "2", "--eval-batches", "1",
                     "--sample-tokens", "5", "--out", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "sample:" in result.stdout
    result = run_cli("generate", "--checkpoint", str(out), "--prompt", "import ", "--max-new-tokens", "12",
                     "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("import ") and len(result.stdout) > len("import ")
    again = run_cli("generate", "--checkpoint", str(out), "--prompt", "import ", "--max-new-tokens", "12",
                    "--seed", "1")
    assert again.stdout == result.stdout, "a seed must make sampling repeatable"


def test_backends_lists_variants_with_availability(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    for op in ("embedding", "layernorm", "matmul", "attention", "gelu", "residual", "crossentropy", "adamw"):
        assert f"naive      {op}" in out
    assert "yes" in out


def test_token_ids_beyond_the_vocabulary_are_a_clear_error(tmp_path, capsys):
    from euler_core.data.shards import write_shard
    tokens = np.arange(5000) % 64
    tokens[::7] = 70  # ids the 64-token model cannot embed
    train_path = write_shard(tmp_path / "x_train.bin", tokens)
    val_path = write_shard(tmp_path / "x_val.bin", tokens[:1000])
    assert main(["train", "--preset", "micro", "--train-data", str(train_path), "--val-data", str(val_path),
                 "--vocab-size", "64", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "x_val.bin: token id 70 at token position 539 is outside the vocabulary of 64" in err


def _watch_the_order(monkeypatch, events):
    """Record each TrainStep.run (by the step it runs) and each first read of a StepResult."""
    from euler_core import step as step_module
    run, read = step_module.TrainStep.run, step_module.StepResult._read

    def logged_run(self, batches, lr):
        events.append(("run", self.optimizer.step_count))
        return run(self, batches, lr)

    def logged_read(self):
        if self._loss is None:
            events.append(("read", self.step - 1))
        return read(self)
    monkeypatch.setattr(step_module.TrainStep, "run", logged_run)
    monkeypatch.setattr(step_module.StepResult, "_read", logged_read)


def _without_times(records):
    return [{k: v for k, v in r.items() if k not in ("time_s", "tokens_per_s")} for r in records]


def test_the_loop_reads_each_step_while_the_next_runs(shards, tmp_path, monkeypatch):
    """With the overlap on (what a GPU with captured graphs gets), step k+1 is queued before step k's
    result is read, except where the weights are read or saved next (an evaluation before step 4, 8
    and 11, a checkpoint after step 3, 7 and 11, the last step); the records and the weights are
    those of the loop without the overlap."""
    train(micro_config(shards, tmp_path / "plain"), log=lambda *a: None)
    events = []
    _watch_the_order(monkeypatch, events)
    monkeypatch.setattr("euler_core.train.overlaps", lambda trainer: True)
    train(micro_config(shards, tmp_path / "overlapped"), log=lambda *a: None)
    assert _without_times(read_metrics(tmp_path / "overlapped")) == _without_times(read_metrics(tmp_path / "plain"))
    np.testing.assert_array_equal(load_checkpoint(tmp_path / "overlapped").params["wte.weight"],
                                  load_checkpoint(tmp_path / "plain").params["wte.weight"])
    read_before_next = [k for k in range(11) if events.index(("read", k)) < events.index(("run", k + 1))]
    assert read_before_next == [3, 7, 10]


def test_a_stop_while_a_step_is_queued_saves_it_and_resumes_alike(shards, tmp_path, monkeypatch):
    """SIGINT arrives inside step 5's launch with step 4 unread: both are read and recorded, the
    checkpoint is at step 6, and the resumed run's records equal an uninterrupted run's."""
    import os

    from euler_core import step as step_module
    from euler_core.rundir import StopRequested
    from euler_core.train import resume_training
    train(micro_config(shards, tmp_path / "plain", checkpoint_every=0, eval_every=0), log=lambda *a: None)
    monkeypatch.setattr("euler_core.train.overlaps", lambda trainer: True)
    run = step_module.TrainStep.run

    def interrupted_at_5(self, batches, lr):
        if self.optimizer.step_count == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return run(self, batches, lr)
    monkeypatch.setattr(step_module.TrainStep, "run", interrupted_at_5)
    with pytest.raises(StopRequested):
        train(micro_config(shards, tmp_path / "run", checkpoint_every=0, eval_every=0), log=lambda *a: None)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == list(range(6))
    assert load_checkpoint(tmp_path / "run").meta["step"] == 6
    monkeypatch.setattr(step_module.TrainStep, "run", run)
    resume_training(tmp_path / "run", {"progress": False}, log=lambda *a: None)
    assert _without_times(read_metrics(tmp_path / "run")) == _without_times(read_metrics(tmp_path / "plain"))


@pytest.mark.parametrize("overlap", [False, True])
def test_a_diverged_loss_saves_the_completed_steps_unless_a_later_step_ran(shards, tmp_path, monkeypatch, overlap):
    """A NaN at step 5 (its update skipped on the device): without the overlap the 5 completed steps
    are saved; with it, step 6 was already queued when step 5 was read, so nothing is saved (the
    weights may hold step 6's update) and the newest checkpoint, step 4's, stands."""
    from euler_core import step as step_module
    monkeypatch.setattr("euler_core.train.overlaps", lambda trainer: overlap)
    check = step_module.StepResult.check

    def diverges_at_5(self):
        if self.step - 1 == 5:
            self.trainer.optimizer.step_count = self.step - 1  # as check() does: the update was skipped
            raise FloatingPointError("step 5: loss nan (planted)")
        return check(self)
    monkeypatch.setattr(step_module.StepResult, "check", diverges_at_5)
    with pytest.raises(FloatingPointError, match="planted"):
        train(micro_config(shards, tmp_path / "run", checkpoint_every=4, eval_every=0), log=lambda *a: None)
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == list(range(5))
    assert load_checkpoint(tmp_path / "run").meta["step"] == (4 if overlap else 5)
