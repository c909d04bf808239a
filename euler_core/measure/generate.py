"""`euler bench generate`: how fast `generate` makes text, beside Hugging Face transformers' `generate`
on the same machine.

    euler bench generate --backend numba --batches 1 --hf-python ~/torch-venv/bin/python --out reports/generate-cpu
    euler bench generate --backend triton --dtype bfloat16 --presets gpt2,gpt2-medium --batches 1,64 \\
                         --hf-python python3 --hf-modes eager,compiled --out runs/generate-h200

The workload (issue 14's): GPT-2 shapes with random weights (speed only), a prompt of --prompt-len
random tokens in every row, greedy, --new-tokens tokens a row (no stop token: every row makes every
token). Each measurement is the real `generate()`, timed twice per repeat:

    total  generate(max_new_tokens = new)   prefill, then new - 1 decoding steps
    ttft   generate(max_new_tokens = 1)     the time to first token: prefill and one sample

and from their medians: prefill tokens/s = B * prompt_len / ttft, decode tokens/s = B * (new - 1) /
(total - ttft), generation tokens/s = B * new / total (prefill included: the issue's figure), and
the decoding step's bandwidth: the bytes one step must read (every parameter once, at the
activations' dtype, and the keys and values of the cache at its mean length) over its time, as a
fraction of the device's copy bandwidth measured in the same run (peaks.py).

Before timing (validate before timing): one decoding step's logits against the model's full
forward over the same tokens, within the dtype's tolerance; on the GPU also the tokens of a short
greedy generation with the CUDA graph against the same without it (the same kernels: equal).

Hugging Face runs in its own process and environment (--hf-python: a Python with torch and
transformers; euler_core/measure/hf_generate.py), never in NanoEuler's. Ours and theirs alternate,
--rounds times, so that other work on a shared machine falls on both alike; the load average is
recorded with every measurement. Writes records.jsonl (one record per implementation, model, batch
and round), run.json and report.md to --out, and prints the report's table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .records import RecordWriter, environment, loadavg, now_iso

HF_SCRIPT = Path(__file__).with_name("hf_generate.py")
#: logits of one cached decoding step against the full forward: largest |difference| / largest |logit|
CHECK_TOL = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}


@dataclass
class GenerateBenchConfig:
    backend: str = "numba"
    presets: list = field(default_factory=lambda: ["gpt2"])
    dtype: str = "float32"
    batches: list = field(default_factory=lambda: [1])
    prompt_len: int = 448
    new_tokens: int = 64
    repeats: int = 3
    rounds: int = 1
    graph: bool = True
    hf_python: str | None = None
    hf_modes: list = field(default_factory=lambda: ["eager"])
    hf_threads: int = 0
    ours: bool = True  # False: Hugging Face's side only (its records render beside ours of another run)
    seed: int = 0


def run(cfg: GenerateBenchConfig, out_dir, argv=None) -> list[dict]:
    from ..config import preset
    from ..model import GPT
    from .peaks import measure_peaks
    from ..kernels import Kernels
    writer = RecordWriter(out_dir)
    device = Kernels(cfg.backend, dtype=cfg.dtype).device
    env = environment(device)
    peaks = measure_peaks(device, cfg.dtype)
    writer.write_run({"kind": "generate", "config": asdict(cfg), "argv": argv, "started": now_iso(),
                      "env": env, "peaks": peaks})
    try:
        for name in cfg.presets:
            # Hugging Face's side alone needs the shape only: no weights to draw
            model = GPT(preset(name), cfg.backend, dtype=cfg.dtype, seed=cfg.seed if cfg.ours else None)
            checks = {}
            for batch in cfg.batches if cfg.ours else []:
                _say(f"{name} batch {batch}: checking before timing")
                checks[batch] = validate(model, batch, cfg)
            for r in range(cfg.rounds):
                for batch in cfg.batches if cfg.ours else []:
                    writer.write(_ours(model, name, batch, cfg, peaks, checks[batch], r))
                if cfg.hf_python:  # one process for every batch size (its start costs seconds)
                    _hf(cfg, name, model, cfg.batches, r, writer.write)
            del model
    finally:
        records = writer.records
        writer.close()
    table = report_table(records)
    (Path(out_dir) / "report.md").write_text(render(records, env, peaks, cfg, argv), encoding="utf-8")
    print(table)
    return records


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng([seed, batch])
    return [list(map(int, row)) for row in rng.integers(0, vocab, size=(batch, length))]


def validate(model, batch: int, cfg: GenerateBenchConfig) -> dict:
    """Refuse to time a wrong generation: a decoding step's logits against the full forward, and on
    the GPU graph against no graph. Raises RuntimeError with what differed."""
    from ..device import to_device
    from ..generate import generate
    from ..kvcache import KVCache, forward_cached
    V = model.config.vocab_size
    length = min(cfg.prompt_len, 64)
    prompts = np.array(_prompts(batch, length + 1, V, cfg.seed), dtype=np.int32)  # (B,T+1)
    cache = KVCache(model, batch)
    forward_cached(model, prompts[:, :length], cache)
    step = to_device(forward_cached(model, prompts[:, length:], cache)[:, 0, :V], "cpu").astype(np.float64)
    full, _ = model.forward(prompts)
    full = to_device(full[:, -1, :V], "cpu").astype(np.float64)
    err = float(np.abs(step - full).max() / np.abs(full).max())
    if not err <= CHECK_TOL[cfg.dtype]:
        raise RuntimeError(f"bench generate: a cached decoding step's logits differ from the full forward's by "
                           f"{err:.2e} of the largest logit (tolerance {CHECK_TOL[cfg.dtype]:.0e}): not timing it")
    result = {"check_logits_rel_err": err}
    if model.device == "cuda" and cfg.graph:
        short = [p[:length] for p in prompts.tolist()]
        with_graph = generate(model, short, 8, temperature=0, graph=True)
        without = generate(model, short, 8, temperature=0, graph=False)
        if with_graph != without:
            raise RuntimeError("bench generate: greedy tokens with the CUDA graph differ from those without it: "
                               f"{with_graph[0]} vs {without[0]}: not timing it")
        result["check_graph_tokens"] = "equal"
    return result


def _ours(model, name: str, batch: int, cfg: GenerateBenchConfig, peaks: dict, check: dict, round_: int) -> dict:
    from ..generate import generate, graph_in_use
    prompts = _prompts(batch, cfg.prompt_len, model.config.vocab_size, cfg.seed)
    load = loadavg()

    def timed(new: int) -> float:
        t = time.perf_counter()
        out = generate(model, prompts, new, temperature=0, graph=cfg.graph)
        elapsed = time.perf_counter() - t  # generate returns host lists: the GPU is done
        assert all(len(o) == new for o in out)
        return elapsed

    _say(f"{name} batch {batch} round {round_}: ours (warm-up)")
    t0 = time.perf_counter()
    timed(cfg.new_tokens)  # compiles, allocates the cache, captures the decoding graph
    timed(1)
    warmup = time.perf_counter() - t0
    firsts, totals = [], []
    for _ in range(cfg.repeats):
        firsts.append(timed(1))
        totals.append(timed(cfg.new_tokens))
    record = {"impl": "nanoeuler", "backend": cfg.backend, "model": name, "device": model.device, "dtype": cfg.dtype,
              "batch": batch, "prompt_len": cfg.prompt_len, "new_tokens": cfg.new_tokens, "graph": graph_in_use(model),
              "round": round_, "warmup_s": warmup, "ttft_s": statistics.median(firsts),
              "total_s": statistics.median(totals), "ttft_all_s": firsts, "total_all_s": totals,
              "load_before": load, "load_after": loadavg(), **check}
    record.update(derived(record))
    record.update(_bandwidth(model, record, peaks))
    _say(f"  {record['gen_tok_s']:.1f} generated tokens/s, decode {_f(record['decode_tok_s'], '.1f')} tokens/s, "
         f"TTFT {record['ttft_s'] * 1e3:.1f} ms")
    return record


def derived(r: dict) -> dict:
    """The rates of a record with ttft_s and total_s (ours and Hugging Face's alike)."""
    B, P, new = r["batch"], r["prompt_len"], r["new_tokens"]
    decode = r["total_s"] - r["ttft_s"]  # <= 0 only in noise at toy sizes: no decode rate then
    ok = new > 1 and decode > 0
    return {"prefill_tok_s": B * P / r["ttft_s"], "decode_tok_s": B * (new - 1) / decode if ok else None,
            "gen_tok_s": B * new / r["total_s"], "decode_step_s": decode / (new - 1) if ok else None}


def _bandwidth(model, r: dict, peaks: dict) -> dict:
    """Bytes a decoding step must read (every parameter once; the cache's keys and values at its mean
    length) over the step's time, and that as a fraction of the measured copy bandwidth."""
    if not r.get("decode_step_s"):
        return {}
    cfg = model.config
    itemsize = model.params["wte.weight"].dtype.itemsize
    params = model.num_parameters - cfg.block_size * cfg.n_embd  # wpe: one row a token, not all
    mean_len = r["prompt_len"] + r["new_tokens"] / 2
    cache = 2 * cfg.n_layer * r["batch"] * mean_len * cfg.n_embd
    step_bytes = (params + cache) * itemsize
    gbps = step_bytes / r["decode_step_s"] / 1e9
    return {"decode_step_bytes": step_bytes, "decode_gbps": gbps, "decode_bw_frac": gbps * 1e9 / peaks["peak_bw"]}


def _hf(cfg: GenerateBenchConfig, name: str, model, batches: list, round_: int, write) -> None:
    """Hugging Face's measurements for one model and every batch size, from its own process; each
    record is written as it arrives (a stage cut short keeps what it measured), and the process is
    ended with ours."""
    shape, device = model.config, model.device
    cmd = [cfg.hf_python, str(HF_SCRIPT), "--model", name, "--n-layer", str(shape.n_layer), "--n-head",
           str(shape.n_head), "--n-embd", str(shape.n_embd), "--vocab-size", str(shape.vocab_size),
           "--block-size", str(shape.block_size), "--device", device, "--dtype", cfg.dtype,
           "--batches", ",".join(map(str, batches)), "--modes", ",".join(cfg.hf_modes), "--prompt-len",
           str(cfg.prompt_len), "--new-tokens", str(cfg.new_tokens), "--repeats", str(cfg.repeats), "--threads",
           str(cfg.hf_threads), "--seed", str(cfg.seed)]
    _say(f"{name} round {round_}: Hugging Face ({', '.join(cfg.hf_modes)}), batches {batches}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    load = loadavg()
    got = 0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            r.update(round=round_, load_before=load, load_after=loadavg())
            if "error" in r:
                _say(f"  {r['impl']} batch {r['batch']}: {r['error']}")
            else:
                r.update(derived(r))
                _say(f"  {r['impl']} batch {r['batch']}: {r['gen_tok_s']:.1f} generated tokens/s, "
                     f"decode {_f(r['decode_tok_s'], '.1f')} tokens/s")
            write(r)
            got += 1
            load = loadavg()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if not got:
        error = f"exit {proc.returncode}: {proc.stderr.read().strip()[-800:]}"
        _say(f"  Hugging Face: {error}")
        write({"impl": "hf", "model": name, "batch": batches, "round": round_, "error": error})


# ---- the report -----------------------------------------------------------------------------------
def _median(records, key):
    values = [r[key] for r in records if r.get(key) is not None]
    return statistics.median(values) if values else None


def summary(records: list[dict]) -> list[dict]:
    """Per (model, batch, implementation): the medians over rounds, and ours against each other."""
    groups: dict = {}
    for r in records:
        if "error" in r:
            continue
        groups.setdefault((r["model"], r["batch"]), {}).setdefault(r["impl"], []).append(r)
    rows = []
    for (model, batch), impls in groups.items():
        ours = impls.get("nanoeuler")
        for impl, rs in sorted(impls.items(), key=lambda kv: kv[0] != "nanoeuler"):
            row = {"model": model, "batch": batch, "impl": impl, "rounds": len(rs), "graph": any(r.get("graph") for r in rs),
                   **{k: _median(rs, k) for k in ("gen_tok_s", "decode_tok_s", "prefill_tok_s", "ttft_s",
                                                   "decode_step_s", "decode_bw_frac")}}
            if ours and impl != "nanoeuler":
                row["ours_gen_x"] = _median(ours, "gen_tok_s") / row["gen_tok_s"]
                mine = _median(ours, "decode_tok_s")
                row["ours_decode_x"] = mine / row["decode_tok_s"] if mine and row["decode_tok_s"] else None
            rows.append(row)
    return rows


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def report_table(records: list[dict]) -> str:
    lines = ["| model | batch | implementation | generated tok/s | decode tok/s | prefill tok/s | TTFT ms | "
             "decode step ms | decode bandwidth | ours: generation x | ours: decode x |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summary(records):
        impl = s["impl"] + (" (CUDA graph)" if s["graph"] else "")
        lines.append(f"| {s['model']} | {s['batch']} | {impl} | {_f(s['gen_tok_s'], ',.1f')} | "
                     f"{_f(s['decode_tok_s'], ',.1f')} | {_f(s['prefill_tok_s'], ',.0f')} | "
                     f"{_f(s['ttft_s'] and s['ttft_s'] * 1e3, '.1f')} | "
                     f"{_f(s['decode_step_s'] and s['decode_step_s'] * 1e3, '.2f')} | "
                     f"{_f(s['decode_bw_frac'] and s['decode_bw_frac'] * 100, '.0f')}{'%' if s['decode_bw_frac'] else ''} | "
                     f"{_f(s.get('ours_gen_x'), '.2f')}{'x' if s.get('ours_gen_x') else ''} | "
                     f"{_f(s.get('ours_decode_x'), '.2f')}{'x' if s.get('ours_decode_x') else ''} |")
    errors = [r for r in records if "error" in r]
    for r in errors:
        lines.append(f"\n{r.get('impl')} {r.get('model')} batch {r.get('batch')}: failed: {r['error']}")
    return "\n".join(lines)


def render(records: list[dict], env: dict, peaks: dict, cfg: GenerateBenchConfig, argv) -> str:
    loads = [x[0] for r in records for x in (r.get("load_before"), r.get("load_after")) if x]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(env.get("versions", {}).items()) if v)
    hf = next((r for r in records if r.get("impl", "").startswith("hf") and "torch" in r), None)
    return "\n".join([
        f"# Generation speed: NanoEuler ({cfg.backend}, {cfg.dtype}) beside Hugging Face transformers",
        "",
        f"Device: {env['device']}; {env['os']}; {versions}"
        + (f"; Hugging Face: torch {hf['torch']}, transformers {hf['transformers']}" if hf else "") + ".  ",
        f"Commit {env.get('git_sha') or '?'}{' (dirty)' if env.get('git_dirty') else ''}; "
        f"`{' '.join(argv or ['euler', 'bench', 'generate'])}`.  ",
        f"Workload: GPT-2 shapes, random weights, a {cfg.prompt_len}-token prompt a row, greedy, "
        f"{cfg.new_tokens} new tokens a row; median of {cfg.repeats} repeats, {cfg.rounds} round(s) alternating "
        "ours and Hugging Face's. Copy bandwidth measured in this run: "
        f"{peaks['peak_bw'] / 1e9:,.1f} GB/s.  ",
        (f"Load average (1 min) seen: min {min(loads):.2f}, max {max(loads):.2f}." if loads else ""),
        "",
        "generated tok/s = B x new tokens / the whole generate() call (prefill included); decode tok/s = "
        "B x (new - 1) / (total - TTFT); prefill tok/s = B x prompt / TTFT; decode bandwidth = the bytes a "
        "decoding step must read (parameters, the cache) / its time, as a share of the copy bandwidth.",
        "",
        report_table(records),
        "",
    ])
