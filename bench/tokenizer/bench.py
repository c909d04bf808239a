"""Tokenizer benchmark: NanoEuler's BPE against tiktoken (encoding) and Hugging Face `tokenizers`
(training), side by side in one run on the same text, with outputs checked before anything is timed.

Run in the test environment (it needs `tokenizers`, which is in the dev extra but never a
NanoEuler dependency):

    .venv/bin/pip install -e ".[dev]"
    .venv/bin/python bench/tokenizer/bench.py          # GPT-2's ranks: the copy in the package

Corpus (10 MB, built from what a Debian machine has offline, in this order): the King James Bible
(`bible-kjv` package, as verse lines), Python's documentation sources (`python3.11-doc`, reST) and
the Python standard library's source; missing parts are replaced by more standard library.

Measured (median of --repeats runs after one warm-up; wall clock; 1 MB = 10^6 bytes):
  encode, one thread:  ours (numba fast path) vs tiktoken `encode_ordinary`, GPT-2 ranks, whole corpus;
                       the readable reference path too, and the pre-split alone: our scanner, our
                       reference pattern (Python's `re`, classes as explicit ranges) and tiktoken's
                       pattern text as the `regex` module runs it (\\p{L} etc.: what the reference
                       path compiled before the classes became explicit). `regex` comes with tiktoken.
  encode, parallel:    the corpus cut into ~1 MB chunks at safe boundaries, ours over a process pool
                       (as `euler data prepare` does) vs tiktoken `encode_ordinary_batch` (threads).
  train, vocab 32768:  ours (both conventions) vs Hugging Face BpeTrainer with a ByteLevel
                       pre-tokenizer, default threads and RAYON_NUM_THREADS=1 (each in a fresh
                       process), from the same file. Our "hf" merges are compared with Hugging Face's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def build_corpus(target: int) -> tuple[str, list[dict]]:
    parts, sources = [], []

    def add(name, text):
        room = target - sum(len(p.encode()) for p in parts)
        if room <= 0 or not text:
            return
        data = text.encode("utf-8")[:room].decode("utf-8", "ignore")
        data = data[:data.rfind("\n") + 1] if "\n" in data else data
        parts.append(data)
        sources.append({"source": name, "bytes": len(data.encode())})

    try:
        kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        kjv = ""
    add("King James Bible (bible-kjv)", kjv[:4_000_000])
    docs = Path("/usr/share/doc/python3.11/html/_sources")
    if docs.is_dir():
        add("Python 3.11 documentation sources (python3.11-doc)",
            "".join(p.read_text("utf-8", "replace") for p in sorted(docs.rglob("*.txt")))[:3_000_000])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = []
    size = 0
    for p in sorted(stdlib.rglob("*.py")):
        if "site-packages" in p.parts:
            continue
        try:
            t = p.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        code.append(t)
        size += len(t)
        if size > target:
            break
    add("Python standard library source", "".join(code))
    return "".join(parts), sources


def timeit(fn, repeats):
    fn()  # warm-up (compilation, caches)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


HF_SCRIPT = r"""
import json, sys, time
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
path, vocab = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([path], trainer)
elapsed = time.perf_counter() - t
merges = json.loads(tok.to_str())["model"]["merges"]
merges = [m.split(" ") if isinstance(m, str) else m for m in merges]
json.dump({"seconds": elapsed, "merges": merges}, sys.stdout)
"""


def hf_train(path, vocab, threads):
    env = dict(os.environ)
    if threads is not None:
        env["RAYON_NUM_THREADS"] = str(threads)
    else:
        env.pop("RAYON_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", HF_SCRIPT, str(path), str(vocab)], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout)


def _pool_encode(chunk):
    return _POOL_TOK.encode_ordinary_numpy(chunk)


def _pool_init(tok):
    global _POOL_TOK
    _POOL_TOK = tok
    _POOL_TOK.encode_ordinary_numpy("warm up")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default=None, metavar="FILE", help="a copy of GPT-2's ranks (default: the one in the package)")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=str(REPO / "reports" / "tokenizer"))
    args = ap.parse_args()

    import numpy as np
    import regex
    import tiktoken
    import tokenizers

    from euler_core.data.prepare import safe_cuts
    from euler_core.tokenizer import fast
    from euler_core.tokenizer.gpt2 import gpt2_tokenizer
    from euler_core.tokenizer.pattern import GPT2_PATTERN, compiled
    from euler_core.tokenizer.train import bytes_to_unicode, train_bpe

    load_before = os.getloadavg()
    text, sources = build_corpus(int(args.mb * 1e6))
    nbytes = len(text.encode("utf-8"))
    mb = nbytes / 1e6
    print(f"corpus: {mb:.2f} MB from {sources}", flush=True)
    results = {"corpus": {"bytes": nbytes, "sources": sources}, "encode": {}, "train": {}}

    # ---- encoding ----------------------------------------------------------------------------------
    ours = gpt2_tokenizer(args.ranks)
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ours.mergeable_ranks,
                            special_tokens={"<|endoftext|>": 50256})
    expected = enc.encode_ordinary(text)
    got = ours.encode_ordinary(text)
    assert got == expected, "fast path differs from tiktoken: refusing to time it"
    sample = text[: len(text) // 5]
    assert ours.encode_ordinary_reference(sample) == enc.encode_ordinary(sample)
    enc_res = results["encode"]
    enc_res["tokens"] = len(expected)
    enc_res["identical_to_tiktoken"] = True
    for name, fn, size in [
        ("tiktoken encode_ordinary (1 thread)", lambda: enc.encode_ordinary(text), mb),
        ("nanoeuler fast path (numba), list of ints", lambda: ours.encode_ordinary(text), mb),
        ("nanoeuler fast path (numba), numpy array", lambda: ours.encode_ordinary_numpy(text), mb),
        ("nanoeuler reference path (re + dict), 1/5 of the corpus", lambda: ours.encode_ordinary_reference(sample),
         len(sample.encode()) / 1e6),
        ("pre-split only: re findall, explicit ranges (the reference path's pattern)",
         lambda: compiled("gpt2").findall(text), mb),
        (f"pre-split only: regex {metadata.version('regex')} findall, tiktoken's pattern text (\\p classes)",
         lambda: regex.findall(GPT2_PATTERN, text), mb),
        ("pre-split only: nanoeuler scanner (numba)",
         lambda: fast.split_offsets(np.frombuffer(text.encode(), np.uint8), fast.char_classes()), mb),
    ]:
        med, times = timeit(fn, args.repeats)
        enc_res[name] = {"seconds": med, "MB_per_s": size / med, "runs": times}
        print(f"{name:<62} {size / med:7.1f} MB/s", flush=True)

    cuts = safe_cuts(text, 1 << 20)
    chunks = [text[a:b] for a, b in zip(cuts, cuts[1:])]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(args.workers, initializer=_pool_init, initargs=(ours,)) as pool:
        par = np.concatenate(list(pool.map(_pool_encode, chunks)))
        assert par.tolist() == expected
        med, times = timeit(lambda: list(pool.map(_pool_encode, chunks)), args.repeats)
    name = f"nanoeuler, {args.workers} processes (data prepare's pool), {len(chunks)} chunks"
    enc_res[name] = {"seconds": med, "MB_per_s": mb / med, "runs": times}
    print(f"{name:<62} {mb / med:7.1f} MB/s", flush=True)
    assert sum(enc.encode_ordinary_batch(chunks, num_threads=args.workers), []) == expected
    med, times = timeit(lambda: enc.encode_ordinary_batch(chunks, num_threads=args.workers), args.repeats)
    name = f"tiktoken encode_ordinary_batch, {args.workers} threads, {len(chunks)} chunks"
    enc_res[name] = {"seconds": med, "MB_per_s": mb / med, "runs": times}
    print(f"{name:<62} {mb / med:7.1f} MB/s", flush=True)

    # ---- training ----------------------------------------------------------------------------------
    tr = results["train"]
    tr["vocab_size"] = args.vocab
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.txt"
        path.write_text(text, encoding="utf-8")
        train_bpe(text[:100_000], 1000)  # compile once (numba cache), not timed
        for conv in ("nanoeuler", "hf"):
            times, res = [], None
            for _ in range(args.repeats):
                t = time.perf_counter()
                res = train_bpe(path.read_text(encoding="utf-8"), args.vocab, conventions=conv, progress=False)
                times.append(time.perf_counter() - t)
            name = f"nanoeuler train_bpe, conventions={conv} (1 thread)"
            tr[name] = {"seconds": statistics.median(times), "runs": times, "n_vocab": res.tokenizer.n_vocab}
            print(f"{name:<62} {statistics.median(times):7.2f} s", flush=True)
            if conv == "hf":
                ours_hf = res.merges
        for threads, label in ((None, "default threads"), (1, "RAYON_NUM_THREADS=1")):
            runs = [hf_train(path, args.vocab, threads) for _ in range(args.repeats)]
            times = [r["seconds"] for r in runs]
            name = f"Hugging Face tokenizers BpeTrainer ({label})"
            tr[name] = {"seconds": statistics.median(times), "runs": times}
            print(f"{name:<62} {statistics.median(times):7.2f} s", flush=True)
        b2u = bytes_to_unicode()
        ours_as_hf = [["".join(b2u[x] for x in a), "".join(b2u[x] for x in b)] for a, b in ours_hf]
        tr["hf_conventions_merges_equal_hf"] = ours_as_hf == runs[0]["merges"]
        tr["merges_compared"] = len(runs[0]["merges"])
        print(f"hf-conventions merges equal Hugging Face's: {tr['hf_conventions_merges_equal_hf']} "
              f"({len(ours_as_hf)} vs {len(runs[0]['merges'])} merges)", flush=True)

    git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "euler_core/tokenizer", "bench/tokenizer"],
                                capture_output=True, text=True, cwd=REPO).stdout.strip())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    import numba

    results["environment"] = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_sha": git, "tokenizer_code_dirty": dirty,
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
        "versions": {"numpy": np.__version__, "numba": numba.__version__, "tiktoken": tiktoken.__version__,
                     "tokenizers": tokenizers.__version__, "regex": metadata.version("regex")},
        "note": "all numbers from one run of bench/tokenizer/bench.py, side by side on the same text and machine",
        "repeats": args.repeats, "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "bench.md").write_text(render(results))
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")


def render(r) -> str:
    env = r["environment"]
    lines = ["# Tokenizer benchmark", "",
             f"One run of `bench/tokenizer/bench.py`, everything side by side on the same text and machine: "
             f"{env['cpu']}, {env['cores']} cores, Python {env['python']}; numpy {env['versions']['numpy']}, "
             f"numba {env['versions']['numba']}, tiktoken {env['versions']['tiktoken']}, tokenizers "
             f"{env['versions']['tokenizers']}, regex {env['versions']['regex']}. Git {env['git_sha'][:12]}"
             f"{' (tokenizer code modified)' if env['tokenizer_code_dirty'] else ''}, {env['when']}. "
             f"Median of {env['repeats']} runs after a warm-up. Load average (1, 5, 15 min) "
             f"{tuple(round(x, 1) for x in env.get('load_average_before', ()))} before, "
             f"{tuple(round(x, 1) for x in env.get('load_average_after', ()))} after: other work may have "
             f"shared the machine.", "",
             f"Corpus: {r['corpus']['bytes'] / 1e6:.2f} MB: "
             + "; ".join(f"{s['source']} {s['bytes'] / 1e6:.2f} MB" for s in r["corpus"]["sources"]) + ".", "",
             f"## Encoding with GPT-2's ranks ({r['encode']['tokens']:,} tokens, identical to tiktoken: "
             f"{r['encode']['identical_to_tiktoken']})", "", "| encoder | MB/s | seconds |", "|---|---:|---:|"]
    for k, v in r["encode"].items():
        if isinstance(v, dict):
            lines.append(f"| {k} | {v['MB_per_s']:.1f} | {v['seconds']:.3f} |")
    lines += ["", f"## Training to a vocabulary of {r['train']['vocab_size']}", "", "| trainer | seconds |", "|---|---:|"]
    for k, v in r["train"].items():
        if isinstance(v, dict):
            lines.append(f"| {k} | {v['seconds']:.2f} |")
    lines += ["", f"conventions=\"hf\" merges equal Hugging Face's, all {r['train']['merges_compared']:,} of them: "
              f"{r['train']['hf_conventions_merges_equal_hf']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
