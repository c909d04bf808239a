"""The cupy_raw ops other than matmul on the GPU, stage by stage (run by bench/device/cupy_raw.sh).

    python3 bench/device/cupy_raw_ops.py sanitize            # each kernel once, small awkward shapes
    python3 bench/device/cupy_raw_ops.py capture             # forward + backward in a CUDA graph, replayed
    python3 bench/device/cupy_raw_ops.py --emulate sanitize  # on the CPU: the same plan in the emulator

sanitize (~3 s without a sanitizer; run under compute-sanitizer memcheck and racecheck): one forward
and one backward of every variant (embedding, layernorm and layernorm_residual, attention simple, flash and wgmma, attention_cached
on the cache's views, gelu, residual, crossentropy (and crossentropy_onepass), adamw with param_copy and clipping, sumsq) in float32, float16 and bfloat16 (16-bit
inputs with float32 parameter-gradient buffers), at shapes that reach every path: ragged T, C not a
multiple of 8 (the element-wise paths), GPT-2's C=768 and heads of 64 (the vector paths), a
padded vocabulary, a token held by more positions than one warp of embedding's backward takes. Each result is
compared with a float64 NumPy reference (forward outputs only: the conformance stage checks the
rest), so a kernel that runs clean but wrong is not missed.

capture (~5 s): per op, bf16 (adamw: float32 params with a bf16 copy, device-scalar lr and step):
one eager forward + backward, then the same calls captured on a stream into a CUDA graph (with a
private memory pool, as the core does); the graph replayed on new inputs copied into the captured
buffers must give exactly what eager gives on them (bitwise), and no call may have synchronised.

The last line printed is the summary: "ops <stage>: <n> ok, <m> FAIL".
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys

import numpy as np

from backends.cupy_raw import _common
from backends.cupy_raw import _runtime as rt
from backends.cupy_raw import (adamw, attention, attention_cached, crossentropy, crossentropy_onepass, embedding, gelu,
                               layernorm, layernorm_residual, residual, sumsq)
from cupy_raw_matmul import Tally  # beside this script

DTYPES = ("float32", "float16", "bfloat16")


# ---- float64 references (forward) -------------------------------------------------------------
def ref_layernorm(x, w, b):
    mean = x.mean(1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5) * w + b


def ref_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_attention(qkv, nh):
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // nh
    q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, nh, hs).transpose(0, 2, 1, 3) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(B, T, C)


def ref_crossentropy(logits, targets, n_valid):
    z = logits[..., :n_valid]
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(logits, np.maximum(targets, 0)[..., None], -1)[..., 0]
    return np.where(targets >= 0, lse - picked, 0.0)


TOL = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 4e-2}  # max |err| / rms(ref), forward only


# ---- the plan -----------------------------------------------------------------------------------
class Env:
    """Arrays on the device (CuPy) or on the host (the emulator), and the context kernels run in."""

    def __init__(self, emulate: bool):
        self.emulate = emulate
        if emulate:
            self.xp = np
        else:
            import cupy
            self.xp = cupy

    def context(self):
        return rt.emulation() if self.emulate else contextlib.nullcontext()

    def put(self, a, dtype=None):
        a = np.asarray(a)
        if dtype is not None:
            a = a.astype(_common.np_dtype(dtype))
        return a if self.emulate else self.xp.asarray(a)

    def get(self, a):
        a = a if self.emulate else a.get()
        return np.asarray(a).astype(np.float64)


def _rel_err(got, ref) -> float:
    rms = max(float(np.sqrt(np.mean(ref ** 2))), 1e-30)
    return float(np.max(np.abs(got - ref))) / rms if ref.size else 0.0


def sanitize(env: Env, tally: Tally) -> None:
    rng = np.random.default_rng(0)
    put, get = env.put, env.get

    def check(name, got, ref, dtype):
        err = _rel_err(get(got), ref)
        tally.add(bool(np.isfinite(err) and err <= TOL[dtype]), f"{name:48s} {dtype:9s} max err {err:.2e} x rms")

    def grads_of(shapes, dtype):
        gdt = "float32"  # 16-bit inputs accumulate into float32 parameter gradients (mixed precision)
        return {k: put(np.zeros(s), gdt if dtype != "float32" else dtype) for k, s in shapes.items()}

    for dtype in DTYPES:
        with env.context():
            # layernorm: element-wise (C=36), vector (C=768) and wide (C=1600) rows
            for N, C in ((17, 36), (5, 768), (3, 1600)):
                x = rng.standard_normal((N, C)) * 2 + 0.3
                w, b = rng.standard_normal(C) * 0.5 + 1, rng.standard_normal(C) * 0.5
                xs, ws, bs = put(x, dtype), put(w, dtype), put(b, dtype)
                y, saved = layernorm.forward({"x": xs, "weight": ws, "bias": bs}, {"eps": 1e-5})
                layernorm.backward(saved, put(rng.standard_normal((N, C)), dtype), grads_of({"weight": C, "bias": C}, dtype))
                check(f"layernorm N={N} C={C}", y, ref_layernorm(get(xs), get(ws), get(bs)), dtype)
                # the residual fused in: x = a + b and its layernorm; backward with the stream's gradient
                bs2 = put(rng.standard_normal((N, C)), dtype)
                (xr, yr), saved = layernorm_residual.forward({"a": xs, "b": bs2, "weight": ws, "bias": bs}, {"eps": 1e-5})
                layernorm_residual.backward(saved, (put(rng.standard_normal((N, C)), dtype),
                                                    put(rng.standard_normal((N, C)), dtype)),
                                            grads_of({"weight": C, "bias": C}, dtype))
                check(f"layernorm_residual x N={N} C={C}", xr, get(xs) + get(bs2), dtype)
                check(f"layernorm_residual y N={N} C={C}", yr, ref_layernorm(get(xr), get(ws), get(bs)), dtype)
            # gelu and residual: a ragged size (element-wise tail) and a vector-friendly one
            for n in (17 * 37, 64 * 96):
                x = put(rng.uniform(-6, 6, n), dtype)
                y, saved = gelu.forward({"x": x}, {})
                gelu.backward(saved, put(rng.standard_normal(n), dtype), {})
                check(f"gelu n={n}", y, ref_gelu(get(x)), dtype)
                a, b2 = put(rng.standard_normal(n), dtype), put(rng.standard_normal(n), dtype)
                y, _ = residual.forward({"a": a, "b": b2}, {})
                residual.backward(None, y, {"a": put(np.zeros(n), dtype), "b": put(np.zeros(n), dtype)})
                check(f"residual n={n}", y, get(a) + get(b2), dtype)
            # embedding: ragged, vector, and one token at 2,304 positions (embedding_dwte_heavy's walk)
            for B, T, C, V in ((2, 17, 36, 50), (2, 64, 768, 300), (1, 2304, 16, 3)):
                tokens = rng.integers(0, V, (B, T)).astype(np.int32)
                if T > 2048:
                    tokens[:] = 1
                wte, wpe = put(rng.standard_normal((V, C)), dtype), put(rng.standard_normal((T, C)), dtype)
                y, saved = embedding.forward({"tokens": put(tokens), "wte": wte, "wpe": wpe}, {})
                embedding.backward(saved, put(rng.standard_normal((B, T, C)), dtype), grads_of({"wte": (V, C), "wpe": (T, C)}, dtype))
                check(f"embedding B={B} T={T} C={C} V={V}", y, get(wte)[tokens] + get(wpe)[None], dtype)
            # crossentropy: tiny, ragged, padded vocabulary (vector path with a masked tail)
            for B, T, V, n_valid in ((2, 3, 37, 37), (1, 9, 520, 517), (2, 4, 4096, 4001)):
                logits = put(rng.standard_normal((B, T, V)) * 3, dtype)
                targets = rng.integers(0, n_valid, (B, T)).astype(np.int32)
                targets[0, 0] = -1
                losses, saved = crossentropy.forward({"logits": logits, "targets": put(targets)}, {"n_valid": n_valid})
                crossentropy.backward(saved, put(np.full((B, T), 1.0 / (B * T)), "float32"), {})
                check(f"crossentropy B={B} T={T} V={V} n_valid={n_valid}", losses,
                      ref_crossentropy(get(logits), targets, n_valid), dtype)
                dl = put(np.full((B, T), 1.0 / (B * T)), "float32")  # the fused op: the gradient given ahead
                losses, saved = crossentropy_onepass.forward({"logits": logits, "targets": put(targets), "dlosses": dl},
                                                             {"n_valid": n_valid})
                crossentropy_onepass.backward(saved, dl, {})
                check(f"crossentropy_onepass B={B} T={T} V={V} n_valid={n_valid}", losses,
                      ref_crossentropy(get(logits), targets, n_valid), dtype)
            # attention: heads of 12 (padded to 16, element-wise loads), 64 and 128 (vector loads; wgmma's
            # own kernels at 64)
            # (and wgmma's forward overlapped, not yet the shipped schedule)
            overlapped = attention.Wgmma()
            overlapped.forward_schedule, overlapped.forward_ring = "overlapped", (4, 1)
            for B, T, C, NH in ((1, 17, 36, 3), (1, 70, 128, 2), (1, 70, 256, 2)):
                qkv = put(rng.standard_normal((B, T, 3 * C)), dtype)
                for variant in (attention.simple, attention.flash, attention.wgmma, overlapped):
                    y, saved = variant.forward({"qkv": qkv}, {"n_head": NH})
                    variant.backward(saved, put(rng.standard_normal((B, T, C)), dtype), {})
                    name = variant.name + (" overlapped" if variant is overlapped else "")
                    check(f"attention:{name} B={B} T={T} C={C} NH={NH}", y, ref_attention(get(qkv), NH), dtype)
            if dtype != "float32":  # at B=9, T=1024 the overlapped forward's 144 items outnumber an H100's or
                # H200's SMs, so that its blocks walk more than one; y bit for bit the in-turn forward's (a
                # bf16 y's max error over rms(y) at T=1024 is ~5e-2 for both, its early rows' rounding)
                qkv = put(rng.standard_normal((9, 1024, 3 * 128)), dtype)
                y, saved = overlapped.forward({"qkv": qkv}, {"n_head": 2})
                overlapped.backward(saved, put(rng.standard_normal((9, 1024, 128)), dtype), {})
                same = np.array_equal(get(y), get(attention.wgmma.forward({"qkv": qkv}, {"n_head": 2})[0]))
                tally.add(same, f"{'attention:wgmma overlapped B=9 T=1024 C=128 NH=2':48s} {dtype:9s} "
                                f"{'bitwise the in-turn forward' if same else 'differs from the in-turn forward'}")
            # attention_cached: the cache's views (q a slice of qkv, k and v the first Tk rows of a cache)
            for B, Tn, Tk, C, NH in ((2, 1, 17, 36, 3), (1, 5, 300, 768, 12)):
                qkv = put(rng.standard_normal((B, Tn, 3 * C)), dtype)
                cache_k, cache_v = put(rng.standard_normal((B, Tk + 9, C)), dtype), put(rng.standard_normal((B, Tk + 9, C)), dtype)
                y, _ = attention_cached.forward({"q": qkv[:, :, :C], "k": cache_k[:, :Tk], "v": cache_v[:, :Tk]}, {"n_head": NH})
                full = np.concatenate([get(cache_k)[:, :Tk - Tn], get(qkv)[:, :, :C]], axis=1)  # queries at the end
                ref_qkv = np.concatenate([full, get(cache_k)[:, :Tk], get(cache_v)[:, :Tk]], axis=2)
                check(f"attention_cached B={B} Tn={Tn} Tk={Tk} C={C}", y, ref_attention(ref_qkv, NH)[:, Tk - Tn:], dtype)
            # sumsq
            x = put(rng.standard_normal(100_003), dtype)
            s, _ = sumsq.forward({"x": x}, {})
            check("sumsq n=100003", s, np.array([(get(x) ** 2).sum()]), dtype)
        # adamw: float32 master weights (all dtypes), a copy in `dtype`, clipping, device scalars
        with env.context():
            n = 4099
            p, g = rng.standard_normal(n), rng.standard_normal(n)
            m, v = rng.standard_normal(n) * 0.1, rng.standard_normal(n) ** 2 * 0.01
            ps, gs, ms, vs = (put(a, "float32") for a in (p, g, m, v))
            copy = put(np.zeros(n), dtype)
            sq = put(np.array([(g ** 2).sum()]), "float32")
            adamw.forward({"param": ps, "grad": gs, "m": ms, "v": vs, "param_copy": copy, "grad_sumsq": sq},
                          {"lr": put(np.array([1e-3]), "float32"), "step": put(np.array([3.0]), "float32"),
                           "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "grad_scale": 1.0,
                           "max_norm": 1.0})
            scale = min(1.0, 1.0 / math.sqrt(float((g.astype(np.float32).astype(np.float64) ** 2).sum())))
            g32 = g.astype(np.float32).astype(np.float64) * scale
            m2 = 0.9 * m.astype(np.float32) + 0.1 * g32
            v2 = 0.95 * v.astype(np.float32) + 0.05 * g32 ** 2
            p32 = p.astype(np.float32).astype(np.float64)
            p2 = p32 - 1e-3 * (m2 / (1 - 0.9 ** 3) / (np.sqrt(v2 / (1 - 0.95 ** 3)) + 1e-8) + 0.1 * p32)
            check("adamw n=4099 (param float32, copy)", ps, p2, "float32")
            check("adamw n=4099 param_copy", copy, p2, dtype)
    if not env.emulate:
        env.xp.cuda.get_current_stream().synchronize()


# ---- capture --------------------------------------------------------------------------------------
def capture(env: Env, tally: Tally) -> None:
    import cupy
    rng = np.random.default_rng(1)
    put = env.put
    bf = "bfloat16"

    def cases():
        """(name, make_inputs(), run(inputs) -> list of result arrays (written in place or returned))"""
        N, C, B, T, V = 64, 768, 2, 64, 1000

        def ln_inputs():
            return {"x": put(rng.standard_normal((N, C)), bf), "weight": put(rng.standard_normal(C), bf),
                    "bias": put(rng.standard_normal(C), bf), "dy": put(rng.standard_normal((N, C)), bf)}

        def ln_run(a, out):
            y, saved = layernorm.forward({"x": a["x"], "weight": a["weight"], "bias": a["bias"]}, {"eps": 1e-5}, out=out["y"])
            layernorm.backward(saved, a["dy"], {"x": out["dx"], "weight": out["dw"], "bias": out["db"]})

        yield "layernorm", ln_inputs, ln_run, {"y": ((N, C), bf), "dx": ((N, C), bf), "dw": ((C,), "float32"),
                                               "db": ((C,), "float32")}

        def lnr_inputs():
            return {**ln_inputs(), "b": put(rng.standard_normal((N, C)), bf), "dstream": put(rng.standard_normal((N, C)), bf)}

        def lnr_run(a, out):
            _, saved = layernorm_residual.forward({"a": a["x"], "b": a["b"], "weight": a["weight"], "bias": a["bias"]},
                                                  {"eps": 1e-5}, out=(out["x"], out["y"]))
            layernorm_residual.backward(saved, (a["dstream"], a["dy"]), {"a": out["da"], "weight": out["dw"], "bias": out["db"]})

        yield "layernorm_residual", lnr_inputs, lnr_run, {"x": ((N, C), bf), "y": ((N, C), bf), "da": ((N, C), bf),
                                                          "dw": ((C,), "float32"), "db": ((C,), "float32")}

        def att_inputs():
            return {"qkv": put(rng.standard_normal((B, T, 3 * C)), bf), "dy": put(rng.standard_normal((B, T, C)), bf)}

        overlapped = attention.Wgmma()  # (wgmma's forward overlapped, not yet the shipped schedule)
        overlapped.forward_schedule, overlapped.forward_ring = "overlapped", (4, 1)
        for variant, impl in (("simple", attention.simple), ("flash", attention.flash), ("wgmma", attention.wgmma),
                              ("wgmma overlapped", overlapped)):
            def att_run(a, out, v=impl):
                y, saved = v.forward({"qkv": a["qkv"]}, {"n_head": 12}, out=out["y"])
                v.backward(saved, a["dy"], {"qkv": out["dqkv"]})

            yield f"attention:{variant}", att_inputs, att_run, {"y": ((B, T, C), bf), "dqkv": ((B, T, 3 * C), bf)}

        def emb_inputs():
            return {"tokens": put(rng.integers(0, V, (B, T)).astype(np.int32)), "wte": put(rng.standard_normal((V, C)), bf),
                    "wpe": put(rng.standard_normal((T, C)), bf), "dy": put(rng.standard_normal((B, T, C)), bf)}

        def emb_run(a, out):
            y, saved = embedding.forward({"tokens": a["tokens"], "wte": a["wte"], "wpe": a["wpe"]}, {}, out=out["y"])
            embedding.backward(saved, a["dy"], {"wte": out["dwte"], "wpe": out["dwpe"]})

        yield "embedding", emb_inputs, emb_run, {"y": ((B, T, C), bf), "dwte": ((V, C), "float32"),
                                                 "dwpe": ((T, C), "float32")}

        def ce_inputs():
            t = rng.integers(0, V - 3, (B, T)).astype(np.int32)
            t[0, :5] = -1
            return {"logits": put(rng.standard_normal((B, T, V)) * 3, bf), "targets": put(t),
                    "dl": put(np.full((B, T), 1 / (B * T)), "float32")}

        def ce_run(a, out):
            losses, saved = crossentropy.forward({"logits": a["logits"], "targets": a["targets"]}, {"n_valid": V - 3},
                                                 out=out["losses"])
            crossentropy.backward(saved, a["dl"], {"logits": out["dlogits"]})

        yield "crossentropy", ce_inputs, ce_run, {"losses": ((B, T), "float32"), "dlogits": ((B, T, V), bf)}

        def onepass_run(a, out):
            losses, saved = crossentropy_onepass.forward(
                {"logits": a["logits"], "targets": a["targets"], "dlosses": a["dl"]}, {"n_valid": V - 3}, out=out["losses"])
            crossentropy_onepass.backward(saved, a["dl"], {"logits": out["dlogits"]})

        yield "crossentropy_onepass", ce_inputs, onepass_run, {"losses": ((B, T), "float32"),
                                                               "dlogits": ((B, T, V), bf)}

        def ew_inputs():
            return {"x": put(rng.standard_normal((N, 4 * C)), bf), "b": put(rng.standard_normal((N, 4 * C)), bf),
                    "dy": put(rng.standard_normal((N, 4 * C)), bf)}

        def ew_run(a, out):
            y, saved = gelu.forward({"x": a["x"]}, {}, out=out["gelu"])
            gelu.backward(saved, a["dy"], {"x": out["dgelu"]})
            residual.forward({"a": a["x"], "b": a["b"]}, {}, out=out["res"])
            residual.backward(None, a["dy"], {"a": out["da"], "b": out["dbb"]})
            sumsq.forward({"x": a["dy"]}, {}, out=out["sumsq"])

        shape = ((N, 4 * C), bf)
        yield "gelu+residual+sumsq", ew_inputs, ew_run, {"gelu": shape, "dgelu": shape, "res": shape, "da": shape,
                                                         "dbb": shape, "sumsq": ((1,), "float32")}

        n = 10_000

        def adamw_inputs():
            return {"param": put(rng.standard_normal(n), "float32"), "grad": put(rng.standard_normal(n), "float32"),
                    "m": put(rng.standard_normal(n) * 0.1, "float32"), "v": put(rng.standard_normal(n) ** 2 * 0.01, "float32"),
                    "sumsq": put(np.array([50.0]), "float32"), "lr": put(np.array([1e-3]), "float32"),
                    "step": put(np.array([4.0]), "float32")}

        def adamw_run(a, out):
            # param, m, v are updated in place: copy them into the outputs first, then update those
            for k in ("param", "m", "v"):
                out[k][...] = a[k]
            adamw.forward({"param": out["param"], "grad": a["grad"], "m": out["m"], "v": out["v"],
                           "param_copy": out["copy"], "grad_sumsq": a["sumsq"]},
                          {"lr": a["lr"], "step": a["step"], "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                           "weight_decay": 0.1, "grad_scale": 1.0, "max_norm": 1.0})

        yield "adamw", adamw_inputs, adamw_run, {"param": ((n,), "float32"), "m": ((n,), "float32"),
                                                 "v": ((n,), "float32"), "copy": ((n,), bf)}

    def outputs(spec):
        # gradients that accumulate start from zero in both runs; the rest are poisoned
        return {k: (cupy.zeros(s, dtype=_common.np_dtype(d)) if d == "float32" and k.startswith("d") else
                    cupy.full(s, np.nan, dtype=_common.np_dtype(d))) for k, (s, d) in spec.items()}

    for name, make, run, spec in cases():
        try:
            run(make(), outputs(spec))                 # eager once: compiles and loads every kernel
            captured_in, captured_out = make(), outputs(spec)
            pool = cupy.cuda.MemoryPool()              # private pool for what the kernels allocate
            stream = cupy.cuda.Stream(non_blocking=True)
            with cupy.cuda.using_allocator(pool.malloc), stream:
                stream.begin_capture()
                run(captured_in, captured_out)
                graph = stream.end_capture()
            fresh = make()
            for k in captured_in:
                captured_in[k][...] = fresh[k]
            for k, (s, d) in spec.items():
                captured_out[k][...] = 0 if d == "float32" and k.startswith("d") else np.nan
            graph.launch(stream)
            stream.synchronize()
            eager_out = outputs(spec)
            run(fresh, eager_out)
            cupy.cuda.get_current_stream().synchronize()
            diff = [k for k in spec if not bool((captured_out[k].view(np.uint8) == eager_out[k].view(np.uint8)).all())]
            tally.add(not diff, f"capture {name:28s} replay == eager bitwise" + (f": differs in {diff}" if diff else ""))
        except Exception as e:  # a refusal to capture (a sync, a cuBLAS call, a host copy) is a failure
            tally.add(False, f"capture {name:28s} raised {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stages", nargs="+", choices=("sanitize", "capture"))
    ap.add_argument("--emulate", action="store_true", help="run on the CPU in the emulator (sanitize only)")
    args = ap.parse_args(argv)
    env = Env(args.emulate)
    failed = 0
    summaries = []
    for stage in args.stages:
        tally = Tally(stage, "ops")
        if stage == "capture" and args.emulate:
            print("capture needs a GPU: skipped under --emulate")
            continue
        (sanitize if stage == "sanitize" else capture)(env, tally)
        summaries.append(tally.summary())
        failed += tally.fail
    for s in summaries:
        print(s)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
