"""The embedding backward at token mixes the bench does not try: check, then time, every GPU variant.

    python3 bench/tune/embedding_tokens.py --out $OUT/emb     # on the GPU (~60 s)
    ncu --clock-control none python3 bench/tune/embedding_tokens.py --once python 32768
                                                             # cupy_raw's kernels, one backward

`euler bench ops` draws tokens uniformly from the vocabulary, so at B*T = 32768 no token is held by
more than a few positions. Training text is not like that: a few tokens hold a large share of the
positions, and a scatter-add's cost is in its most frequent token (cupy_raw's backward takes a
different path for a token at more than 32 positions). Three mixes, at B*T = 16384, 32768 and 65536
(T = 1024, C = 768, V = 50304, bf16 with float32 dwte/dwpe as in mixed-precision training):

    uniform   the bench's: ids uniform over V
    english   GPT-2's tokens of this repository's docs/ (prose with some code; the most frequent
              token, a space, is ~7% of them, "," ~3%), repeated to fill B*T
    python    GPT-2's tokens of Python's standard library (the project's default corpus): a space
              run token is ~40% of the positions

For each mix and variant (cupy_raw:gather, the same with the other LIGHT_AHEAD (rows in flight a warp
in its one-warp path, against warps resident), triton:gather and, where installed, torch:embedding):
dwte and dwpe are pre-filled with random values and accumulated into, checked against float64 on
the arrays they are timed on, and must be bitwise the same on a second call; then timed with
euler_core.measure.timing (batches behind its spin kernel, CUDA events, medians, 2 rotating sets).
Beside them, in the same process, a cupy copy of the op spec's backward bytes (the figure "x copy"
reads against). Writes <out>.json (every record) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from euler_core.files import write_text_atomic  # noqa: E402
from euler_core.ops import OPS  # noqa: E402

T, C, V = 1024, 768, 50304
# torch first: loading triton first leaves a placeholder that stops torch from importing
VARIANTS = ("torch:embedding", "cupy_raw:gather", "triton:gather")


def corpus_tokens(n: int) -> dict[str, np.ndarray]:
    """n GPT-2 tokens of each real mix (repeated when the text is shorter)."""
    from euler_core.corpus import default_corpus
    from euler_core.tokenizer.gpt2 import gpt2_tokenizer
    tok = gpt2_tokenizer()
    texts = {"english": "\n".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))),
             "python": default_corpus(1_500_000)}
    out = {}
    for name, text in texts.items():
        ids = np.asarray(tok.encode(text, disallowed_special=()), dtype=np.int32)
        out[name] = np.resize(ids, n)
    return out


class Ahead:
    """cupy_raw's embedding with another LIGHT_AHEAD (its module constant, read at each launch)."""

    def __init__(self, module, ahead):
        self.module, self.ahead = module, ahead

    def _with(self, fn, *args):
        keep, self.module.LIGHT_AHEAD = self.module.LIGHT_AHEAD, self.ahead
        try:
            return fn(*args)
        finally:
            self.module.LIGHT_AHEAD = keep

    def forward(self, *args):
        return self._with(self.module.forward, *args)

    def backward(self, *args):
        return self._with(self.module.backward, *args)


def mix_stats(tokens: np.ndarray) -> str:
    counts = np.bincount(tokens, minlength=V)
    return (f"distinct {int((counts > 0).sum())}, most frequent {int(counts.max())} positions "
            f"({counts.max() / tokens.size:.1%}), tokens at more than 32: {int((counts > 32).sum())}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="records go to <out>.json")
    ap.add_argument("--once", nargs=2, metavar=("MIX", "N"), help="one cupy_raw backward at MIX and B*T = N, "
                    "after a warm-up call (for a profiler), then exit")
    args = ap.parse_args()
    if not (args.out or args.once):
        ap.error("give --out or --once")
    if args.once:
        mixes = ("uniform", "english", "python")
        if args.once[0] not in mixes:
            ap.error(f"--once MIX: {args.once[0]!r} is not a mix; the mixes: {', '.join(mixes)}")
        if not args.once[1].isdigit() or not 0 < int(args.once[1]) <= 65536 or int(args.once[1]) % T:
            ap.error(f"--once N: {args.once[1]!r} must be a multiple of T = {T}, at most 65536 (B*T positions)")
    import cupy as cp
    import ml_dtypes
    from euler_core.measure.timing import CudaTimer, TimingConfig, measure
    from euler_core.registry import get_registry

    t0, bf, rng = time.time(), ml_dtypes.bfloat16, np.random.default_rng(3)
    timer = CudaTimer()
    tcfg = TimingConfig(warmup_s=0.02, warmup_calls=2, sample_s=2e-3, min_samples=7, max_samples=15,
                        min_time_s=0.05, max_time_s=0.4)

    def log(msg):
        print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)

    real = corpus_tokens(65536)
    registry = get_registry()
    if args.once:
        mix, N = args.once[0], int(args.once[1])
        tokens = rng.integers(0, V, N).astype(np.int32) if mix == "uniform" else real[mix][:N]
        log(f"N={N} {mix}: {mix_stats(tokens)}")
        impl = registry.find("cupy_raw:gather", "embedding").load()
        wte, wpe = cp.zeros((V, C), bf), cp.zeros((T, C), bf)
        saved = impl.forward({"tokens": cp.asarray(tokens.reshape(-1, T)), "wte": wte, "wpe": wpe}, {})[1]
        dout = cp.asarray(rng.standard_normal((N // T, T, C)).astype(bf))
        for _ in range(2):
            impl.backward(saved, dout, {"wte": cp.zeros((V, C), cp.float32), "wpe": cp.zeros((T, C), cp.float32)})
        cp.cuda.Device().synchronize()
        return
    variants = {}
    for q in VARIANTS:
        try:
            v = registry.find(q, "embedding")
        except ValueError as e:
            log(f"{q}: not installed ({e})")
            continue
        reason = v.unavailable_reason()
        if reason:
            log(f"{q}: unavailable ({reason})")
            continue
        variants[q] = v.load()
        if q == "cupy_raw:gather":
            other = 3 - variants[q].LIGHT_AHEAD  # 1 <-> 2
            variants[f"cupy_raw:gather LIGHT_AHEAD={other}"] = Ahead(variants[q], other)
    records = []
    for N in (16384, 32768, 65536):
        B = N // T
        mixes = {"uniform": rng.integers(0, V, N).astype(np.int32), **{k: v[:N] for k, v in real.items()}}
        dev = lambda a, dt=bf: cp.asarray(np.asarray(a, np.float32).astype(dt))  # noqa: E731
        wte, wpe = dev(rng.standard_normal((V, C)) * 0.02), dev(rng.standard_normal((T, C)) * 0.02)
        douts = [dev(rng.standard_normal((B, T, C))) for _ in range(2)]
        start_wte, start_wpe = rng.standard_normal((V, C)).astype(np.float32), rng.standard_normal((T, C)).astype(np.float32)
        nbytes = OPS["embedding"].bytes_moved({"tokens": np.empty((B, T), np.int32), "wte": wte}, {})["backward"]
        a, c = cp.empty((nbytes // 2,), cp.int8), cp.empty((nbytes // 2,), cp.int8)
        copy_us = measure(lambda i: cp.copyto(c, a), 1, timer, tcfg).p50 * 1e6  # reads and writes nbytes in all
        del a, c
        log(f"N={N}: copy of the spec's {nbytes / 1e6:.1f} MB: {copy_us:.1f} us")
        records.append(dict(N=N, impl="cupy-copy", us=round(copy_us, 2), bytes=nbytes))
        for mix, tokens_np in mixes.items():
            log(f"N={N} {mix}: {mix_stats(tokens_np)}")
            tokens = cp.asarray(tokens_np.reshape(B, T))
            ref_wte = start_wte.astype(np.float64)
            np.add.at(ref_wte, tokens_np, cp.asnumpy(douts[0]).astype(np.float64).reshape(N, C))
            ref_wpe = start_wpe.astype(np.float64) + cp.asnumpy(douts[0]).astype(np.float64).sum(0)
            for q, impl in variants.items():
                saved = impl.forward({"tokens": tokens, "wte": wte, "wpe": wpe}, {})[1]
                grads = [{"wte": cp.asarray(start_wte), "wpe": cp.asarray(start_wpe)} for _ in range(2)]
                for g in grads:
                    impl.backward(saved, douts[0], g)
                err = max(float(np.abs(cp.asnumpy(grads[0][k]) - r).max() / np.abs(r).max())
                          for k, r in (("wte", ref_wte), ("wpe", ref_wpe)))
                same = all(bool((grads[0][k] == grads[1][k]).all()) for k in ("wte", "wpe"))
                rec = dict(N=N, mix=mix, impl=q, err=err, repeatable=same)
                if err < (1e-2 if q.startswith("torch") else 1e-4):  # the torch reference: its dwte comes out in bf16
                    work = [{"wte": cp.asarray(start_wte), "wpe": cp.asarray(start_wpe)} for _ in range(2)]
                    us = measure(lambda i: impl.backward(saved, douts[i], work[i]), 2, timer, tcfg).p50 * 1e6
                    rec.update(us=round(us, 2), x_copy=round(copy_us / us, 3))
                del grads
                records.append(rec)
                log(" ".join(f"{k}={v}" for k, v in rec.items()))
                write_text_atomic(args.out + ".json", json.dumps(records, indent=1))  # a kill keeps the last
        del douts, wte, wpe
        cp.get_default_memory_pool().free_all_blocks()
    print("\n| B*T | mix | variant | us | x copy | max rel. error | repeatable |\n|---:|---|---|---:|---:|---:|---|")
    for r in records:
        if "mix" in r:
            print(f"| {r['N']} | {r['mix']} | {r['impl']} | {r.get('us', '-')} | {r.get('x_copy', '-')} | "
                  f"{r['err']:.1e} | {r['repeatable']} |")
    bad = [r for r in records if "mix" in r and (r["err"] >= 1e-4 or not r["repeatable"]) and not r["impl"].startswith("torch")]
    if bad:
        print(f"FAILED: {len(bad)} records wrong or not repeatable")
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
