"""Generates euler_core/tokenizer/unicode_classes.py: the code point ranges of the pre-split's
character classes \\p{L}, \\p{N} and \\s, read off tiktoken itself.

GPT-2's pre-split pattern names Unicode classes. What a class contains depends on the Unicode
tables of the regular-expression engine that runs the pattern: tiktoken's Rust engine
(fancy-regex over regex-syntax) has one set, each release of Python's `regex` module has its own
(regex 2025.10 and later moved to a newer Unicode and classify 17,480 code points differently).
To give tiktoken's ids whatever is installed, NanoEuler carries the classes as explicit ranges.

Source: tiktoken, probed. For each class a tiktoken `Encoding` is built whose pattern is that class
alone (`\\p{L}`) and whose vocabulary is the 256 single bytes (so a token id is a byte). tiktoken
encodes only the text its pattern matches, so encoding one string holding every code point in
order (surrogates excluded: a Python string bound for UTF-8 cannot hold them) returns the UTF-8
bytes of exactly the class's members, in order. No ranks file and no network are needed.

Recorded in the output: the tiktoken version and the Rust crates compiled into it (read from its
extension module). Regenerate after a tiktoken upgrade that changes its Unicode tables
(tests/test_tokenizer_gpt2.py::test_char_classes_are_tiktokens fails then, naming this script):

    .venv/bin/python bench/tokenizer/unicode_classes.py            # writes the module
    .venv/bin/python bench/tokenizer/unicode_classes.py --check    # exit 1 if its ranges are not tiktoken's

Unicode version, for tiktoken 0.14.0 (regex-syntax 0.8.11): 16.0. Evidence: the three classes
equal those of the `regex` module 2025.9.18 (which implements Unicode 16.0), and \\p{L}, \\p{N}
equal Python 3.13's `unicodedata` (Unicode 15.1) categories L*, N* plus 4,302 and 80 code points
unassigned in 15.1 (U+1C89 CYRILLIC CAPITAL LETTER TJE, new in 16.0, among them). The version is
a statement about the source, written into the output by hand (UNICODE_VERSION below): probing
cannot tell it.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "euler_core" / "tokenizer" / "unicode_classes.py"
UNICODE_VERSION = "16.0"
CLASSES = (("LETTER", r"\p{L}"), ("NUMBER", r"\p{N}"), ("WHITESPACE", r"\s"))


def every_code_point() -> str:
    """All code points but the surrogates, in increasing order."""
    return "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)


def probe_tiktoken() -> dict[str, list[int]]:
    """{class name: sorted code points} as tiktoken's regular-expression engine classifies them."""
    import tiktoken

    byte_ranks = {bytes([b]): b for b in range(256)}
    text = every_code_point()
    classes = {}
    for name, expression in CLASSES:
        enc = tiktoken.Encoding(f"probe-{name}", pat_str=expression, mergeable_ranks=byte_ranks, special_tokens={})
        classes[name] = [ord(ch) for ch in bytes(enc.encode_ordinary(text)).decode("utf-8")]
    return classes


def to_ranges(code_points: list[int]) -> list[tuple[int, int]]:
    """Sorted code points -> inclusive (first, last) ranges of consecutive ones."""
    out: list[list[int]] = []
    for c in code_points:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(a, b) for a, b in out]


def engine_crates() -> str:
    """The regular-expression crates compiled into tiktoken's extension, e.g. 'regex-syntax 0.8.11'."""
    import tiktoken

    found = set()
    for lib in Path(tiktoken.__file__).parent.glob("_tiktoken*"):
        found.update(re.findall(rb"(fancy-regex|regex-syntax|regex-automata)-(\d+\.\d+\.\d+)", lib.read_bytes()))
    return ", ".join(f"{name.decode()} {version.decode()}" for name, version in sorted(found)) or "not found"


def render(classes: dict[str, list[int]]) -> str:
    tiktoken_version = metadata.version("tiktoken")
    lines = [
        'r"""The pre-split\'s character classes as explicit code point ranges: GENERATED, do not edit.',
        "",
        "Written by bench/tokenizer/unicode_classes.py (which says how), probing tiktoken "
        f"{tiktoken_version}:",
        f"{engine_crates()}; Unicode {UNICODE_VERSION}.",
        "Each class is a tuple of inclusive (first, last) ranges, sorted and disjoint:",
        "",
        "    LETTER       \\p{L}  (General_Category Letter)",
        "    NUMBER       \\p{N}  (General_Category Number)",
        "    WHITESPACE   \\s     (the White_Space property)",
        '"""',
        "",
        f'SOURCE = "tiktoken {tiktoken_version}"',
        f'UNICODE_VERSION = "{UNICODE_VERSION}"',
    ]
    for name, _ in CLASSES:
        ranges = to_ranges(classes[name])
        lines += ["", f"# {len(classes[name]):,} code points in {len(ranges)} ranges", f"{name} = ("]
        items = [f"(0x{a:04X}, 0x{b:04X})," for a, b in ranges]
        for k in range(0, len(items), 5):
            lines.append("    " + " ".join(items[k:k + 5]))
        lines.append(")")
    return "\n".join(lines) + "\n"


def differences(classes: dict[str, list[int]]) -> list[str]:
    """The classes whose ranges in the committed module differ from `classes` (names, with counts)."""
    sys.path.insert(0, str(REPO))
    from euler_core.tokenizer import unicode_classes

    out = []
    for name, _ in CLASSES:
        committed = {c for a, b in getattr(unicode_classes, name) for c in range(a, b + 1)}
        probed = set(classes[name])
        if committed != probed:
            out.append(f"{name}: {len(probed - committed)} code points missing, {len(committed - probed)} extra")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare the committed module's ranges with tiktoken's instead of writing it")
    args = ap.parse_args(argv)
    classes = probe_tiktoken()
    if args.check:
        wrong = differences(classes)
        for line in wrong:
            print(f"{OUTPUT.relative_to(REPO)}: {line}; regenerate it with {Path(__file__).relative_to(REPO)}")
        if not wrong:
            print(f"{OUTPUT.relative_to(REPO)}: every class equals tiktoken's")
        return 1 if wrong else 0
    OUTPUT.write_text(render(classes))
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
