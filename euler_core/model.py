"""GPT-2, built only from ops through the kernel registry: no op math lives here.

The model owns its parameters (one contiguous buffer, with a view per named tensor), their gradients
(a second buffer of the same layout), and the order in which ops are called. The forward keeps each
op's `saved` on a tape-free list in call order; the backward walks the same blocks in reverse, as
llm.c's `gpt2_backward` does, so a reader sees the whole chain rule in one function.

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import GPTConfig
from .device import array_module, to_device
from .kernels import Kernels


def parameter_layout(config: GPTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter, in buffer order: the 2-D (decayed) ones first."""
    C, L = config.n_embd, config.n_layer
    weights = [("wte.weight", (config.padded_vocab_size, C)), ("wpe.weight", (config.block_size, C))]
    vectors = []
    for i in range(L):
        p = f"h.{i}."
        weights += [(p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_proj.weight", (C, C)),
                    (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_proj.weight", (C, 4 * C))]
        vectors += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                    (p + "attn.c_attn.bias", (3 * C,)), (p + "attn.c_proj.bias", (C,)),
                    (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                    (p + "mlp.c_fc.bias", (4 * C,)), (p + "mlp.c_proj.bias", (C,))]
    vectors += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return weights + vectors


def _views(flat, layout) -> dict:
    views, offset = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape))
        views[name] = flat[offset:offset + size].reshape(shape)
        offset += size
    return views


@dataclass
class Block:
    """What one transformer block's forward keeps for its backward (each op's opaque `saved`)."""

    ln_1: object
    c_attn: object
    attn: object
    attn_proj: object
    ln_2: object
    c_fc: object
    gelu: object
    mlp_proj: object


@dataclass
class Tape:
    B: int
    T: int
    embedding: object
    blocks: list
    ln_f: object
    lm_head: object
    loss: object
    dlosses: np.ndarray  # (B,T) d(mean loss)/d(loss per position)


class GPT:
    """A GPT-2 model whose every op runs on the kernels selected by `kernels`.

    >>> model = GPT(preset("micro"), Kernels("naive"), dtype="float64", seed=0)
    >>> logits, loss = model.forward(tokens, targets)    # tokens, targets (B,T) int
    >>> model.zero_grad(); model.backward()              # gradients in model.grads[name]
    """

    def __init__(self, config: GPTConfig, kernels: Kernels | str = "naive", dtype: str = "float32",
                 seed: int | None = 0):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"GPT: dtype must be float32 or float64, got {dtype!r}")
        self.config = config
        self.kernels = kernels if isinstance(kernels, Kernels) else Kernels(kernels, dtype=dtype)
        self.device = self.kernels.device
        self.dtype = dtype
        self.xp = array_module(self.device)
        self.layout = parameter_layout(config)
        self.num_parameters = sum(int(np.prod(s)) for _, s in self.layout)
        self.num_decayed = sum(int(np.prod(s)) for _, s in self.layout if len(s) == 2)
        self.flat_params = self.xp.zeros(self.num_parameters, dtype=dtype)
        self.flat_grads = self.xp.zeros(self.num_parameters, dtype=dtype)
        self.params = _views(self.flat_params, self.layout)
        self.grads = _views(self.flat_grads, self.layout)
        self._tape: Tape | None = None
        if seed is not None:
            self.init_weights(seed)

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
        """Copy named arrays (any device, any float dtype) into the parameter buffer; every name of
        the layout must be present, with its exact shape."""
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
            self.params[name][...] = to_device(np.asarray(value) if isinstance(value, np.ndarray) else value,
                                               self.device)

    def named_parameters(self) -> dict:
        """Host (NumPy) copies of every parameter, by name."""
        return {name: to_device(view, "cpu").copy() for name, view in self.params.items()}

    def zero_grad(self) -> None:
        self.flat_grads.fill(0)

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, tokens, targets=None):
        """Logits (B,T,Vp) and, given targets (B,T) (-1 = no loss there), the mean loss as a float.

        With targets, everything the backward needs is kept until `backward()` is called.
        """
        k, p, cfg = self.kernels, self.params, self.config
        tokens = np.asarray(tokens) if isinstance(tokens, (list, tuple)) else tokens
        if tokens.ndim != 2:
            raise ValueError(f"GPT.forward: tokens must be (B,T), got shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        if T > cfg.block_size:
            raise ValueError(f"GPT.forward: T={T} exceeds the model's block_size {cfg.block_size}")
        N, C = B * T, cfg.n_embd

        x, s_emb = k["embedding"].forward({"tokens": tokens, "wte": p["wte.weight"], "wpe": p["wpe.weight"]})
        x = x.reshape(N, C)  # (N,C) the residual stream

        def attend(qkv):  # (N,3C) -> (N,C): causal attention over the T positions of each row
            att, saved = k["attention"].forward({"qkv": qkv.reshape(B, T, 3 * C)}, {"n_head": cfg.n_head})
            return att.reshape(N, C), saved

        blocks = []
        for i in range(cfg.n_layer):
            x, block = self.block_forward(i, x, attend)
            blocks.append(block)
        lnf, s_lnf = k["layernorm"].forward({"x": x, "weight": p["ln_f.weight"], "bias": p["ln_f.bias"]})
        logits, s_head = k["matmul"].forward({"x": lnf, "weight": p["wte.weight"]})  # (N,Vp) tied
        logits = logits.reshape(B, T, cfg.padded_vocab_size)
        if targets is None:
            self._tape = None
            return logits, None

        targets = np.asarray(targets) if isinstance(targets, (list, tuple)) else targets
        losses, s_loss = k["crossentropy"].forward({"logits": logits, "targets": targets},
                                                   {"n_valid": cfg.vocab_size})  # (B,T)
        valid = to_device(targets, "cpu") >= 0
        count = int(valid.sum())
        if count == 0:
            raise ValueError("GPT.forward: every target is -1: there is no loss to compute")
        loss = float(to_device(losses, "cpu").sum(dtype=np.float64)) / count
        dlosses = (valid / count).astype(self.dtype)  # (B,T) mean over the valid positions
        self._tape = Tape(B, T, s_emb, blocks, s_lnf, s_head, s_loss, dlosses)
        return logits, loss

    def block_forward(self, i: int, x, attend):
        """Transformer block i on the residual stream x (N,C) -> (x, Block of saved values).

            x = x + c_proj(attend(c_attn(ln_1(x))))        x = x + mlp_c_proj(gelu(mlp_c_fc(ln_2(x))))

        `attend(qkv (N,3C)) -> (att (N,C), saved)` is the attention: causal over whole sequences in
        training, or over a KV cache when generating (kvcache.py); everything else is shared.
        """
        k, p, h = self.kernels, self.params, f"h.{i}."
        ln1, s_ln1 = k["layernorm"].forward({"x": x, "weight": p[h + "ln_1.weight"], "bias": p[h + "ln_1.bias"]})
        qkv, s_qkv = k["matmul"].forward({"x": ln1, "weight": p[h + "attn.c_attn.weight"],
                                          "bias": p[h + "attn.c_attn.bias"]})  # (N,3C)
        att, s_att = attend(qkv)  # (N,C)
        proj, s_proj = k["matmul"].forward({"x": att, "weight": p[h + "attn.c_proj.weight"],
                                            "bias": p[h + "attn.c_proj.bias"]})  # (N,C)
        x, _ = k["residual"].forward({"a": x, "b": proj})
        ln2, s_ln2 = k["layernorm"].forward({"x": x, "weight": p[h + "ln_2.weight"], "bias": p[h + "ln_2.bias"]})
        fc, s_fc = k["matmul"].forward({"x": ln2, "weight": p[h + "mlp.c_fc.weight"],
                                        "bias": p[h + "mlp.c_fc.bias"]})  # (N,4C)
        act, s_gelu = k["gelu"].forward({"x": fc})
        mlp, s_mlp = k["matmul"].forward({"x": act, "weight": p[h + "mlp.c_proj.weight"],
                                          "bias": p[h + "mlp.c_proj.bias"]})  # (N,C)
        x, _ = k["residual"].forward({"a": x, "b": mlp})
        return x, Block(s_ln1, s_qkv, s_att, s_proj, s_ln2, s_fc, s_gelu, s_mlp)

    # ---- backward ---------------------------------------------------------------------------
    def backward(self, loss_scale: float = 1.0) -> None:
        """Accumulate d(loss_scale * mean loss)/d(parameter) into `self.grads` (zero them first with
        zero_grad). Gradient accumulation over K micro-batches passes loss_scale = 1/K."""
        if self._tape is None:
            raise RuntimeError("GPT.backward: call forward(tokens, targets) first")
        tape, self._tape = self._tape, None
        k, g, cfg = self.kernels, self.grads, self.config
        B, T, C = tape.B, tape.T, cfg.n_embd
        N = B * T

        dlosses = tape.dlosses * np.asarray(loss_scale, dtype=tape.dlosses.dtype)  # (B,T)
        dlogits = k["crossentropy"].backward(tape.loss, dlosses, {})["logits"]  # (B,T,Vp)
        dlnf = k["matmul"].backward(tape.lm_head, dlogits.reshape(N, -1), {"weight": g["wte.weight"]})["x"]
        dx = k["layernorm"].backward(tape.ln_f, dlnf, {"weight": g["ln_f.weight"], "bias": g["ln_f.bias"]})["x"]
        for i in reversed(range(cfg.n_layer)):
            h, s = f"h.{i}.", tape.blocks[i]
            # x_out = x_mid + mlp(ln_2(x_mid)): the gradient reaches x_mid along both paths
            through = k["residual"].backward(None, dx, {})
            dact = k["matmul"].backward(s.mlp_proj, through["b"], {"weight": g[h + "mlp.c_proj.weight"],
                                                                   "bias": g[h + "mlp.c_proj.bias"]})["x"]
            dfc = k["gelu"].backward(s.gelu, dact, {})["x"]
            dln2 = k["matmul"].backward(s.c_fc, dfc, {"weight": g[h + "mlp.c_fc.weight"],
                                                      "bias": g[h + "mlp.c_fc.bias"]})["x"]
            dmid = k["layernorm"].backward(s.ln_2, dln2, {"weight": g[h + "ln_2.weight"],
                                                          "bias": g[h + "ln_2.bias"]})["x"]
            dx, _ = k["residual"].forward({"a": through["a"], "b": dmid})
            # x_mid = x_in + attn(ln_1(x_in))
            through = k["residual"].backward(None, dx, {})
            datt = k["matmul"].backward(s.attn_proj, through["b"], {"weight": g[h + "attn.c_proj.weight"],
                                                                    "bias": g[h + "attn.c_proj.bias"]})["x"]
            dqkv = k["attention"].backward(s.attn, datt.reshape(B, T, C), {})["qkv"]
            dln1 = k["matmul"].backward(s.c_attn, dqkv.reshape(N, 3 * C), {"weight": g[h + "attn.c_attn.weight"],
                                                                           "bias": g[h + "attn.c_attn.bias"]})["x"]
            din = k["layernorm"].backward(s.ln_1, dln1, {"weight": g[h + "ln_1.weight"],
                                                         "bias": g[h + "ln_1.bias"]})["x"]
            dx, _ = k["residual"].forward({"a": through["a"], "b": din})
        k["embedding"].backward(tape.embedding, dx.reshape(B, T, C), {"wte": g["wte.weight"], "wpe": g["wpe.weight"]})

    # ---- generation ---------------------------------------------------------------------------
    def forward_cached(self, tokens, cache, last_only: bool = False):
        """Logits of new tokens (B,Tn) given a KVCache of the earlier positions (see kvcache.py)."""
        from .kvcache import forward_cached
        return forward_cached(self, tokens, cache, last_only)

    # ---- conveniences -----------------------------------------------------------------------
    def grad_norm(self) -> float:
        """The global L2 norm of the gradient buffer."""
        g = self.flat_grads
        return float(self.xp.sqrt(self.xp.dot(g, g)))

    def __repr__(self):
        c = self.config
        return (f"GPT({c.n_layer} layers, {c.n_head} heads, {c.n_embd} channels, vocab {c.vocab_size}, "
                f"{self.num_parameters:,} parameters, {self.dtype} on {self.device})")
