"""`euler bench ops`: time every selected variant of every op, forward and backward separately.

For each (op, shape, dtype) the run
1. makes random inputs of the timed shape, rounded to the dtype, on each variant's device (the op
   spec's example; CuPy's generator on the GPU: seconds, where NumPy would spend minutes making
   gigabytes of logits), and from them, once per device, the float64 reference: the registry's
   naive:reference variant on float64 copies of those inputs, on the host for CPU variants and on
   the GPU for CUDA ones (the naive kernels' NumPy code runs on CuPy arrays). A CPU variant is
   benchmarked only at shapes whose host reference is affordable (shapes.host_reference_refusal:
   every shape of `small` and `mid`);
2. for each variant: runs the conformance suite for that op and dtype (unless asked not to), then
   checks the variant, through the dispatcher, against that reference on those very inputs: the
   call that is then timed, at its shapes, dtypes and so its launch configuration (a kernel that
   picks a split or a tile from N is checked with the one it is timed with; STYLE.md 6). A variant
   that fails either is recorded as failed, with the reason, and is not timed;
3. times the variant's forward and backward as the model calls them (forward with out=None, backward
   with the parameter-gradient buffers only), directly on its implementation (the dispatcher's
   Python-side validation is not part of a kernel's time), rotating through copies of the checked
   inputs (timing.py says how samples are taken on the CPU and the GPU);
4. derives TFLOP/s and GB/s from the op spec's counts (STYLE.md 7), the fraction of the roofline
   built from the peaks measured at the start of this run (peaks.py), and at the end the speedup of
   every measurement against the baseline of its op.

The baseline (--baseline) is a variant, or a backend: then each of its variants of the op is timed
and, per shape and dtype, the fastest (forward + backward) is the denominator, so a reference with
several implementations (PyTorch's attention backends) is represented by its best. The baseline's
variants are *references*: what ours are measured against, not ours to fix. A reference goes
through the same conformance suite and check, and is timed even when it misses our tolerance (not
when it raises); its records then keep check/conformance "failed" with the reason in `message`,
`reference` true, and the report marks them. `--backend auto` never chooses such a variant.

Records (records.py) are written as they are made; `euler bench report` renders them. An interrupted
run (Ctrl-C, or `timeout`'s SIGTERM under `euler bench ops`) still gets its speedups and run.json
(with "interrupted": true) before it stops.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from euler_core.device import array_module, to_device
from euler_core.kernels import Kernel, Selection, select_variants
from euler_core.numerics import CheckFailed, compare, is_float, np_dtype, param_grad_dtype, tolerance
from euler_core.ops import OPS
from euler_core.registry import Registry, Variant, get_registry

from . import records as rec
from .peaks import measure_peaks
from .shapes import SHAPE_SETS, dims_text, host_reference_refusal, shapes_for
from .timing import TimingConfig, measure, timer_for

DIRECTIONS = ("forward", "backward")


@dataclass
class BenchConfig:
    backend: str = "all"               # "all", or comma-separated backends / backend:variant / op=choice
    ops: list[str] | None = None       # default: every op
    shapes: list[str] = field(default_factory=lambda: ["small"])
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    baseline: str | None = "naive"     # a selection string; None: no speedups
    conformance: bool = True           # run the conformance suite on a variant before timing it
    seed: int = 0
    timing: TimingConfig = field(default_factory=TimingConfig)
    peak_size: str | None = None       # "small"/"large"; default from the shape sets
    peak_timing: TimingConfig | None = None


# ---- which variants --------------------------------------------------------------------------------
def select(text: str, ops, registry: Registry) -> list[Variant]:
    """The variants that `text` names: 'all', backends ('naive,numba'), variants ('numba:rows'),
    per-op choices ('attention=numba:flash'), comma-separated, in any mix."""
    tokens = [t.strip() for t in (text or "all").split(",") if t.strip()]
    if not tokens or "all" in tokens:
        return select_variants(None, ops, registry)
    return select_variants(tokens, ops, registry)


def baseline_variants(text: str | None, op: str, registry: Registry) -> list[Variant]:
    """The baseline candidates of `op` named by a selection string: a variant, or every variant of a
    backend (the fastest of them at each shape is the baseline there)."""
    if not text:
        return []
    sel = Selection.parse(text)
    choice = sel.overrides.get(op, sel.default)
    if choice is None:
        return []
    name, _, variant_name = choice.partition(":")
    if name not in registry.backends:
        return []
    candidates = registry.backends[name].variants_of(op)
    if variant_name:
        candidates = [v for v in candidates if v.name == variant_name]
    return candidates


# ---- the reference and the check --------------------------------------------------------------------
#: the variant whose float64 results every other is checked against, looked up in the registry
REFERENCE = "naive:reference"


@dataclass
class Inputs:
    typed: dict            # inputs in the tested dtype (NumPy, or CuPy when made on the GPU)
    attrs: dict            # the example's attributes (not filled)
    dout: object           # the output gradient (None for adamw)


@dataclass
class Reference(Inputs):
    expected: dict         # float64: 'out' and a gradient per differentiable input; adamw: param, m, v


def make_inputs(op: str, dims: dict, dtype: str, seed: int, device: str) -> Inputs:
    """Random inputs and output gradient of `op` at `dims` in `dtype`, made on `device` by the op
    spec's example (its NumPy calls are also CuPy's)."""
    spec = OPS[op]
    xp = array_module(device)
    rng = xp.random.default_rng(seed)
    inputs, attrs = spec.example(dims, "float32", rng)
    dt = np_dtype(dtype)
    typed = {k: (v.astype(dt) if is_float(v) else v) for k, v in inputs.items() if v is not None}
    if spec.output is None:
        return Inputs(typed, attrs, None)
    full = spec.fill_attrs(attrs)
    dout = rng.standard_normal(spec.output_shape(typed, full), dtype=np.float32)
    dout[dout == 0] = 0.5
    return Inputs(typed, attrs, dout.astype(np_dtype(spec.output_dtype(typed, full))))


def make_reference(op: str, dims: dict, dtype: str, seed: int, registry: Registry | None = None,
                   device: str = "cpu") -> Reference:
    """make_inputs on `device`, and what the float64 reference variant computes from them there
    (expected values stay on `device`: the comparison runs there too, numerics.compare)."""
    spec = OPS[op]
    inputs = make_inputs(op, dims, dtype, seed, device)
    exact = {k: (v.astype(np.float64) if is_float(v) else v) for k, v in inputs.typed.items()}
    full = spec.fill_attrs(inputs.attrs)
    naive = (registry or get_registry()).find(REFERENCE, op).load()
    if spec.output is None:  # adamw updates param, m, v in place
        state = {k: v.copy() for k, v in exact.items()}
        naive.forward(state, full, None)
        return Reference(inputs.typed, inputs.attrs, None, {k: state[k] for k in ("param", "m", "v")})
    out, saved = naive.forward(exact, full, None)
    grads = {p: np.zeros_like(exact[p]) for p in spec.params if p in exact}
    result = naive.backward(saved, inputs.dout.astype(np.float64), grads)
    expected = {"out": out}
    expected.update({f"d{n}": result[n] for n in spec.differentiable if n in exact})
    return Reference(inputs.typed, inputs.attrs, inputs.dout, expected)


def _reference_for(op: str, dims: dict, dtype: str, seed: int, registry, device: str, log):
    """make_reference on `device`; where that raises on a GPU (its float64 temporaries out of the
    card's memory, say), the same inputs' reference on the host instead (the check then moves the
    variant's results there). The error as a string when neither can be computed: no check, so no
    timing."""
    try:
        return make_reference(op, dims, dtype, seed, registry, device)
    except Exception as e:
        if device == "cpu":
            return f"{type(e).__name__}: {e}"
        first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    log(f"{op} {dims_text(dims)}: the float64 reference on {device} raised {first}; computing it on the host")
    try:
        return make_reference(op, dims, dtype, seed, registry, "cpu")
    except Exception as e:
        return f"{first} on {device}, then {type(e).__name__}: {e} on the host"


def _grad_dtype(param):
    """The parameter-gradient buffers' dtype, as in training: float32 for 16-bit parameters."""
    return np_dtype(param_grad_dtype(str(param.dtype)))


OUTLIERS_PER_MILLION = 25.0  # elements past the suite's bound the at-shape check allows (shapes.py says why)
OUTLIER_FACTOR = 5.0         # ... by at most this factor


def check_variant(variant: Variant, op: str, ref: Reference, dtype: str) -> tuple[str, str]:
    """('passed', note) when the variant matches the reference at these inputs, forward and backward,
    within the conformance suite's tolerance for `dtype` (the note names any outliers let pass:
    euler_core.numerics.compare's allowance of OUTLIERS_PER_MILLION, for checks on millions of
    elements); ('wrong', how) when it computes something else; ('raised', what) when it crashed."""
    spec = OPS[op]
    try:
        kernel = Kernel(variant)
        inputs = {k: to_device(v.copy(), variant.device) for k, v in ref.typed.items()}
        out, saved = kernel.forward(inputs, ref.attrs)
        fwd = tolerance(dtype, "forward", variant.dtypes)
        notes = []

        def check(name, got, expected, tol):
            notes.append(compare(name, got, expected, tol, outliers_per_million=OUTLIERS_PER_MILLION,
                                 outlier_factor=OUTLIER_FACTOR))

        if spec.output is None:
            for k in ("param", "m", "v"):
                check(f"{op} {k} after the update", inputs[k], ref.expected[k], fwd)
            return "passed", "; ".join(filter(None, notes))
        check(f"{op} forward output", out, ref.expected["out"], fwd)
        xp = array_module(variant.device)
        grads = {p: xp.zeros(inputs[p].shape, dtype=_grad_dtype(inputs[p])) for p in spec.params if p in inputs}
        result = kernel.backward(saved, to_device(ref.dout.copy(), variant.device), grads)
        grad_tol = tolerance(dtype, "gradient", variant.dtypes)
        for name in spec.differentiable:
            if f"d{name}" in ref.expected:
                if result.get(name) is None:
                    return "wrong", f"{op} backward returned no gradient for '{name}'"
                check(f"{op} gradient of {name}", result[name], ref.expected[f"d{name}"], grad_tol)
    except CheckFailed as e:
        return "wrong", str(e)
    except Exception as e:  # a crash is a failure of the variant
        return "raised", f"raised {type(e).__name__}: {e}"
    return "passed", "; ".join(filter(None, notes))


# ---- timing one variant ----------------------------------------------------------------------------
def _nbytes(arrays) -> int:
    return int(sum(a.size * a.dtype.itemsize for a in arrays if hasattr(a, "dtype")))


def time_variant(variant: Variant, op: str, ref: Inputs, cfg: TimingConfig, timer) -> dict:
    """{direction: Timing} of the variant's implementation on copies of the checked inputs."""
    spec = OPS[op]
    impl = variant.load()
    attrs = spec.fill_attrs(ref.attrs)
    device = variant.device
    xp = array_module(device)
    per_set = _nbytes(ref.typed.values()) + (_nbytes([ref.dout]) if ref.dout is not None else 0)
    n_sets = cfg.input_sets(per_set)
    sets = [{k: to_device(v.copy(), device) for k, v in ref.typed.items()} for _ in range(n_sets)]
    timer.sync()
    timings = {"forward": measure(lambda i: impl.forward(sets[i], attrs, None), n_sets, timer, cfg)}
    if spec.output is not None:
        saved = [impl.forward(s, attrs, None)[1] for s in sets]
        douts = [to_device(ref.dout.copy(), device) for _ in range(n_sets)]
        grads = [{p: xp.zeros(s[p].shape, dtype=_grad_dtype(s[p])) for p in spec.params if p in s} for s in sets]
        timer.sync()
        timings["backward"] = measure(lambda i: impl.backward(saved[i], douts[i], grads[i]), n_sets, timer, cfg)
        del saved, douts, grads
    del sets
    return timings


# ---- the run -----------------------------------------------------------------------------------------
#: where the conformance suite registers the function that gives its verdict on one variant, op and
#: dtype (conformance.runner.verdict): the core runs the suite without importing it
SUITE_ENTRY_POINTS = "nanoeuler.suites"


def _conformance(variant: Variant, op: str, dtype: str, registry: Registry, seed: int) -> tuple[str, str]:
    """('passed'|'failed'|'skipped'|'not run', first failure or skip reason) of every installed suite
    for one op and dtype."""
    from importlib.metadata import entry_points
    suites = sorted(entry_points(group=SUITE_ENTRY_POINTS), key=lambda ep: ep.name)
    if not suites:
        return "not run", f"no conformance suite is installed (entry-point group {SUITE_ENTRY_POINTS})"
    for suite in suites:
        status, message = suite.load()(variant, op, dtype, registry, seed)
        if status != "passed":
            return status, message
    return "passed", ""


def roofline(flops: float, nbytes: float, seconds: float, peaks: dict) -> dict:
    """Throughput and the fraction of the roofline at this intensity (ideal time / measured time).
    A call that computes and moves nothing (residual's backward hands back its output gradient as
    both input gradients) has no roofline: its fraction is None, its bound "none"."""
    if flops == 0 and nbytes == 0:
        return {"tflops": 0.0, "gbps": 0.0, "intensity": None, "bound": "none", "roofline_fraction": None,
                "peak_flops": peaks["peak_flops"], "peak_bw": peaks["peak_bw"]}
    t_compute = flops / peaks["peak_flops"]
    t_memory = nbytes / peaks["peak_bw"]
    return {"tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9,
            "intensity": flops / nbytes if nbytes else None,
            "bound": "compute" if t_compute >= t_memory else "memory",
            "roofline_fraction": max(t_compute, t_memory) / seconds,
            "peak_flops": peaks["peak_flops"], "peak_bw": peaks["peak_bw"]}


def add_speedups(records: list[dict], baseline_text: str | None, registry: Registry) -> list[dict]:
    """Set 'baseline' and 'speedup' (baseline p50 / p50) on every timed op record. Where the baseline
    has several variants, the one with the least forward + backward median at the record's shape and
    dtype is the baseline there: of those that passed the check, if any did (only variants timed in
    every direction compete)."""
    times: dict[tuple, dict] = {}   # (variant, op, shape set, shape, dtype) -> {direction: p50}
    wrong = set()
    for r in records:
        if r.get("kind") == "op" and r.get("status") == "ok":
            key = (r["variant"], r["op"], r["shape_set"], r["shape"], r["dtype"])
            times.setdefault(key, {})[r["direction"]] = r["p50_s"]
            if r.get("check") == "failed" or r.get("conformance") == "failed":
                wrong.add(key)
    for r in records:
        if r.get("kind") != "op" or r.get("status") != "ok":
            continue
        candidates = [v.qualname for v in baseline_variants(baseline_text, r["op"], registry)]
        if not candidates:
            continue
        n_directions = len(DIRECTIONS) if OPS[r["op"]].output is not None else 1
        timed = [((q, r["op"], r["shape_set"], r["shape"], r["dtype"]) in wrong, sum(t.values()), q) for q in candidates
                 if len(t := times.get((q, r["op"], r["shape_set"], r["shape"], r["dtype"]), {})) == n_directions]
        if not timed:
            r["baseline"], r["speedup"] = candidates[0], None
            continue
        base = min(timed)[2]
        r["baseline"] = base
        r["speedup"] = times[(base, r["op"], r["shape_set"], r["shape"], r["dtype"])][r["direction"]] / r["p50_s"]
    return records


def run(cfg: BenchConfig, out_dir, registry: Registry | None = None, log=print, argv=None,
        copy_to_cache: bool = True) -> list[dict]:
    """Run the benchmark, write records to `out_dir` (and a copy to the bench cache); return them."""
    registry = registry or get_registry()
    ops = list(cfg.ops) if cfg.ops else list(OPS)
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {unknown}; ops: {', '.join(OPS)}")
    for name in cfg.shapes:
        if name not in SHAPE_SETS:
            raise ValueError(f"unknown shape set {name!r}; sets: {', '.join(SHAPE_SETS)}")
    shapeless = [op for op in ops if not shapes_for(cfg.shapes, op)]
    if shapeless and cfg.ops:
        raise ValueError(f"no benchmark shapes for op(s) {shapeless} in {', '.join(cfg.shapes)} "
                         "(euler_core/measure/shapes.py)")
    ops = [op for op in ops if op not in shapeless]  # e.g. inference-only ops that training never times
    variants = select(cfg.backend, ops, registry)
    references = set()
    for op in ops:  # the baseline is timed too, so every speedup has its denominator
        for base in baseline_variants(cfg.baseline, op, registry):
            references.add(base.qualname)
            if all(v is not base for v in variants):
                variants.append(base)
    if not variants:
        raise ValueError(f"--backend {cfg.backend!r} selects no variant of {', '.join(ops)}")

    devices = sorted({v.device for v in variants if v.unavailable_reason() is None})
    run_id = rec.new_run_id(rec.device_info("cpu")["device_key"] if "cuda" not in devices
                            else rec.device_info("cuda")["device_key"])
    envs = {d: rec.environment(d) for d in devices}
    writer = rec.RecordWriter(out_dir)
    started, load_before = rec.now_iso(), rec.loadavg()
    peak_size = cfg.peak_size or ("small" if set(cfg.shapes) <= {"small"} else "large")
    peaks: dict = {}

    def base_record(device: str) -> dict:
        env = envs.get(device) or {"device_kind": device}
        return {"schema": rec.SCHEMA, "run_id": run_id, "time": rec.now_iso(), "loadavg": rec.loadavg(), **env}

    def peak_for(device: str, dtype: str) -> dict:
        if (device, dtype) not in peaks:
            p = measure_peaks(device, dtype, peak_size, cfg.peak_timing)
            peaks[device, dtype] = p
            writer.write({**base_record(device), **p})
            log(f"peak {device} {dtype}: matmul {p['peak_flops'] / 1e12:.3g} TFLOP/s (n={p['matmul']['n']}), "
                f"copy {p['peak_bw'] / 1e9:.3g} GB/s")
        return peaks[device, dtype]

    conformance_cache: dict = {}
    log(f"bench {run_id}: {len(variants)} variants, ops {', '.join(ops)}, shapes {', '.join(cfg.shapes)}, "
        f"dtypes {', '.join(cfg.dtypes)}; load average {load_before}")
    if load_before and load_before[0] > 0.5 * rec.cores():
        log(f"warning: the machine is busy (load average {load_before[0]} on {rec.cores()} cores): "
            "CPU timings will be noisy; the load is recorded with every measurement")
    interrupted = False
    try:
        for op in ops:
            op_variants = [v for v in variants if v.op == op]
            spec = OPS[op]
            directions = DIRECTIONS if spec.output is not None else ("forward",)
            for dtype in cfg.dtypes:
                for set_name, label, dims in shapes_for(cfg.shapes, op):
                    where = f"the benchmarked shape {dims_text(dims)}"
                    refs: dict = {}  # device -> the Reference there, or why it could not be computed
                    for variant in op_variants:
                        common = {"kind": "op", "op": op, "variant": variant.qualname, "backend": variant.backend,
                                  "shape_set": set_name, "shape": label, "dims": dims, "dims_text": dims_text(dims),
                                  "dtype": dtype, "reference": variant.qualname in references}
                        name = f"{op:<12} {variant.qualname:<24} {label:<10} {dtype}"

                        def emit(status, message="", **extra):
                            for direction in directions:
                                writer.write({**base_record(variant.device), **common, "direction": direction,
                                              "status": status, "message": message, **extra})

                        reason = variant.unavailable_reason()
                        if reason is None and dtype not in variant.dtypes:
                            reason = f"the variant does not take {dtype} (it takes {', '.join(variant.dtypes)})"
                        if reason is None and variant.device == "cpu":
                            reason = host_reference_refusal(op, dims)
                        if reason:
                            emit("skipped", reason)
                            log(f"{name}: skipped ({reason})")
                            continue
                        conf, conf_message = "not run", ""
                        if cfg.conformance:
                            key = (variant.qualname, op, dtype)
                            if key not in conformance_cache:
                                conformance_cache[key] = _conformance(variant, op, dtype, registry, cfg.seed)
                            conf, conf_message = conformance_cache[key]
                            if conf == "failed" and not common["reference"]:
                                emit("failed", "conformance: " + conf_message, check="not run", conformance=conf)
                                log(f"{name}: FAILED conformance, not timed\n    {conf_message.splitlines()[0]}")
                                continue
                        if variant.device not in refs:
                            refs[variant.device] = _reference_for(op, dims, dtype, cfg.seed, registry,
                                                                  variant.device, log)
                        ref = refs[variant.device]
                        if isinstance(ref, str):
                            emit("failed", f"the float64 reference at {where} on {variant.device} raised {ref}",
                                 check="not run", conformance=conf)
                            log(f"{name}: not checked, so not timed: the reference raised {ref.splitlines()[0]}")
                            continue
                        check, wrong = check_variant(variant, op, ref, dtype)
                        if check == "raised" or (check == "wrong" and not common["reference"]):
                            emit("failed", f"wrong at {where}: {wrong}", check="failed", conformance=conf)
                            log(f"{name}: FAILED the check at this shape, not timed\n    {wrong.splitlines()[0]}")
                            continue
                        notes = ([f"conformance: {conf_message}"] if conf == "failed" else []) + \
                                ([f"wrong at {where}: {wrong}"] if check == "wrong" else [])
                        if notes:
                            log(f"{name}: a reference, timed although it FAILED " + "; ".join(
                                n.splitlines()[0] for n in notes))
                        if check == "passed" and wrong:
                            notes.append(f"passed at {where}: {wrong}")
                            log(f"{name}: passed at {where}: {wrong}")
                        peak = peak_for(variant.device, dtype)
                        try:
                            timings = time_variant(variant, op, ref, cfg.timing, timer_for(variant.device))
                        except Exception as e:  # e.g. out of memory at the timed shape: the run goes on
                            emit("failed", f"raised while timed at {dims_text(dims)}: {type(e).__name__}: {e}",
                                 check="passed" if check == "passed" else "failed", conformance=conf)
                            log(f"{name}: FAILED while timed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                            continue
                        full = spec.fill_attrs(ref.attrs)
                        flops, nbytes = spec.flops(ref.typed, full), spec.bytes_moved(ref.typed, full)
                        for direction, t in timings.items():
                            r = {**base_record(variant.device), **common, "direction": direction, "status": "ok",
                                 "message": "\n".join(notes), "check": "passed" if check == "passed" else "failed",
                                 "conformance": conf,
                                 "p20_s": t.p20, "p50_s": t.p50, "p80_s": t.p80, "samples": len(t.samples),
                                 "calls_per_sample": t.calls_per_sample, "input_sets": t.input_sets,
                                 "host_p50_s": t.host_p50,
                                 "flops": flops[direction], "bytes": nbytes[direction],
                                 **roofline(flops[direction], nbytes[direction], t.p50, peak)}
                            writer.write(r)
                            log(f"{name} {direction:<8} "
                                f"p50 {t.p50 * 1e3:9.4f} ms [{t.p20 * 1e3:.4f}, {t.p80 * 1e3:.4f}]  "
                                f"{r['tflops'] * 1e3:8.2f} GFLOP/s {r['gbps']:8.2f} GB/s  "
                                + (f"{100 * r['roofline_fraction']:5.1f}% of roofline" if r["roofline_fraction"] is not None
                                   else "no roofline (computes and moves nothing)")
                                + (f"  (Python {t.host_p50 * 1e3:.4f} ms a call)" if t.host_p50 is not None else ""))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from `timeout` (cli.py): keep what was measured
        interrupted = True
        log("interrupted: writing the records measured so far, with their speedups")
    records = add_speedups(writer.records, cfg.baseline, registry)
    writer.rewrite(records)
    meta = {"schema": rec.SCHEMA, "run_id": run_id, "started": started, "finished": rec.now_iso(),
            "loadavg_before": load_before, "loadavg_after": rec.loadavg(), "argv": argv or sys.argv,
            "config": {"backend": cfg.backend, "ops": ops, "shapes": cfg.shapes, "dtypes": cfg.dtypes,
                       "baseline": cfg.baseline, "conformance": cfg.conformance, "seed": cfg.seed,
                       "timing": cfg.timing.__dict__, "peak_size": peak_size},
            "environments": envs, "peaks": {f"{d}/{t}": p for (d, t), p in peaks.items()},
            "interrupted": interrupted}
    writer.write_run(meta)
    writer.close()
    if copy_to_cache:
        import shutil
        dest = rec.cache_dir() / run_id
        try:
            if dest.resolve() != writer.dir.resolve():
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(writer.path, dest / rec.RECORDS_FILE)
                shutil.copy2(writer.dir / rec.RUN_FILE, dest / rec.RUN_FILE)
        except OSError as e:
            log(f"warning: could not copy the records to the bench cache {dest}: {e}")
    if interrupted:
        raise KeyboardInterrupt("the benchmark was interrupted; its records so far are written")
    return records
