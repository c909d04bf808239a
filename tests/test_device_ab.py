"""bench/device/ab.sh: the B, A, B halves of a device call, checked in a throwaway git repository with a
stand-in round driver (AB_ROUND) that records which files it saw. A's half sees the packed revision's
files over the tree, both B halves the tree as it was, and a file A brought that the tree lacks is gone
again for the second B."""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "device" / "ab.sh"

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None,
                                reason="ab.sh needs git and bash")

# the stand-in round driver: notes its stages, GIT_SHA and the files of the change as it finds them
ROUND = """#!/usr/bin/env bash
mkdir -p "$OUT"
{ echo "sha=$GIT_SHA stages=$* install=${NO_INSTALL:-yes}"
  for f in kernel.cu config.py added.py; do
    if [[ -e $f ]]; then echo "$f: $(cat "$f")"; else echo "$f: absent"; fi
  done; } > "$OUT/round.txt"
"""


def _git(repo: Path, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "kernel.cu").write_text("old kernel")
    (repo / "config.py").write_text("old config")
    (repo / "added.py").write_text("only in the old revision")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "old")
    old = _git(repo, "rev-parse", "--short", "HEAD").strip()
    (repo / "kernel.cu").write_text("new kernel")
    (repo / "config.py").write_text("new config")
    (repo / "added.py").unlink()
    _git(repo, "commit", "-qam", "new")
    (repo / "round.sh").write_text(ROUND)
    return repo, old


def _ab(repo: Path, *args, out: Path | None = None):
    env = {**os.environ, "AB_ROUND": str(repo / "round.sh"), "GIT_SHA": "newsha"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=repo, env=env, capture_output=True, text=True)


def _half(out: Path, name: str) -> str:
    with tarfile.open(out / f"{name}.tar.gz") as tar:
        return tar.extractfile(f"{name}/round.txt").read().decode()


def test_b_a_b_halves_see_the_tree_then_the_old_files_then_the_tree(tmp_path):
    repo, old = _repo(tmp_path)
    packed = _ab(repo, "pack", old, "kernel.cu", "added.py", "missing.py")
    assert packed.returncode == 0, packed.stderr
    assert "missing.py is not in" in packed.stderr
    out = tmp_path / "out" / "ab"  # (made by ab.sh)
    ran = _ab(repo, "run", "trace:40", "train:50", out=out)
    assert ran.returncode == 0, ran.stderr
    b1, a, b2 = (_half(out, name) for name in ("b1", "a", "b2"))
    tree = "kernel.cu: new kernel\nconfig.py: new config\nadded.py: absent\n"
    assert b1 == "sha=newsha stages=trace:40 train:50 install=yes\n" + tree  # the only half that installs
    assert b2 == "sha=newsha stages=trace:40 train:50 install=1\n" + tree
    assert a == (f"sha={old} stages=trace:40 train:50 install=1\n"
                 "kernel.cu: old kernel\nconfig.py: new config\nadded.py: only in the old revision\n")
    assert (repo / "kernel.cu").read_text() == "new kernel" and not (repo / "added.py").exists()
    assert sorted(p.name for p in out.iterdir()) == ["a.tar.gz", "ab.txt", "b1.tar.gz", "b2.tar.gz"]


def test_run_without_a_pack_and_a_pack_of_nothing_say_what_to_do(tmp_path):
    repo, old = _repo(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    ran = _ab(repo, "run", "trace:40", out=out)
    assert ran.returncode == 2 and "pack <rev> <path>" in ran.stderr
    packed = _ab(repo, "pack", old, "missing.py")
    assert packed.returncode == 2 and "none of the paths" in packed.stderr
    assert _ab(repo, "pack", "no-such-revision", "kernel.cu").returncode == 2
