"""A run directory, and what keeps it whole through kills, signals, full disks and a second process.

    RUN/lock             held (flock) by the one process using the run; names it (pid, host, command)
    RUN/metrics.jsonl    one JSON object per completed step, appended and fsynced as each step ends
    RUN/step_NNNNNN/     checkpoints (checkpoint.py): the newest two, and the one `latest` names
    RUN/latest           the name of the newest checkpoint

The rules (docs/run-directory.md is the user's page):

- One process at a time: `run_lock` takes an exclusive flock on RUN/lock for the whole run, or says
  who holds it. The kernel releases it when the process ends however it ends, so a kill never leaves
  a stale lock. `new_run_dir` makes the default `runs/<date-time>` directory with an exclusive
  mkdir, so two runs started in the same second get two directories.
- Holding the lock, a run first removes what interrupted writes left (`clean_leftovers`: hidden
  temporary files and trash folders, see files.py); nobody else can be writing them.
- metrics.jsonl only grows during a run. When a run (re)starts at step S, the records of steps
  >= S (recomputed from the checkpoint) and any line that is not a step record (a line torn by a kill
  or a full disk) are dropped by writing the kept lines to a temporary file renamed over the old one:
  a kill during that rewrite leaves the old file.
- SIGTERM is Ctrl-C (`stop_signals`): the first asks the run to stop after the step in progress
  (which is then saved), a second stops it at once; the completed steps are saved either way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .files import append_line, leftovers, parse_json, remove_tree, write_text_atomic


class RunBusyError(ValueError):
    """The run directory is in use by another process."""


@contextmanager
def run_lock(run_dir: Path, command: str = "euler"):
    """Hold RUN/lock for the duration of the `with` (RunBusyError when another process holds it)."""
    import fcntl

    run_dir = Path(run_dir)
    path = run_dir / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(path)
            raise RunBusyError(f"{run_dir} is in use by another process ({holder}); wait for it to finish, "
                               "or choose another --out") from None
        args = " ".join(sys.argv[1:])  # what this process was started with (a prepare's inputs can be thousands)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
              "args": args if len(args) <= 300 else args[:300] + " ...", "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        yield run_dir
    finally:
        os.close(fd)  # releases the flock


def _describe_holder(path: Path) -> str:
    try:
        who = parse_json(path.read_bytes(), path)
        return f"pid {who['pid']} on {who['host']}, `{who['command']}`, since {who['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file says no more"


def new_run_dir(pattern: str) -> Path:
    """A new directory named by time.strftime(pattern), with -2, -3 ... appended when it is taken."""
    base = time.strftime(pattern)
    for n in range(1, 1000):
        path = Path(base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise ValueError(f"could not make a new run directory from {pattern!r}: {base} and 998 others exist")


def clean_leftovers(run_dir: Path, log=print) -> None:
    """Remove temporary files and trash folders that interrupted writes left (hold the lock)."""
    found = leftovers(run_dir)
    for path in found:
        remove_tree(path)
    if found:
        log(f"note: removed {len(found)} leftover(s) of interrupted writes in {run_dir}: "
            + ", ".join(p.name for p in found[:4]) + (" ..." if len(found) > 4 else ""))


class MetricsLog:
    """metrics.jsonl: one JSON object per completed step (see the module docstring)."""

    def __init__(self, path: Path, start_step: int, log=print):
        self.path = Path(path)
        if not self.path.exists():
            return
        kept, dropped, steps = [], [], []
        lines = self.path.read_bytes().split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = parse_json(line, f"{self.path}:{number}")
                step = record["step"] if isinstance(record, dict) else None
                if not isinstance(step, int):
                    raise ValueError(f"{self.path}:{number}: not a step record")
            except ValueError as e:
                dropped.append(str(e))
                continue
            if step < start_step:
                kept.append(line)
                steps.append(step)
        if dropped:
            log(f"note: dropped {len(dropped)} line(s) of {self.path.name} that are not step records "
                f"(torn by an interrupted write?): {dropped[0]}")
        if steps != list(range(start_step)):
            log(f"note: {self.path} holds records of {len(steps)} step(s) before step {start_step}, "
                f"not one of each (lines deleted or edited by hand?)")
        if len(kept) != sum(1 for line in lines if line.strip()):
            write_text_atomic(self.path, "".join(line.decode("utf-8", "replace") + "\n" for line in kept))

    def write(self, record: dict) -> None:
        append_line(self.path, json.dumps(record))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, as an exception that says which (the exit status is 128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequested(Interrupted):
    """The run was asked to stop (Ctrl-C or SIGTERM) and stopped at a step boundary."""


@contextmanager
def sigterm_is_ctrl_c():
    """During the `with`, SIGTERM raises Interrupted as Ctrl-C raises KeyboardInterrupt, so every
    cleanup runs (in the main thread; elsewhere Python takes no signals and nothing changes)."""
    def handle(signum, frame):
        raise Interrupted(signum)
    try:
        previous = signal.signal(signal.SIGTERM, handle)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_signals(log=print):
    """SIGINT and SIGTERM during the `with`: the first sets `requested[0]` (the loop stops at the end of
    the step in progress), a second raises Interrupted at once. Yields the one-item list.
    Outside the main thread (where Python cannot take signals) nothing is installed."""
    requested: list = [None]

    def handle(signum, frame):
        if requested[0] is not None:
            raise Interrupted(signum)
        requested[0] = signum
        log(f"\n{signal.Signals(signum).name}: stopping after the step in progress, which is saved "
            "(send it again to stop at once)")

    try:
        previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield requested
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
