"""Writing files so that no kill, signal or full disk loses what was already on disk, and reading
JSON from files someone else may have made.

Every file the project writes (checkpoints, metrics.jsonl, token shards, exported weights,
tokenizers) goes through these few operations:

    write_atomic(path, fill)    fill(f) writes into a hidden temporary file beside PATH, which is
                                flushed, fsynced and renamed over PATH: a reader sees the old file or
                                the new one, never half of one; on any error the temporary is removed
    append_line(path, text)     one line appended and fsynced; an append that fails (a full disk) is
                                cut off again, so the file never keeps a torn line of ours
    make_dir(path)              mkdir
    rename(src, dst)            os.replace, then the directory entry fsynced
    remove_tree(path)           renamed to a hidden `.trash-NAME` first, then deleted: a kill midway
                                leaves a hidden folder that `leftovers()` finds, never a half-deleted
                                checkpoint under its real name

Temporary names start with a dot and end in `.tmp<pid>`, so globs over real files never match them
and `leftovers(directory)` can find what an interrupted writer left behind.

`fault_hook` is for tests: when set, it is called as `fault_hook(operation, path)` just before each
operation touches the disk (operation: "write", "rename", "append", "mkdir", "remove"), and may
raise (an OSError(ENOSPC) plays a full disk) or end the process with os._exit (a kill: no cleanup
runs). For "write" it is called after the temporary file is opened, so a kill there leaves it
behind, as a real one would.

parse_json(data, source) reads JSON we did not write: every way it can fail (bad syntax, bad UTF-8,
nesting deeper than Python's parser allows) becomes one error naming the source.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

fault_hook = None  # tests only: see the module docstring

_TEMPORARY = re.compile(r"^\..+\.tmp\d+$|^\.trash-")


def _touch_point(operation: str, path: Path) -> None:
    if fault_hook is not None:
        fault_hook(operation, path)


def temporary_path(path: Path) -> Path:
    """The hidden temporary name a write of `path` uses (unique per process)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def is_leftover(name: str) -> bool:
    """Whether a directory entry is a temporary file or trash folder of an interrupted write."""
    return bool(_TEMPORARY.match(name))


def leftovers(directory: Path) -> list[Path]:
    """Temporary files and trash folders that interrupted writes left in `directory`."""
    try:
        return sorted(p for p in Path(directory).iterdir() if is_leftover(p.name))
    except FileNotFoundError:
        return []


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def write_atomic(path, fill) -> Path:
    """Write `path` through `fill(binary_file)` into a temporary file, then rename it into place."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as f:
            _touch_point("write", path)
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        _touch_point("rename", path)
        os.replace(tmp, path)
    except BaseException:  # an error or Ctrl-C: nothing of ours stays behind (a kill leaves the temporary)
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_bytes_atomic(path, data: bytes) -> Path:
    return write_atomic(path, lambda f: f.write(data))


def write_text_atomic(path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def append_line(path, line: str) -> None:
    """Append `line` and a newline to `path`, durably; on failure the file is cut back to its old end."""
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        end = os.fstat(fd).st_size
        try:
            _touch_point("append", Path(path))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, end)
            except OSError:
                pass  # the reader drops a torn last line anyway (rundir.MetricsLog)
            raise
    finally:
        os.close(fd)


def make_dir(path) -> Path:
    path = Path(path)
    _touch_point("mkdir", path)
    path.mkdir()
    return path


def rename(src, dst) -> None:
    dst = Path(dst)
    _touch_point("rename", dst)
    os.replace(src, dst)
    fsync_dir(dst.parent)


def remove_tree(path) -> None:
    """Delete a folder (or file) so that a kill midway never leaves it half there under its name."""
    path = Path(path)
    if not path.exists():
        return
    if not path.name.startswith(".trash-"):
        trash = path.with_name(".trash-" + path.name)
        if trash.exists():
            _delete(trash)
        _touch_point("remove", path)
        os.replace(path, trash)
        fsync_dir(path.parent)
        path = trash
    _delete(path)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def parse_json(data, source, error=ValueError):
    """json.loads with every failure turned into `error` naming `source` (a path or a description)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{source}: nested too deeply to read as JSON (the parser stops at about "
                    "1,000 levels)") from None
    except UnicodeDecodeError as e:
        raise error(f"{source}: not valid UTF-8 ({e})") from None
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON ({e})") from None
