"""What every setting and command-line value may be, checked in one place with one message format.

A rule (`Allowed`) says what a value may be and how to say it: "an integer >= 1", "a finite
number in (0, 1]", "one of float32, float64". Rules are used three ways, so a value is refused the
same way wherever it comes from:

- on the fields of a config dataclass (TrainConfig, SFTConfig): `lr: float = setting(2e-3,
  number(0, 1, low_open=True))`. `check_settings(cfg, "train")` checks every field (the Python API,
  and settings read back from a checkpoint), and `cli_options.add_config_options` gives each field a --flag
  whose parser applies the same rule. Adding a setting with its allowed values is that one line.
- as argparse types for the other commands' flags: `type=flag_type(integer(1))`;
- `setting(..., resume=True)` marks the settings a resumed run may change (`resume_settings`);
  every other one is the run's own and a resume refuses to change it (docs/run-directory.md).

Messages name the flag, the value and what is allowed:

    euler train: error: argument --total-batch: -256 is not allowed: expected an integer >= 1
    euler train: error: --lr: nan is not allowed: expected a finite number in (0, 1]

`output_dir` / `output_file` check an --out before any work is done (not a file, not under a file,
writable), with the same kind of message.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class Allowed:
    """The values a setting may take. Numbers are always finite; `optional` also allows None."""

    kind: type                      # int, float, str or bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False          # `low` itself excluded
    high_open: bool = False
    choices: tuple = ()
    pattern: str | None = None      # str: a regular expression the whole value must match
    pattern_says: str = ""          # what the pattern allows, in words
    nonempty: bool = False
    optional: bool = False

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return self.pattern_says or ("a non-empty string" if self.nonempty else "a string")
        what = "an integer" if self.kind is int else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{what} {'<' if self.high_open else '<='} {_num(self.high)}"
        return what

    def allows(self, value) -> bool:
        if value is None:
            return self.optional
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is str:
            return isinstance(value, str) and (not self.nonempty or value != "") and \
                (self.pattern is None or re.fullmatch(self.pattern, value) is not None) and \
                (not self.choices or value in self.choices)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and not isinstance(value, numbers.Integral):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return not self.choices or value in self.choices

    def parse(self, text: str):
        """The value of a command-line string (ValueError when it is not of this kind)."""
        if self.kind is int:
            return int(text)
        if self.kind is float:
            return float(text)
        if self.kind is bool:
            return {"true": True, "false": False}[text.lower()]
        return text


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def integer(low=None, high=None) -> Allowed:
    return Allowed(int, low, high)


def number(low=None, high=None, low_open: bool = False, high_open: bool = False) -> Allowed:
    return Allowed(float, low, high, low_open, high_open)


def one_of(*choices) -> Allowed:
    return Allowed(str, choices=tuple(choices))


def text(nonempty: bool = True, pattern: str | None = None, says: str = "") -> Allowed:
    return Allowed(str, pattern=pattern, pattern_says=says, nonempty=nonempty)


def switch() -> Allowed:
    return Allowed(bool)


def optional(rule: Allowed) -> Allowed:
    return replace(rule, optional=True)


def shown(value) -> str:
    """A value as a message shows it: strings quoted (an empty one must be visible), numbers bare."""
    return repr(value) if isinstance(value, str) else str(value)


def refusal(flag: str, value, rule: Allowed) -> str:
    return f"{flag}: {shown(value)} is not allowed: expected {rule.describe()}"


def check_value(flag: str, value, rule: Allowed):
    """`value` itself, or ValueError naming the flag, the value and what is allowed."""
    if not rule.allows(value):
        raise ValueError(refusal(flag, value, rule))
    return value


def flag_type(rule: Allowed):
    """An argparse `type=` that parses a flag's text and applies `rule`: argparse then reports
    "argument --flag: TEXT is not allowed: expected ..." and exits with status 2."""
    def parse(given: str):
        try:
            value = rule.parse(given)
        except (ValueError, KeyError):
            value = None
        if value is None or not rule.allows(value):
            raise argparse.ArgumentTypeError(f"{given if rule.kind is not str and given else repr(given)} "
                                             f"is not allowed: expected {rule.describe()}")
        return value
    parse.__name__ = rule.describe()
    return parse


# ---- config dataclasses --------------------------------------------------------------------------

def setting(default, allowed: Allowed, resume: bool = False):
    """A config dataclass field with its allowed values; resume=True: a resumed run may change it."""
    return field(default=default, metadata={"allowed": allowed, "resume": resume})


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def flag_of_field(f) -> str:
    """A setting's flag: --name, or for a switch the one that changes its default (--no-name for True)."""
    if rule_of(f).kind is bool:
        return ("--no-" if f.default else "--") + f.name.replace("_", "-")
    return flag_of(f.name)


def rule_of(f) -> Allowed:
    if "allowed" not in f.metadata:
        raise TypeError(f"setting {f.name} declares no allowed values (use values.setting)")
    return f.metadata["allowed"]


def check_settings(cfg, command: str) -> None:
    """Every field of `cfg` against its rule; one ValueError listing each value that is not allowed."""
    problems = [refusal(flag_of_field(f), getattr(cfg, f.name), rule_of(f)) for f in fields(cfg)
                if not rule_of(f).allows(getattr(cfg, f.name))]
    if problems:
        raise ValueError(f"{command}: " + "; ".join(problems))


def resumable(config_class) -> list[str]:
    """The settings a resumed run may change, as flags."""
    return [flag_of_field(f) for f in fields(config_class) if f.metadata.get("resume")]


def resume_settings(saved, changes: dict, command: str):
    """The saved settings of a run with the changes a resume may make. A change to any other setting
    is refused, naming it, its saved value and what a resume may change (giving the saved value
    again is no change)."""
    by_name = {f.name: f for f in fields(saved)}
    unknown = sorted(set(changes) - set(by_name))
    if unknown:
        raise TypeError(f"{command}: unknown setting(s) {unknown}")
    refused = [f"{flag_of_field(by_name[name])} {shown(value)} (the run's is {shown(getattr(saved, name))})"
               for name, value in changes.items()
               if not by_name[name].metadata.get("resume") and value != getattr(saved, name)]
    if refused:
        raise ValueError(f"{command} --resume continues a run with the settings it was started with, and cannot "
                         f"change {', '.join(refused)}. A resume may change only {', '.join(resumable(type(saved)))} "
                         "(docs/run-directory.md); for other settings start a new run with another --out")
    updated = replace(saved, **{k: v for k, v in changes.items() if by_name[k].metadata.get("resume")})
    check_settings(updated, command)
    return updated


# ---- output paths --------------------------------------------------------------------------------

def output_dir(path, flag: str = "--out") -> Path:
    """`path` as a directory to write into: created if missing; ValueError naming the flag when it is
    a file, lies under a file, or cannot be written (read-only, no permission)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}: {shown(str(path))} is a file, not a directory")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(f"{flag}: {shown(str(path))} cannot be made: {blocker} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag}: cannot create {shown(str(path))} ({e.strerror or e})") from None
    if not os.access(path, os.W_OK | os.X_OK):  # also false on a read-only file system, even for root
        raise ValueError(f"{flag}: cannot write into {shown(str(path))} (read-only, or no permission)")
    return path


def output_file(path, flag: str = "--out") -> Path:
    """`path` as a file to write: not an existing directory, in a directory we can write into."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {shown(str(path))} is a directory; give the path of a file to write")
    output_dir(path.parent, flag)
    return path


def input_file(path, flag: str = "--input") -> Path:
    """`path` as a file to read: FileNotFoundError / ValueError naming the flag when it is missing or
    a directory."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag}: {shown(str(path))} is a directory; give the files in it (e.g. {path}/*.txt)")
    if not path.is_file():
        raise FileNotFoundError(f"{flag}: {shown(str(path))}: no such file")
    return path
