"""Nothing lost: kills, signals, full disks and a second process against a run directory (issue 16,
items 1-5, 9, 11-14 and SIGTERM). Kills and full disks strike at chosen writes through an audit hook
in a forked child (tests/faults.py), so they test whatever code writes the files."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from euler_core.checkpoint import load_checkpoint, save_checkpoint
from euler_core.cli import main
from faults import KILLED, Fault, in_child

STEPS = 3


def args_for(shards, out, steps=STEPS, **flags):
    """`euler train` on the micro model (out None: the default run directory)."""
    base = {"preset": "micro", "train-data": shards[0], "val-data": shards[1], "vocab-size": 64, "batch-size": 4,
            "steps": steps, "lr": 0.01, "warmup": 2, "eval-every": 2, "eval-batches": 2, "checkpoint-every": 1,
            "out": out}
    base.update(flags)
    return ["train", *[a for k, v in base.items() if v is not None for a in (f"--{k}", str(v))], "--no-progress"]


def steps_on_disk(run):
    """The step of every metrics line that parses (a torn last line does not)."""
    steps = []
    for line in (Path(run) / "metrics.jsonl").read_text(errors="replace").splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            pass
    return steps


def records(run):
    """(step, loss, val_loss, lr, grad_norm) of every metrics line: what a resume must reproduce."""
    lines = (Path(run) / "metrics.jsonl").read_text().splitlines()
    return [tuple(json.loads(line).get(k) for k in ("step", "loss", "val_loss", "lr", "grad_norm")) for line in lines]


@pytest.fixture
def no_fsync(monkeypatch):
    """fsync guards against power loss, which these tests do not play; a kill or a full disk does not
    need it, and it costs 10-20 ms a call here (a few seconds over a walk of every write)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run, and the shards it trained on."""
    from conftest import make_shards
    root = tmp_path_factory.mktemp("straight")
    shards = make_shards(root)
    assert main(args_for(shards, root / "run")) == 0
    return shards, root / "run"


def continue_as_a_user_would(shards, run, capsys):
    """--resume when the run holds a checkpoint (or what looks like one); else start it again."""
    capsys.readouterr()
    if run.exists() and ((run / "latest").exists() or list(run.glob("step_*"))):
        rc = main(["train", "--resume", "--out", str(run), "--no-progress"])
    else:
        rc = main(args_for(shards, run))
    return rc, capsys.readouterr().err


def hidden_leftovers(directory):
    """Hidden entries (temporary files, trash folders) that interrupted writes left behind."""
    directory = Path(directory)
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) if directory.exists() else []


def assert_same_as_straight(run, straight_run):
    assert records(run) == records(straight_run)
    np.testing.assert_array_equal(load_checkpoint(run).params["wte.weight"],
                                  load_checkpoint(straight_run).params["wte.weight"])
    assert hidden_leftovers(run) == [], "temporary leftovers of the interrupted writes were not cleaned"


def test_a_kill_at_any_write_of_a_run_resumes_to_the_same_losses(straight, tmp_path, capsys, no_fsync):
    """Must show: kill -9 at every write of a checkpoint or of metrics.jsonl (and mid-write, for
    every open), then resume: the same losses as the uninterrupted run, no step lost or doubled."""
    shards, straight_run = straight
    counted = in_child(lambda: main(args_for(shards, tmp_path / "count")), tmp_path / "count")
    assert counted["status"] == 0, counted
    ops = counted["ops"]
    kinds = {event for event, _ in ops}
    assert {"open", "os.rename", "os.mkdir", "os.remove"} <= kinds and \
        any(path == "metrics.jsonl" for _, path in ops), ops
    # mid-write kills where a file is written under its own name (a temporary one is as good as
    # gone until its rename, which the plain kills cover)
    faults = [Fault("kill", k) for k in range(len(ops))] + \
             [Fault("kill-torn", k) for k, (event, path) in enumerate(ops)
              if event == "open" and not Path(path).name.startswith(".")]
    for fault in faults:
        run = tmp_path / f"{fault.kind}-{fault.at}"
        killed = in_child(lambda: main(args_for(shards, run)), run, fault)
        assert killed["status"] == KILLED, (fault, ops[fault.at], killed)
        rc, err = continue_as_a_user_would(shards, run, capsys)
        assert rc == 0, (fault, ops[fault.at], err)
        assert_same_as_straight(run, straight_run)


def killed_after_a_step_before_its_checkpoint(shards, run):
    """A run killed (-9) after step 2's metrics write, before its checkpoint: checkpoint step 2,
    metrics of steps 0-2."""
    count = run.with_name("count-" + run.name)
    ops = in_child(lambda: main(args_for(shards, count)), count)["ops"]
    at = next(k for k, (event, path) in enumerate(ops) if event == "os.mkdir" and path.startswith(".step_000003"))
    in_child(lambda: main(args_for(shards, run)), run, Fault("kill", at))


def test_a_kill_during_the_resumes_own_writes_loses_no_metrics(straight, tmp_path, capsys, no_fsync):
    """Item 2: --resume rewrote metrics.jsonl in place, and a kill during the rewrite emptied it (then
    the next resume exited 0 with the early steps gone). Kill the resume at each of its first writes,
    where it drops the records past its checkpoint, and mid-write."""
    shards, straight_run = straight
    template = tmp_path / "template"
    killed_after_a_step_before_its_checkpoint(shards, template)
    assert load_checkpoint(template).meta["step"] == 2 and steps_on_disk(template) == [0, 1, 2]
    shutil.copytree(template, tmp_path / "probe")
    counted = in_child(lambda: main(["train", "--resume", "--out", str(tmp_path / "probe"), "--no-progress"]),
                       tmp_path / "probe")
    assert counted["status"] == 0, counted
    # its writes up to the first open of metrics.jsonl itself: the setup, and the rewrite that drops
    # the record of step 2 (in place, or as a temporary file renamed over it)
    first = counted["ops"][:counted["ops"].index(["open", "metrics.jsonl"]) + 1]
    for k in range(len(first)):
        for kind in ("kill", "kill-torn") if first[k][0] == "open" and not Path(first[k][1]).name.startswith(".") \
                else ("kill",):
            run = tmp_path / f"{kind}-{k}"
            shutil.copytree(template, run)
            in_child(lambda: main(["train", "--resume", "--out", str(run), "--no-progress"]), run, Fault(kind, k))
            assert steps_on_disk(run)[:2] == [0, 1], f"{kind} at {first[k]}: the records of steps 0-1 were lost"
            rc, err = continue_as_a_user_would(shards, run, capsys)
            assert rc == 0, err
            assert_same_as_straight(run, straight_run)


def test_a_full_disk_at_any_write_is_a_message_and_costs_nothing(straight, tmp_path, capsys, no_fsync):
    """Item 5: a full disk tore the last metrics line (then every --resume failed with a JSON error
    naming no file), a full disk during a checkpoint was a raw OSError traceback, and each try left a
    .step_N.tmpPID eating the space. ENOSPC at each write: a message, nothing left behind, and once
    space is free the run resumes to the same losses."""
    shards, straight_run = straight
    counted = in_child(lambda: main(args_for(shards, tmp_path / "count")), tmp_path / "count")
    taking_space = [k for k, (event, _) in enumerate(counted["ops"]) if event in ("open", "os.mkdir", "os.rename")]
    for k in taking_space:
        run = tmp_path / f"full-{k}"
        full = in_child(lambda: main(args_for(shards, run)), run, Fault("enospc", k))
        what = (counted["ops"][k], full["output"][-600:])
        assert full["error"] is None and full["result"] == "2", what  # exit status 2, no traceback
        assert "No space left on device" in full["output"], what
        assert hidden_leftovers(run) == [], what
        rc, err = continue_as_a_user_would(shards, run, capsys)
        assert rc == 0, (what, err)
        assert_same_as_straight(run, straight_run)


def _can_mount_tmpfs() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare command"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>&1 || "
                            "mount -t tmpfs -o size=64k tmpfs /tmp 2>&1"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a user namespace ({probe.stdout.strip()})"


def test_a_real_full_disk_then_freed_space_resumes(straight, tmp_path):
    """Item 5 on a real file system: a 160 KB tmpfs holds one checkpoint of the micro model but not
    two; the run stops with a message naming the full disk, leaves no temporary folder, and resumes
    to the same losses once the tmpfs is made larger. (A user namespace: no root needed.)"""
    reason = _can_mount_tmpfs()
    if reason:
        pytest.skip(reason)
    shards, straight_run = straight
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cli = [sys.executable, "-m", "euler_core.cli"]
    first = " ".join(cli + args_for(shards, mnt / "run", **{"checkpoint-every": 2}))
    resume = " ".join(cli + ["train", "--resume", "--out", str(mnt / "run"), "--no-progress"])
    script = f"""
        mount -t tmpfs -o size=160k tmpfs {mnt} || exit 99
        {first} > {tmp_path}/first.out 2>&1; echo "first=$?"
        ls -a {mnt}/run > {tmp_path}/listing
        mount -o remount,size=2m {mnt}
        {resume} > {tmp_path}/resume.out 2>&1; echo "resume=$?"
        cp {mnt}/run/metrics.jsonl {tmp_path}/metrics.jsonl
        cp -r {mnt}/run {tmp_path}/run
    """
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).parent.parent)
    first_out = (tmp_path / "first.out").read_text()
    assert "first=2" in result.stdout and "No space left on device" in first_out, (result.stdout, first_out)
    assert "Traceback" not in first_out
    assert not [n for n in (tmp_path / "listing").read_text().split() if n.startswith(".") and n not in (".", "..")], \
        (tmp_path / "listing").read_text()
    assert "resume=0" in result.stdout, (tmp_path / "resume.out").read_text()
    assert records(tmp_path / "run") == records(straight_run)


def test_ctrl_c_after_a_checkpoint_and_again_during_a_delete_keeps_a_complete_checkpoint(straight, tmp_path,
                                                                                         monkeypatch):
    """Item 1: Ctrl-C just after a periodic checkpoint made the handler re-save that step, deleting
    the step_N that `latest` named before the new copy was in; a second Ctrl-C during the delete
    left step_N holding only model.npz. Here: SIGINT right after the checkpoint of step 2, and a
    second SIGINT inside the first directory deletion after it."""
    shards, straight_run = straight
    import euler_core.train as train_module
    real_save, real_rmtree = train_module.save_checkpoint, shutil.rmtree
    state = {"armed": False}

    def save_then_ctrl_c(run_dir, step, *a, **kw):
        path = real_save(run_dir, step, *a, **kw)
        if step == 2 and state["armed"] is False:
            state["armed"] = True
            os.kill(os.getpid(), signal.SIGINT)
        return path

    def rmtree_interrupted(path, *a, **kw):
        if state["armed"]:
            state["armed"] = None
            victims = sorted(Path(path).iterdir())
            if victims:
                victims[-1].unlink()  # half deleted, then the second Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
        return real_rmtree(path, *a, **kw)

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_ctrl_c)
    monkeypatch.setattr(shutil, "rmtree", rmtree_interrupted)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        main_raising(args_for(shards, run))
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    ckpt = load_checkpoint(run)  # complete: every file there
    assert ckpt.meta["step"] >= 2 and ckpt.optimizer is not None
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 0
    assert_same_as_straight(run, straight_run)


def main_raising(argv):
    """The command's handler without main()'s catch-all, so an interrupt reaches the test."""
    from euler_core.cli import build_parser
    args = build_parser().parse_args(argv)
    return args.func(args)


def test_sigterm_saves_the_completed_steps_like_ctrl_c(straight, tmp_path):
    """Item 16: SIGTERM (a batch scheduler's stop signal) saved nothing. Now it stops the run after
    the step in progress, saves it, and exits 143; the resume reproduces the uninterrupted losses."""
    shards, _ = straight
    steps, flags = 60, {"checkpoint-every": 1000, "eval-every": 0}
    straight_run = tmp_path / "straight"
    assert main(args_for(shards, straight_run, steps=steps, **flags)) == 0
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "euler_core.cli", *args_for(shards, run, steps=steps, **flags)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).parent.parent)
    deadline = time.time() + 60
    while time.time() < deadline and not (run / "metrics.jsonl").exists():
        time.sleep(0.01)
    while time.time() < deadline and len((run / "metrics.jsonl").read_text().splitlines()) < 5:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "SIGTERM: stopping after the step in progress" in output and "stopped after step" in output, output
    stopped_at = load_checkpoint(run).meta["step"]
    assert 5 <= stopped_at < steps and len(records(run)) == stopped_at, "every completed step saved, none lost"
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 0
    assert records(run) == records(straight_run)


def test_one_process_per_run_directory(straight, tmp_path, capsys, monkeypatch):
    """Item 3: two `euler train` on one --out both ran (metrics held every step twice), and two with
    no --out started in the same second shared a directory."""
    shards, _ = straight
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "euler_core.cli", *args_for(shards, run, steps=3000)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parent.parent)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (run / "metrics.jsonl").exists():
            time.sleep(0.01)
        for argv in (args_for(shards, run), ["train", "--resume", "--out", str(run)]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"{run} is in use by another process (pid {proc.pid}" in err, err
    finally:
        proc.kill()
        proc.wait()
    # the default directory: a fixed clock stands for two starts in the same second
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda pattern, *a: pattern.replace("%Y%m%d-%H%M%S", "20261201-120000"))
    for _ in range(2):
        assert main(args_for(shards, None, steps=1)) == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["20261201-120000", "20261201-120000-2"]


def test_data_prepare_replaces_the_previous_data_set_and_a_failure_keeps_it(tmp_path, capsys):
    """Item 4: a prepare into a folder left the old shards there (a glob then trained on 2,772 stale
    shards), and a prepare that failed still overwrote data_val_000000.bin."""
    text = tmp_path / "a.txt"
    text.write_text("".join(f"line {i} of some text\n" for i in range(3000)))
    out = tmp_path / "data"
    base = ["data", "prepare", "--input", str(text), "--tokenizer", "bytes", "--out", str(out), "--no-progress"]
    assert main(base + ["--shard-tokens", "5000"]) == 0
    assert len(list(out.glob("data_train_*.bin"))) > 5
    assert main(base) == 0
    assert sorted(p.name for p in out.glob("data_*.bin")) == ["data_train_000000.bin", "data_val_000000.bin"]
    assert "removed" in capsys.readouterr().err
    def data_files():  # the lock is left out: it records the last holder, to the second
        return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "lock"}

    before = data_files()
    one_line = tmp_path / "one.txt"
    one_line.write_text("no line break anywhere " * 50)
    assert main(["data", "prepare", "--input", str(one_line), "--tokenizer", "bytes", "--out", str(out),
                 "--val-fraction", "0.5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "training split is empty" in err and "line break" in err, err  # item 16: the cause named
    assert data_files() == before and hidden_leftovers(out) == []


def test_resume_takes_the_runs_settings_and_refuses_other_changes(straight, tmp_path, capsys, monkeypatch):
    """Item 9: --resume without --steps trained to the default 500 (not the run's total), and every
    other flag given with --resume (--lr, --batch-size, --backend) was ignored without a word."""
    shards, straight_run = straight
    import euler_core.train as train_module
    real_lr = train_module.learning_rate

    def ctrl_c_at_step_1(step, *a):
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real_lr(step, *a)

    monkeypatch.setattr(train_module, "learning_rate", ctrl_c_at_step_1)
    run = tmp_path / "run"
    assert main(args_for(shards, run)) == 130
    monkeypatch.setattr(train_module, "learning_rate", real_lr)
    assert load_checkpoint(run).meta["step"] < STEPS
    capsys.readouterr()
    for flag, value in (("--lr", "0.5"), ("--batch-size", "2"), ("--seed", "7"), ("--warmup", "0")):
        assert main(["train", "--resume", "--out", str(run), flag, value]) == 2
        err = capsys.readouterr().err
        assert f"cannot change {flag} {value}" in err and "may change only --backend, --no-graph" in err, err
    capsys.readouterr()
    assert main(["train", "--resume", "--out", str(run), "--lr", "0.01", "--eval-every", "2", "--no-progress",
                 "--backend", "naive,attention=naive"]) == 0
    assert "kernels: --backend naive,attention=naive;" in capsys.readouterr().out  # a change it may make, made
    assert records(run) == records(straight_run)  # the run's own 3 steps, its schedule, its settings


@pytest.fixture
def small_default_corpus(monkeypatch):
    """The embedded default corpus, made small (its 3 MB take seconds to read and tokenise)."""
    import euler_core.corpus
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}  # a line of code\n" for i in range(1500))
    monkeypatch.setattr(euler_core.corpus, "default_corpus", lambda: text)
    return text


def test_resume_uses_the_checkpoints_tokenizer_not_the_cache(tmp_path, capsys, monkeypatch, small_default_corpus):
    """Item 11: --resume rebuilt the tokenizer from the user's cache; with a damaged cache file the
    resumed run tokenised differently and exited 0 with other losses."""
    monkeypatch.setenv("EULER_CACHE_DIR", str(tmp_path / "cache"))
    common = ["train", "--preset", "micro", "--vocab-size", "300", "--steps", "4", "--batch-size", "2",
              "--eval-every", "2", "--eval-batches", "1", "--checkpoint-every", "2", "--sample-tokens", "2",
              "--no-progress"]
    assert main(common + ["--out", str(tmp_path / "straight")]) == 0
    import euler_core.train as train_module
    real_lr = train_module.learning_rate
    def ctrl_c_at_step_2(step, *a):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_lr(step, *a)

    monkeypatch.setattr(train_module, "learning_rate", ctrl_c_at_step_2)
    run = tmp_path / "run"
    assert main(common + ["--out", str(run)]) == 130
    monkeypatch.setattr(train_module, "learning_rate", real_lr)
    swap_ranks_of_a_and_b(next((tmp_path / "cache" / "tokenizers").glob("*.tiktoken")))
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 0
    assert records(run) == records(tmp_path / "straight")


def swap_ranks_of_a_and_b(path):
    """Damage a .tiktoken file so that it still loads: the bytes 'a' and 'b' trade ids."""
    lines = path.read_bytes().splitlines()
    a, b = lines[ord("a")].split(), lines[ord("b")].split()
    assert (a[1], b[1]) == (b"97", b"98")
    lines[ord("a")], lines[ord("b")] = a[0] + b" " + b[1], b[0] + b" " + a[1]
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_default_tokenizer_cache_that_changed_is_trained_again(tmp_path):
    """Item 11, for new runs: a cache entry edited or damaged after it was written is not used."""
    from euler_core.tokenizer import default_tokenizer
    text = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(400))
    first = default_tokenizer(text, 300, cache_dir=tmp_path)
    swap_ranks_of_a_and_b(next((tmp_path / "tokenizers").glob("*.tiktoken")))
    assert default_tokenizer(text, 300, cache_dir=tmp_path).mergeable_ranks == first.mergeable_ranks


class _Weights:
    def __init__(self):
        from euler_core.config import preset
        from euler_core.model import parameter_layout
        self.config, self.dtype = preset("micro"), "float32"
        self.params = {n: np.zeros(s, np.float32) for n, s in parameter_layout(self.config)}

    def named_parameters(self):
        return self.params


def test_old_checkpoints_are_pruned_by_step_number(tmp_path):
    """Item 12: pruning sorted names as text, so from step 1,000,000 on the newest was deleted and
    step_999990 kept for ever."""
    for step in (999_980, 999_990, 1_000_000, 1_000_010):
        save_checkpoint(tmp_path, step, _Weights())
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_1000000", "step_1000010"]
    assert load_checkpoint(tmp_path).meta["step"] == 1_000_010


def test_no_validation_and_a_finished_run_end_with_a_summary(straight, tmp_path, capsys):
    """Item 13: --eval-every 0 ("never") ended with "unsupported format string passed to
    NoneType.__format__" and exit 2 after training; resuming a finished run did the same."""
    shards, _ = straight
    run = tmp_path / "run"
    assert main(args_for(shards, run, steps=2, **{"eval-every": 0})) == 0
    assert "finished 2 steps: no validation loss (--eval-every 0)" in capsys.readouterr().out
    assert main(["train", "--resume", "--out", str(run), "--no-progress"]) == 0
    assert "nothing to do: the run had completed its 2 steps" in capsys.readouterr().out
    assert main(["train", "--resume", "--out", str(run), "--steps", "3", "--no-progress"]) == 0
    assert [r[0] for r in records(run)] == [0, 1, 2]


def test_sample_prompt_is_checked_before_training(tmp_path, capsys, monkeypatch, small_default_corpus):
    """Item 14: an empty --sample-prompt (or one that is only <|endoftext|>) was checked only at the
    first sample: with --sample-every 1 the run died at step 1 with no checkpoint."""
    monkeypatch.setenv("EULER_CACHE_DIR", str(tmp_path / "cache"))
    common = ["train", "--preset", "micro", "--vocab-size", "300", "--steps", "2", "--batch-size", "2",
              "--eval-every", "0", "--sample-every", "1", "--sample-tokens", "3", "--no-progress"]
    with pytest.raises(SystemExit):
        main(common + ["--out", str(tmp_path / "a"), "--sample-prompt", ""])
    assert "argument --sample-prompt: '' is not allowed: expected a non-empty string" in capsys.readouterr().err
    assert not (tmp_path / "a" / "metrics.jsonl").exists()
    # <|endoftext|> alone is GPT-2's unconditional prompt: encoded as the special token, it samples
    assert main(common + ["--out", str(tmp_path / "b"), "--sample-prompt", "<|endoftext|>"]) == 0
    out = capsys.readouterr().out
    assert "sample at step 1: '<|endoftext|>" in out and "sample:\n<|endoftext|>" in out


def test_a_bad_token_id_names_the_shard_and_position_and_the_completed_steps_are_saved(tmp_path, capsys):
    """Item 14: a token id >= the vocabulary in a shard stopped the run without saving, naming no
    shard or position."""
    from euler_core.data.loader import TokenSource
    from euler_core.data.shards import write_shard
    from conftest import make_shards
    train_path, val_path = make_shards(tmp_path)
    tokens = np.array(np.memmap(train_path, dtype="<u2", mode="r", offset=1024))
    # which positions each step reads: batches drawn from an array of positions are positions
    positions = TokenSource([np.arange(len(tokens))], "positions")
    read = [set(np.concatenate([x.ravel(), y.ravel()]).tolist()) for x, y in
            (positions.batch(step, 4, 16, 1337) for step in range(4))]
    bad = min(read[3] - read[0] - read[1] - read[2])  # first read at step 3
    tokens[bad] = 70
    bad_path = write_shard(tmp_path / "bad_train.bin", tokens)
    run = tmp_path / "run"
    assert main(["train", "--preset", "micro", "--train-data", str(bad_path), "--val-data", val_path,
                 "--vocab-size", "64", "--batch-size", "4", "--steps", "10", "--eval-every", "0",
                 "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{bad_path}: token id 70 at token position {bad:,} is outside the vocabulary of 64" in err, err
    assert load_checkpoint(run).meta["step"] == 3 and len(records(run)) == 3


@pytest.mark.parametrize("command", ["train", "sft"])
def test_resume_of_a_folder_without_a_checkpoint_says_so(command, tmp_path, capsys):
    from euler_core.cli import main
    empty = tmp_path / "run"
    empty.mkdir()
    assert main([command, "--resume", "--out", str(empty)]) == 2
    assert f"{command} --resume: {empty} holds no checkpoint yet" in capsys.readouterr().err
    assert main([command, "--resume", "--out", str(tmp_path / "none")]) == 2
    assert f"{command} --resume: {tmp_path / 'none'} is not a run directory" in capsys.readouterr().err
