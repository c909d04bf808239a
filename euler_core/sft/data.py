"""SFT data: JSONL files of conversations, in any of three common shapes, checked line by line.

Each line is one JSON object, one of:

    chat               {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
    prompt/completion  {"prompt": "...", "completion": "..."}          -> user, assistant
    Alpaca             {"instruction": "...", "input": "...", "output": "..."}
                       -> user: the instruction (and, when `input` is not empty, a blank line and
                          the input), assistant: the output

Every record becomes a list of {"role", "content"} messages. A conversation must hold at least one
assistant message (that is what SFT learns), a system message only first, and every content a
string. A line that breaks a rule (not JSON, an unknown role, a missing field ...) is reported with
its line number and the reason; the other lines are still used, unless `strict`, where the first
bad line is an error. Blank lines are skipped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..files import parse_json

ROLES = ("system", "user", "assistant")


class SFTDataError(ValueError):
    """A data file that cannot be used (missing, no valid conversation, or a bad line under --strict)."""


@dataclass
class Conversation:
    messages: list[dict]   # [{"role": ..., "content": ...}, ...]
    line: int              # where it came from (1-based), for messages about it


def to_messages(record) -> list[dict]:
    """The messages of one record in any of the three shapes; ValueError saying what is wrong."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list")
        out = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"message {i} must be an object with 'role' and 'content'")
            if m["role"] not in ROLES:
                raise ValueError(f"message {i} has unknown role {m['role']!r}; roles are {', '.join(ROLES)}")
            out.append({"role": m["role"], "content": m["content"]})
    elif "prompt" in record or "completion" in record:
        if "prompt" not in record or "completion" not in record:
            raise ValueError("a prompt/completion record needs both 'prompt' and 'completion'")
        out = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
    elif "instruction" in record or "output" in record:
        if "instruction" not in record or "output" not in record:
            raise ValueError("an Alpaca record needs 'instruction' and 'output' (and optionally 'input')")
        extra = record.get("input") or ""
        if not isinstance(extra, str):
            raise ValueError("'input' must be a string")
        user = record["instruction"] + ("\n\n" + extra if isinstance(record["instruction"], str) and extra else "")
        out = [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"]}]
    else:
        raise ValueError(f"unknown record shape (keys {sorted(record)[:6]}); expected 'messages', "
                         "'prompt'+'completion', or 'instruction'+'output'")
    for i, m in enumerate(out):
        if not isinstance(m["content"], str):
            raise ValueError(f"message {i} ({m['role']}): content must be a string, got {type(m['content']).__name__}")
        if m["role"] == "system" and i != 0:
            raise ValueError(f"message {i}: a system message may only come first")
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError("no assistant message: nothing to learn from")
    return out


def read_jsonl(path, strict: bool = False) -> tuple[list[Conversation], list[str]]:
    """(conversations, problems): every valid line's conversation, and one message per bad line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SFT data {path}: no such file")
    conversations, problems = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = parse_json(line, f"{path}:{lineno}")  # bad syntax, or nesting too deep to parse
            except ValueError as e:
                problem = str(e)
            else:
                try:
                    conversations.append(Conversation(to_messages(record), lineno))
                    continue
                except ValueError as e:
                    problem = f"{path}:{lineno}: {e}"
            if strict:
                raise SFTDataError(f"{problem} (--strict: refusing the file)")
            problems.append(problem)
    if not conversations:
        raise SFTDataError(f"{path}: no valid conversation" + (f" ({len(problems)} bad line(s); first: {problems[0]})"
                                                                if problems else " (empty file)"))
    return conversations, problems
