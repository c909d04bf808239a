"""Kill a process, or fill its disk, at the k-th write it makes under a directory.

`in_child(fn, under, fault)` forks; the child installs a Python audit hook (sys.addaudithook) and
runs `fn()`. The hook sees every operation that changes files, whatever code makes it: opens for
writing (builtins.open, os.open, tempfile), renames and replaces, mkdir, deletes (os.remove,
os.rmdir, shutil.rmtree, one event per file it deletes), truncation. Those that touch a path under
`under` are numbered from 0; at number `fault.at` the child:

    "kill"        ends at once with os._exit, before the operation: no handler, no cleanup, no
                  flush runs, as with kill -9
    "kill-torn"   for an open for writing: opens the file as asked (truncating or creating it) and
                  writes half a line when appending, then ends the same way: a kill in mid-write
    "enospc"      makes the operation fail with OSError(ENOSPC) (after writing half a line, when
                  appending), as a full disk does, and lets the program handle it

The child reports, through a pipe, the numbered operations it saw and, when fn returned or raised,
what it returned or raised. Audit hooks cannot be removed, which is why they live in a child.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

KILLED = 137  # the exit status the child ends with when killed at the fault
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@dataclass
class Fault:
    kind: str   # "kill", "kill-torn" or "enospc"
    at: int     # the number of the operation it strikes


def _resolve(path, dir_fd) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if dir_fd is not None and not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            return None
    return os.path.abspath(path)


def _write_target(event: str, args) -> tuple[str | None, str | None]:
    """(path, open mode) of an audit event that changes a file, else (None, None)."""
    if event == "open":
        path, mode, flags = args
        if mode is not None:
            writes = any(c in mode for c in "wax+")
        else:
            writes = bool(flags & WRITE_FLAGS) if isinstance(flags, int) else False
            mode = "a" if isinstance(flags, int) and flags & os.O_APPEND else "w"
        return (_resolve(path, None), mode) if writes else (None, None)
    if event == "os.rename":
        return _resolve(args[1], args[3]), None
    if event in ("os.mkdir", "os.remove", "os.rmdir"):
        return _resolve(args[0], args[-1]), None
    if event == "os.truncate":
        return _resolve(args[0], None), None
    return None, None


TORN = b'{"step": 99999, "loss": 1.2'


def in_child(fn, under: Path, fault: Fault | None = None) -> dict:
    """Run fn() in a forked child with the audit hook; returns {"ops": [(event, path)], "status":
    exit status, "result": repr or None, "error": "Type: message" or None, "output": stdout+stderr}."""
    under = os.path.abspath(under)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        ops, busy = [], [False]
        report = {"ops": ops, "result": None, "error": None, "output": ""}

        def send_and_exit(status):
            with os.fdopen(write_end, "w") as f:
                json.dump(report, f)
            os._exit(status)

        def hook(event, args):
            if busy[0]:
                return
            path, mode = _write_target(event, args)
            if path is None or not (path == under or path.startswith(under + os.sep)):
                return
            number = len(ops)
            ops.append((event, os.path.relpath(path, under)))
            if fault is None or number != fault.at:
                return
            busy[0] = True
            if fault.kind == "kill":
                send_and_exit(KILLED)
            torn = event == "open" and "a" in mode
            if fault.kind == "kill-torn" and event == "open":
                with open(path, "ab" if torn else "wb") as f:
                    if torn:
                        f.write(TORN)
                send_and_exit(KILLED)
            if fault.kind == "kill-torn":
                send_and_exit(KILLED)
            if torn:
                with open(path, "ab") as f:
                    f.write(TORN)
            busy[0] = False
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

        output = io.StringIO()
        status = 0
        try:
            sys.addaudithook(hook)
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                report["result"] = repr(fn())
        except BaseException as e:  # the child reports everything, then ends
            report["error"] = f"{type(e).__name__}: {e}"
            status = 1
        finally:
            report["output"] = output.getvalue()
            send_and_exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    report = json.loads(data)
    report["status"] = os.waitstatus_to_exitcode(status)
    return report
