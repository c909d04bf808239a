"""GPT-2, built only from ops through the kernel registry: no op math lives here.

The model owns its parameters (one contiguous buffer, with a view per named tensor), their gradients
(a second buffer of the same layout), its activations (one arena per (B, T): euler_core/activations.py)
and the order in which ops are called. The forward keeps each op's `saved` on a tape in call order;
the backward walks the same blocks in reverse, as llm.c's `gpt2_backward` does, so a reader sees the
whole chain rule in one function.

Parameter names follow GPT-2's structure (Hugging Face's names without the `transformer.` prefix),
in llm.c's layout (a linear layer's weight is (out, in)):

    wte.weight (Vp,C)  wpe.weight (maxT,C)
    h.{i}.ln_1.weight/bias (C)      h.{i}.attn.c_attn.weight (3C,C) / .bias (3C)
    h.{i}.attn.c_proj.weight (C,C) / .bias (C)
    h.{i}.ln_2.weight/bias (C)      h.{i}.mlp.c_fc.weight (4C,C) / .bias (4C)
    h.{i}.mlp.c_proj.weight (C,4C) / .bias (C)
    ln_f.weight/bias (C)

The buffer holds every 2-D weight first (they take weight decay) and then every 1-D one (they do not),
so AdamW runs on two contiguous halves. The token embedding is tied to the output layer.

Precision. dtype "float64" or "float32": parameters, gradients and activations all in it.
dtype "bfloat16" (or "float16"), mixed precision: float32 master weights (`master`, what AdamW
updates, what checkpoints hold), 16-bit working copies (`params`, what the kernels read, refreshed
by AdamW in the same pass), float32 gradients, 16-bit activations; the kernels accumulate in float32
and keep layernorm statistics, logsumexps and losses in float32.

The block structure. A residual add and the layernorm after it are one step, `_add_norm` (the
fused `layernorm_residual` op where the backend has it), so a layer takes the residual stream x and
its normalisation h = ln_1(x), and hands the next layer its stream and the next layernorm's output:

    h = ln_1[0](embedding(tokens))
    for each layer:  qkv = c_attn(h);  x, h2 = add_norm(x, c_proj(attention(qkv)), ln_2)
                     x, h = add_norm(x, mlp_c_proj(gelu(mlp_c_fc(h2))), next layernorm)
    logits = h @ wte.T          (the next layernorm after the last layer is ln_f)

The MLP, mlp_c_proj(gelu(mlp_c_fc(h2))), is one fused op (`mlp`) where the backend has it; otherwise
the GELU is fused into c_fc (`matmul_gelu`) or into the projection (`gelu_matmul`), or the three
primitives are composed.

Where the selection has matmul_residual (and layernorm_residual fused), the residual add moves into
the projection before it instead (its GEMM's epilogue reads the stream and writes stream +
projection), and the layernorm only normalises that stream (layernorm_residual without b, whose x is
its input): one pass over (N,C) fewer for each layernorm. The attention projection does so through
matmul_residual, the MLP through the fused mlp's residual input (or, composed of matmuls, through
matmul_residual); `matmul_residual=none` keeps both adds in the layernorms:

    qkv = c_attn(h);  x = matmul_residual(attention(qkv), c_proj, residual=x);  x, h2 = add_norm(x, ln_2)
    x = mlp(h2, residual=x);  x, h = add_norm(x, next layernorm)

The backward keeps its shape: the stream's gradient from add_norm's backward goes into the
projection's backward as before, and the projection hands it on unchanged as the gradient of the
stream it read (the add's derivative is 1), which is what the unfused backward passes on anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activations import Activations, MemoryPlan
from .config import MIXED, GPTConfig, parameter_layout
from .device import STORAGE_DTYPES, array_module, storage_dtype, to_device
from .kernels import Kernels


def _views(flat, layout) -> dict:
    views, offset = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape))
        views[name] = flat[offset:offset + size].reshape(shape)
        offset += size
    return views


def _mlp_params(pre: str) -> dict:
    """The mlp op's parameter inputs -> layer `pre`'s parameter names (fc_weight: h.{i}.mlp.c_fc.weight)."""
    return {f"{part}_{kind}": f"{pre}mlp.c_{part}.{kind}" for part in ("fc", "proj") for kind in ("weight", "bias")}


@dataclass
class Layer:
    """What one transformer layer's forward keeps for its backward (each op's opaque `saved`)."""

    c_attn: object
    attn: object
    attn_proj: object      # matmul's saved, or matmul_residual's where it writes the stream
    add_norm_2: tuple      # ("fused", saved) or ("composed", layernorm's saved)
    c_fc: object           # matmul's saved, or matmul_gelu's when fused; None when mlp is fused
    gelu: object           # None when fused into c_fc (matmul_gelu), the MLP projection (gelu_matmul) or mlp
    mlp_proj: object       # matmul's saved (matmul_residual's where it writes the stream), or gelu_matmul's
                           # when fused, or mlp's (the whole MLP) when fused
    add_norm_next: tuple   # the residual add after the MLP and the next layer's ln_1 (ln_f for the last)


@dataclass
class Tape:
    acts: Activations
    embedding: object
    ln_1: object           # layer 0's ln_1 (the others are in the previous layer's add_norm_next)
    layers: list
    head: object           # the classifier: classifier_crossentropy's saved, or (matmul's, crossentropy's)
    dlosses: object        # (N,) d(step loss)/d(loss per position), on the device


class GPT:
    """A GPT-2 model whose every op runs on the kernels selected by `kernels`.

    >>> model = GPT(preset("micro"), Kernels("naive"), dtype="float64", seed=0)
    >>> logits, loss = model.forward(tokens, targets)    # tokens, targets (B,T) int
    >>> model.zero_grad(); model.backward()              # gradients in model.grads[name]
    """

    def __init__(self, config: GPTConfig, kernels: Kernels | str = "naive", dtype: str = "float32",
                 seed: int | None = 0, recompute: bool = False):
        if dtype not in STORAGE_DTYPES:
            raise ValueError(f"GPT: dtype must be one of {', '.join(STORAGE_DTYPES)}, got {dtype!r}")
        self.config = config
        self.kernels = kernels if isinstance(kernels, Kernels) else Kernels(kernels, dtype=dtype)
        self.device = self.kernels.device
        self.dtype = dtype
        self.master_dtype = "float32" if dtype in MIXED else dtype
        self.xp = array_module(self.device)
        self.layout = parameter_layout(config)
        self.num_parameters = sum(int(np.prod(s)) for _, s in self.layout)
        self.num_decayed = sum(int(np.prod(s)) for _, s in self.layout if len(s) == 2)
        self.flat_master = self.xp.zeros(self.num_parameters, dtype=self.master_dtype)
        self.flat_params = (self.xp.zeros(self.num_parameters, dtype=storage_dtype(dtype)) if dtype in MIXED
                            else self.flat_master)
        self.flat_grads = self.xp.zeros(self.num_parameters, dtype=self.master_dtype)
        self.master = _views(self.flat_master, self.layout)   # what AdamW updates
        self.params = _views(self.flat_params, self.layout)   # what the kernels read
        self.grads = _views(self.flat_grads, self.layout)
        self.fused = {op: self.kernels.has(op) for op in ("layernorm_residual", "matmul_residual", "mlp", "matmul_gelu",
                                                          "gelu_matmul", "classifier_crossentropy",
                                                          "crossentropy_onepass")}
        # the GELU goes into one fused op at most, the first of these offered: the whole MLP (mlp), c_fc
        # (matmul_gelu), the MLP projection (gelu_matmul). recompute: the training arena keeps one GELU
        # output, remade layer by layer in the backward from c_fc's output; each of these ops keeps its
        # GELU output a layer, so none is used and the MLP is composed
        taken = None  # the op the GELU went into
        for op in ("mlp", "matmul_gelu", "gelu_matmul"):
            if not self.fused[op]:
                continue
            if recompute:
                self.fused[op] = False
                self.kernels.notes.append(f"{op}: not used with recompute (the fused op keeps its GELU output "
                                          "a layer); the MLP is composed of matmul and gelu")
            elif taken:  # (said where the user named the op: a backend's offer of both is its business)
                self.fused[op] = False
                if self.kernels.named(op):
                    self.kernels.notes.append(f"{op}: not used: the GELU goes into {taken} (the selection offers both)")
            else:
                taken = op
        # The projections add themselves to the residual stream (the add in their GEMMs' epilogues) where
        # the selection has matmul_residual and the layernorm after them is fused, which then only
        # normalises the stream (layernorm_residual without b): the attention projection through
        # matmul_residual, the MLP through the fused mlp's residual input or, composed, its projection
        # through matmul_residual too (gelu_matmul's has no stream input: the layernorm adds its output,
        # as before). `matmul_residual=none` turns both off: the fused ops as they were
        if self.fused["matmul_residual"] and not self.fused["layernorm_residual"]:
            self.fused["matmul_residual"] = False
            if self.kernels.named("matmul_residual"):
                self.kernels.notes.append("matmul_residual: not used: the stream it writes is normalised by "
                                          "layernorm_residual without b, which the selection does not fuse")
        self.mlp_adds_stream = self.fused["matmul_residual"] and (self.fused["mlp"] or not self.fused["gelu_matmul"])
        self.plan = MemoryPlan(self.fused["classifier_crossentropy"], self.fused["matmul_gelu"], recompute,
                               self.fused["crossentropy_onepass"] and not self.fused["classifier_crossentropy"],
                               gelu_in_proj=self.fused["gelu_matmul"], fused_mlp=self.fused["mlp"],
                               projections_add=self.fused["matmul_residual"] and self.mlp_adds_stream)
        self._acts: Activations | None = None
        self._tape: Tape | None = None
        if seed is not None:
            self.init_weights(seed)

    @property
    def mixed(self) -> bool:
        return self.dtype in MIXED

    # ---- parameters -------------------------------------------------------------------------
    def init_weights(self, seed: int) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, the two residual projections of each block
        scaled by 1/sqrt(2 * n_layer), zero biases, unit layernorm gains; padded wte rows zero."""
        rng = np.random.default_rng(seed)
        host = {}
        residual_std = 0.02 / np.sqrt(2 * self.config.n_layer)
        for name, shape in self.layout:
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                host[name] = np.ones(shape)
            elif len(shape) == 1:
                host[name] = np.zeros(shape)
            else:
                std = residual_std if name.endswith("c_proj.weight") else 0.02
                host[name] = rng.normal(0.0, std, size=shape)
        host["wte.weight"][self.config.vocab_size:] = 0.0
        self.load_parameters(host)

    def load_parameters(self, named: dict) -> None:
        """Copy named arrays (any device, any float dtype) into the parameters (the master weights,
        then their working copies); every name of the layout must be present, with its exact shape."""
        missing = [n for n, _ in self.layout if n not in named]
        unknown = sorted(set(named) - set(self.params))
        if missing or unknown:
            raise ValueError(f"load_parameters: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                             f"unknown {unknown[:5]}")
        for name, shape in self.layout:
            value = named[name]
            if tuple(value.shape) != shape:
                raise ValueError(f"load_parameters: {name} has shape {tuple(value.shape)}, the model "
                                 f"(config {self.config}) expects {shape}")
            host = np.asarray(value) if isinstance(value, np.ndarray) else value
            self.master[name][...] = to_device(host.astype(self.master_dtype) if isinstance(host, np.ndarray) else host,
                                               self.device)
        self.refresh_working_copy()

    def refresh_working_copy(self) -> None:
        """The 16-bit working copy from the master weights (mixed precision; AdamW does this itself)."""
        if self.mixed:
            self.flat_params[...] = self.flat_master.astype(self.flat_params.dtype)

    def named_parameters(self) -> dict:
        """Host (NumPy) copies of every parameter (the master weights), by name."""
        return {name: to_device(view, "cpu").copy() for name, view in self.master.items()}

    def zero_grad(self) -> None:
        self.flat_grads.fill(0)

    def grad_sumsq(self, out=None):
        """(1,) array on the model's device: the sum of squares of the whole gradient (no host sync)."""
        return self.kernels["sumsq"].forward({"x": self.flat_grads}, out=out)[0]

    def grad_norm(self) -> float:
        """The global L2 norm of the gradient buffer (waits for the device)."""
        return float(np.sqrt(to_device(self.grad_sumsq(), "cpu")[0]))

    # ---- activations ------------------------------------------------------------------------
    def activations(self, B: int, T: int) -> Activations:
        """The arena for (B, T), allocated on first use and kept until another (B, T) is asked for."""
        if self._acts is None or (self._acts.B, self._acts.T) != (B, T):
            self._acts = None  # free the old one first
            self._acts = Activations.allocate(self.xp, self.config, B, T, self.dtype, self.plan)
        return self._acts

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, tokens, targets=None, loss_scale: float = 1.0):
        """Logits (B,T,Vp) and, given targets (B,T) (-1 = no loss there), the mean loss as a float.

        With targets, everything the backward needs is kept until `backward()` is called, and the
        gradient it computes is that of loss_scale * mean loss (1/K with K micro-batches). With
        targets, the logits are None where the classifier is fused with the loss (the full logits
        never exist); ask for them with forward(tokens).
        """
        tokens = np.asarray(tokens) if isinstance(tokens, (list, tuple)) else tokens
        self._check_tokens(tokens)
        B, T = tokens.shape
        if targets is None:
            self._tape = None
            return self._logits(tokens), None
        targets = np.asarray(targets) if isinstance(targets, (list, tuple)) else targets
        if tuple(targets.shape) != (B, T):
            raise ValueError(f"GPT.forward: targets must have the shape of tokens {(B, T)}, got {tuple(targets.shape)}")
        mean = loss_weights(to_device(targets, "cpu"))  # (B,T) 1/count where valid, else 0
        acts = self.activations(B, T)
        dlosses = (mean * loss_scale).astype(self.losses_dtype).reshape(-1)
        self.forward_train(acts, tokens, targets, to_device(dlosses, self.device))
        loss = float(np.dot(to_device(acts.losses, "cpu").astype(np.float64), mean.reshape(-1)))
        logits = None if self.fused["classifier_crossentropy"] else acts.logits.reshape(B, T, -1)
        return logits, loss

    @property
    def losses_dtype(self) -> str:
        return "float64" if self.dtype == "float64" else "float32"

    def _check_tokens(self, tokens) -> None:
        if tokens.ndim != 2:
            raise ValueError(f"GPT.forward: tokens must be (B,T), got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.config.block_size:
            raise ValueError(f"GPT.forward: T={tokens.shape[1]} exceeds the model's block_size {self.config.block_size}")

    def _logits(self, tokens):
        """Logits (B,T,Vp) of every position; nothing kept for a backward, no arena."""
        k, p, cfg = self.kernels, self.params, self.config
        B, T = tokens.shape
        x, _ = k["embedding"].forward({"tokens": tokens, "wte": p["wte.weight"], "wpe": p["wpe.weight"]})
        _, h = self.trunk(x.reshape(B * T, -1), self._attend_whole(B, T))
        logits, _ = k["matmul"].forward({"x": h, "weight": p["wte.weight"]})
        return logits.reshape(B, T, cfg.padded_vocab_size)

    def _attend_whole(self, B: int, T: int, acts: Activations | None = None):
        """attend(i, qkv (N,3C)) -> (att (N,C), saved): causal attention over the T positions of each
        row (into the arena's atty[i] when given)."""
        k, cfg = self.kernels, self.config

        def attend(i, qkv):
            out = acts.atty[i].reshape(B, T, -1) if acts is not None else None
            att, saved = k["attention"].forward({"qkv": qkv.reshape(B, T, 3 * cfg.n_embd)}, {"n_head": cfg.n_head},
                                                out=out)
            return att.reshape(B * T, cfg.n_embd), saved
        return attend

    def forward_train(self, acts: Activations, tokens, targets, dlosses) -> None:
        """The training forward into the arena: every activation and acts.losses (N,) written, the
        tape kept for backward(). `tokens`, `targets` (B,T) int and `dlosses` (N,) (the weight of
        each position's loss in the step's loss) may already live on the device: nothing here reads
        a device value on the host, so a CUDA graph can capture it."""
        k, p, cfg = self.kernels, self.params, self.config
        B, T = acts.B, acts.T
        N, C = B * T, cfg.n_embd
        x, s_emb = k["embedding"].forward({"tokens": tokens, "wte": p["wte.weight"], "wpe": p["wpe.weight"]},
                                          out=acts.encoded.reshape(B, T, C))
        x = x.reshape(N, C)
        h, s_ln1 = k["layernorm"].forward({"x": x, "weight": p["h.0.ln_1.weight"], "bias": p["h.0.ln_1.bias"]},
                                          out=acts.ln1[0])
        layers: list = []
        x, h = self.trunk(x, self._attend_whole(B, T, acts), h=h, acts=acts, tape=layers)
        targets = targets.reshape(N)
        if self.fused["classifier_crossentropy"]:
            _, head = k["classifier_crossentropy"].forward(
                {"x": h, "weight": p["wte.weight"], "targets": targets, "dlosses": dlosses},
                {"n_valid": cfg.vocab_size}, out=acts.losses)
        else:
            logits, s_head = k["matmul"].forward({"x": h, "weight": p["wte.weight"]}, out=acts.logits)
            loss_inputs = {"logits": logits.reshape(B, T, -1), "targets": targets.reshape(B, T)}
            if self.plan.fused_loss:  # dlogits computed here, from the same pass over the logits
                loss_inputs["dlosses"] = dlosses.reshape(B, T)
            _, s_loss = k["crossentropy_onepass" if self.plan.fused_loss else "crossentropy"].forward(
                loss_inputs, {"n_valid": cfg.vocab_size}, out=acts.losses.reshape(B, T))
            head = (s_head, s_loss)
        self._tape = Tape(acts, s_emb, s_ln1, layers, head, dlosses)

    def trunk(self, x, attend, h=None, acts: Activations | None = None, tape: list | None = None):
        """Every layer on the residual stream x (N,C) -> (x after the last layer, h = ln_f of it).

        `attend(i, qkv (N,3C)) -> (att (N,C), saved)` is layer i's attention: causal over whole
        sequences in training, over a KV cache when generating (kvcache.py); everything else is
        shared. `h` is ln_1[0](x) when the caller has it already (training writes it into the arena,
        `acts`); `tape`, a list, receives each layer's saved values."""
        k, p, cfg = self.kernels, self.params, self.config
        if h is None:
            h, _ = k["layernorm"].forward({"x": x, "weight": p["h.0.ln_1.weight"], "bias": p["h.0.ln_1.bias"]})
        for i in range(cfg.n_layer):
            x, h, layer = self._layer_forward(i, x, h, attend, acts)
            if tape is not None:
                tape.append(layer)
        return x, h

    def _layer_forward(self, i: int, x, h, attend, acts: Activations | None):
        """Layer i: (stream x, h = ln_1(x)) -> (stream after the layer, the next layernorm of it, Layer)."""
        k, p, cfg = self.kernels, self.params, self.config
        pre = f"h.{i}."
        nxt = f"h.{i + 1}.ln_1" if i + 1 < cfg.n_layer else "ln_f"

        def buf(name, index=True):
            return None if acts is None or not acts.has(name) else (acts.views[name][i] if index else acts.views[name])

        qkv, s_qkv = k["matmul"].forward({"x": h, "weight": p[pre + "attn.c_attn.weight"],
                                          "bias": p[pre + "attn.c_attn.bias"]}, out=buf("qkv"))  # (N,3C)
        att, s_att = attend(i, qkv)  # (N,C)
        attn_params = {"weight": p[pre + "attn.c_proj.weight"], "bias": p[pre + "attn.c_proj.bias"]}
        if self.fused["matmul_residual"]:  # x_mid = x + c_proj(att), written by the projection
            x, s_proj = k["matmul_residual"].forward({"x": att, **attn_params, "residual": x}, out=buf("res2"))
            x, h2, s_an2 = self._add_norm(x, None, pre + "ln_2", out_h=buf("ln2"))  # (N,C) each
        else:
            proj, s_proj = k["matmul"].forward({"x": att, **attn_params}, out=buf("proj", False))  # (N,C)
            x, h2, s_an2 = self._add_norm(x, proj, pre + "ln_2", buf("res2"), buf("ln2"))
        fc_params = {"weight": p[pre + "mlp.c_fc.weight"], "bias": p[pre + "mlp.c_fc.bias"]}
        proj_params = {"weight": p[pre + "mlp.c_proj.weight"], "bias": p[pre + "mlp.c_proj.bias"]}
        # the MLP's output: the stream after the layer (x_mid + mlp(h2)) where it adds itself, else mlp(h2)
        mlp_out = buf("res3") if self.mlp_adds_stream else buf("proj", False)
        s_fc = s_gelu = None  # c_fc's and the GELU's own saved, where no fused op took them
        if self.fused["mlp"]:  # the whole MLP, which keeps c_fc's output and the GELU's itself
            stream = {"residual": x} if self.mlp_adds_stream else {}
            mlp, s_mlp = k["mlp"].forward({"x": h2, **{n: p[name] for n, name in _mlp_params(pre).items()}, **stream},
                                          out=mlp_out)  # (N,C)
        else:
            if self.fused["matmul_gelu"]:
                act, s_fc = k["matmul_gelu"].forward({"x": h2, **fc_params}, out=buf("fch_gelu"))
            else:
                fc, s_fc = k["matmul"].forward({"x": h2, **fc_params}, out=buf("fch"))  # (N,4C)
                if not self.fused["gelu_matmul"]:
                    act, s_gelu = k["gelu"].forward({"x": fc}, out=buf("fch_gelu", index=not self.plan.recompute_gelu))
            if self.fused["gelu_matmul"]:  # the GELU inside the projection
                mlp, s_mlp = k["gelu_matmul"].forward({"x": fc, **proj_params}, out=mlp_out)  # (N,C)
            elif self.mlp_adds_stream:
                mlp, s_mlp = k["matmul_residual"].forward({"x": act, **proj_params, "residual": x}, out=mlp_out)
            else:
                mlp, s_mlp = k["matmul"].forward({"x": act, **proj_params}, out=mlp_out)  # (N,C)
        next_out = acts.ln1[i + 1] if acts is not None and i + 1 < cfg.n_layer else (acts.lnf if acts is not None else None)
        if self.mlp_adds_stream:
            x, h, s_next = self._add_norm(mlp, None, nxt, out_h=next_out)
        else:
            x, h, s_next = self._add_norm(x, mlp, nxt, buf("res3"), next_out)
        return x, h, Layer(s_qkv, s_att, s_proj, s_an2, s_fc, s_gelu, s_mlp, s_next)

    def _add_norm(self, a, b, ln: str, out_x=None, out_h=None):
        """x = a + b and h = layernorm `ln` of x: (x, h, saved), fused where the backend has it.
        b None: a already holds the sum (its projection added itself to the stream), x is a, and
        h = layernorm(a) by layernorm_residual without b (the model does that only where it is fused)."""
        k, p = self.kernels, self.params
        w, bias = p[ln + ".weight"], p[ln + ".bias"]
        if self.fused["layernorm_residual"]:
            inputs = {"a": a, "weight": w, "bias": bias}
            if b is None:  # x is a itself: out=(a, out_h)
                out = None if out_h is None else (a, out_h)
            else:
                inputs["b"] = b
                out = None if out_x is None else (out_x, out_h)
            (x, h), saved = k["layernorm_residual"].forward(inputs, out=out)
            return x, h, ("fused", saved)
        x, _ = k["residual"].forward({"a": a, "b": b}, out=out_x)
        h, saved = k["layernorm"].forward({"x": x, "weight": w, "bias": bias}, out=out_h)
        return x, h, ("composed", saved)

    # ---- backward ---------------------------------------------------------------------------
    def backward(self) -> None:
        """Accumulate d(loss_scale * mean loss)/d(parameter) into `self.grads` (zero them first with
        zero_grad); loss_scale was given to forward. Like forward_train, it reads nothing on the host."""
        if self._tape is None:
            raise RuntimeError("GPT.backward: call forward(tokens, targets) first")
        tape, self._tape = self._tape, None
        k, g, cfg, acts = self.kernels, self.grads, self.config, tape.acts
        B, T, C = acts.B, acts.T, cfg.n_embd
        N = B * T

        if self.fused["classifier_crossentropy"]:
            # its dx was computed chunk by chunk in the forward (with the loss weights): handed back as it is
            dh = k["classifier_crossentropy"].backward(tape.head, tape.dlosses, {"weight": g["wte.weight"]})["x"]
        else:
            s_head, s_loss = tape.head
            if self.plan.fused_loss:  # the forward computed dlogits (the op's own buffer)
                dlogits = k["crossentropy_onepass"].backward(s_loss, None, {})["logits"]
            else:
                dlogits = k["crossentropy"].backward(s_loss, tape.dlosses.reshape(B, T),
                                                     {"logits": acts.dlogits.reshape(B, T, -1)})["logits"]
            dh = k["matmul"].backward(s_head, dlogits.reshape(N, -1), {"weight": g["wte.weight"], "x": acts.dnorm})["x"]
        dx = None  # the stream's gradient past the last layer: only ln_f reads that stream
        turn = 0   # which of the two dstream buffers the next residual gradient goes into
        for i in reversed(range(cfg.n_layer)):
            pre, s = f"h.{i}.", tape.layers[i]
            nxt = f"h.{i + 1}.ln_1" if i + 1 < cfg.n_layer else "ln_f"
            # x_out, h_next = add_norm(x_mid, mlp): the gradient reaches x_mid and mlp alike
            dx = self._add_norm_backward(s.add_norm_next, dx, dh, nxt, acts.dstream[turn], acts)
            turn ^= 1
            proj_grads = {"weight": g[pre + "mlp.c_proj.weight"], "bias": g[pre + "mlp.c_proj.bias"]}
            fc_grads = {"weight": g[pre + "mlp.c_fc.weight"], "bias": g[pre + "mlp.c_fc.bias"], "x": acts.dnorm}
            # (where the MLP added itself to the stream, the stream's gradient reaches x_mid unchanged: dx)
            if self.fused["mlp"]:  # d(ln_2's output) straight from the MLP's output gradient
                dh2 = k["mlp"].backward(s.mlp_proj, dx, {**{n: g[name] for n, name in _mlp_params(pre).items()},
                                                         "x": acts.dnorm})["x"]
            elif self.fused["gelu_matmul"]:  # d(c_fc's output) straight from the projection's backward
                dfc = k["gelu_matmul"].backward(s.mlp_proj, dx, {**proj_grads, "x": acts.dfch})["x"]
                dh2 = k["matmul"].backward(s.c_fc, dfc, fc_grads)["x"]
            else:
                if self.plan.recompute_gelu and i + 1 < cfg.n_layer:
                    # the arena keeps one GELU output (activations.py): remake layer i's where the MLP
                    # projection's saved input points (the last layer's is still there from the forward)
                    k["gelu"].forward({"x": acts.fch[i]}, out=acts.fch_gelu)
                projection = "matmul_residual" if self.mlp_adds_stream else "matmul"
                dact = k[projection].backward(s.mlp_proj, dx, {**proj_grads, "x": acts.dfch_gelu})["x"]
                if s.gelu is None:  # matmul_gelu
                    dh2 = k["matmul_gelu"].backward(s.c_fc, dact, fc_grads)["x"]
                else:
                    dfc = k["gelu"].backward(s.gelu, dact, {"x": acts.dfch})["x"]
                    dh2 = k["matmul"].backward(s.c_fc, dfc, fc_grads)["x"]
            # x_mid, h2 = add_norm(x_in, attn_proj)
            dx = self._add_norm_backward(s.add_norm_2, dx, dh2, pre + "ln_2", acts.dstream[turn], acts)
            turn ^= 1
            # (matmul_residual's stream gradient is dx itself: x_in's gradient is the one above)
            projection = "matmul_residual" if self.fused["matmul_residual"] else "matmul"
            datt = k[projection].backward(s.attn_proj, dx, {"weight": g[pre + "attn.c_proj.weight"],
                                                            "bias": g[pre + "attn.c_proj.bias"], "x": acts.datt})["x"]
            dqkv = k["attention"].backward(s.attn, datt.reshape(B, T, C), {"qkv": acts.dqkv.reshape(B, T, 3 * C)})["qkv"]
            dh = k["matmul"].backward(s.c_attn, dqkv.reshape(N, 3 * C), {"weight": g[pre + "attn.c_attn.weight"],
                                                                        "bias": g[pre + "attn.c_attn.bias"],
                                                                        "x": acts.dnorm})["x"]
        # layer 0's ln_1 read the embedding's output, which also flows on as the stream
        dln = k["layernorm"].backward(tape.ln_1, dh, {"weight": g["h.0.ln_1.weight"], "bias": g["h.0.ln_1.bias"],
                                                      "x": acts.dlnin})["x"]
        dx, _ = k["residual"].forward({"a": dx, "b": dln}, out=acts.dstream[turn])
        k["embedding"].backward(tape.embedding, dx.reshape(B, T, C), {"wte": g["wte.weight"], "wpe": g["wpe.weight"]})

    def _add_norm_backward(self, saved, dx, dh, ln: str, out, acts: Activations):
        """The gradient of the stream before `x = a + b; h = layernorm(x)` (= da = db), into `out`,
        given the stream's gradient after it (dx, None for zero) and h's (dh); accumulates ln's
        dweight and dbias."""
        k, g = self.kernels, self.grads
        how, s = saved
        grads = {"weight": g[ln + ".weight"], "bias": g[ln + ".bias"]}
        if how == "fused":
            return k["layernorm_residual"].backward(s, (dx, dh), {**grads, "a": out})["a"]
        if dx is None:
            return k["layernorm"].backward(s, dh, {**grads, "x": out})["x"]
        dln = k["layernorm"].backward(s, dh, {**grads, "x": acts.dlnin})["x"]
        total, _ = k["residual"].forward({"a": dx, "b": dln}, out=out)
        return total

    # ---- generation ---------------------------------------------------------------------------
    def forward_cached(self, tokens, cache, last_only: bool = False, lengths=None):
        """Logits of new tokens (B,Tn) given a KVCache of the earlier positions; `lengths`: the real
        tokens of each right-padded row (see kvcache.py)."""
        from .kvcache import forward_cached
        return forward_cached(self, tokens, cache, last_only, lengths)

    def __repr__(self):
        c = self.config
        precision = f"{self.dtype} (float32 master weights)" if self.mixed else self.dtype
        return (f"GPT({c.n_layer} layers, {c.n_head} heads, {c.n_embd} channels, vocab {c.vocab_size}, "
                f"{self.num_parameters:,} parameters, {precision} on {self.device})")


def loss_weights(targets: np.ndarray, loss_scale: float = 1.0) -> np.ndarray:
    """(B,T) float64 d(loss_scale * mean loss)/d(loss at each position): loss_scale / count where the
    target is valid (>= 0), 0 where it is -1. Computed on the host from host targets (no device sync)."""
    valid = targets >= 0
    count = int(valid.sum())
    if count == 0:
        raise ValueError("GPT.forward: every target is -1: there is no loss to compute")
    return valid * (loss_scale / count)
