"""The PyTorch reference GPT-2: the model NanoEuler's training step is timed and checked against.

A plain nanoGPT-style GPT-2 of exactly NanoEuler's architecture (euler_core/model.py): token and
position embeddings; n_layer pre-norm blocks (layernorm, fused qkv linear, causal attention through
F.scaled_dot_product_attention, projection, residual; layernorm, 4C linear, GELU with the tanh
approximation, projection, residual); a final layernorm; the classifier tied to the token embedding,
over the padded vocabulary, with the loss over the real one only (the padded logits are sliced off,
as NanoEuler's crossentropy ignores them). No dropout. Layernorm eps 1e-5.

Training as NanoEuler trains: AdamW, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D
weights only, the gradient clipped to norm 1.0, the learning rate given per step.
- On the GPU: `torch.autocast` in bfloat16 (float32 master weights and optimizer state; matmuls and
  attention in bf16, the loss in float32), `torch.optim.AdamW(fused=True)`, eager or `torch.compile`
  (--compile). TF32 allowed for what autocast leaves in float32, as nanoGPT does.
- On the CPU: float32 eager (bench/cpu_training.py), on --threads threads.

Parameters have GPT-2's names in nanoGPT's layout (`transformer.h.0.attn.c_attn.weight`, ...,
`lm_head.weight` tied); weights.py maps NanoEuler's names onto them, so --init loads NanoEuler's
initial weights (an .npz of our names) and both train from the same start.

PyTorch is never a NanoEuler dependency: this module runs as a subprocess in an environment that
has torch (`euler bench train --reference`, `euler bench quality`, bench/cpu_training.py), needs
only torch and NumPy (not nanoeuler), and prints one JSON line of results at the end:

    python -m euler_torch_reference.gpt2 --config '{"n_layer": 12, "n_head": 12, "n_embd": 768,
        "block_size": 1024, "vocab_size": 50257, "padded_vocab": 50304}' --B 16 --T 1024 --compile
    ... --init init.npz --plan plan.npz     # our initial weights; the batches and lr of every step

Steps: step 0 (the first: compilation, allocation), then --warmup steps, then --steps timed ones;
with --plan, one step per planned batch. Each step ends by reading the loss (a host sync), as a
training loop that logs every step does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time

T_START = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from .weights import reference_layout, to_reference  # noqa: E402


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):                                       # x (B,T,C)
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)                # (B,T,C) each
        q, k, v = (a.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for a in (q, k, v))  # (B,NH,T,HS)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B,NH,T,HS)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd: int):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer: int, n_head: int, n_embd: int, block_size: int, vocab_size: int, padded_vocab: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.layout = reference_layout(n_layer, n_embd, block_size, padded_vocab)
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(padded_vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer)), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, padded_vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight       # tied classifier
        residual_std = 0.02 / math.sqrt(2 * n_layer)            # GPT-2's initialisation, as NanoEuler's
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, residual_std if name.endswith("c_proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.transformer.wte.weight[vocab_size:] = 0.0      # padded rows: never a token nor a target

    def forward(self, tokens, targets):                         # (B,T) each -> the mean loss
        B, T = tokens.shape
        positions = torch.arange(T, device=tokens.device)
        x = self.transformer.wte(tokens) + self.transformer.wpe(positions)  # (B,T,C)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))         # (B,T,Vp)
        return F.cross_entropy(logits[..., :self.vocab_size].reshape(B * T, -1), targets.reshape(-1),
                               ignore_index=-1)

    def load_named(self, named: dict) -> None:
        """Load NanoEuler's named parameters (arrays under our names, llm.c layout; weights.py)."""
        state = to_reference(named, self.layout)
        self.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in state.items()})


def optimizer(model: GPT, lr: float, weight_decay: float, fused: bool):
    """AdamW as NanoEuler's: weight decay on the 2-D weights only (the tied wte/lm_head once)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused or None)


def peak_rss_mb() -> float:
    """Peak resident memory of this process: VmHWM (fresh at exec; ru_maxrss is inherited)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description="The PyTorch reference GPT-2: train steps, print one JSON line.")
    ap.add_argument("--config", required=True,
                    help="JSON of n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab")
    ap.add_argument("--B", type=int, required=True)
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (with --plan: every planned step runs)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--lr", type=float, default=1e-4, help="the learning rate without --plan")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--init", default=None, help=".npz of NanoEuler's named initial parameters")
    ap.add_argument("--plan", default=None, help=".npz with tokens (S,B,T+1) int32 and lr (S,): the batches "
                                                 "and learning rate of every step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads")
    args = ap.parse_args(argv)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = json.loads(args.config)
    model = GPT(**cfg)
    if args.init:
        with np.load(args.init, allow_pickle=False) as f:
            model.load_named({k: f[k] for k in f.files})
    model.to(device)
    run = torch.compile(model) if args.compile else model
    opt = optimizer(model, args.lr, args.weight_decay, fused=cuda)
    params = list(model.parameters())

    if args.plan:
        with np.load(args.plan, allow_pickle=False) as f:
            plan_tokens, plan_lr = f["tokens"], f["lr"]
        if plan_tokens.shape[1:] != (args.B, args.T + 1):
            raise SystemExit(f"--plan holds batches of {plan_tokens.shape[1:]}, expected (B, T+1) = ({args.B}, {args.T + 1})")
        n_steps = len(plan_tokens)
    else:
        n_steps = 1 + args.warmup + args.steps
        gen = torch.Generator().manual_seed(args.seed)

    def batch(step):
        if args.plan:
            window = torch.from_numpy(plan_tokens[step].astype(np.int64))
            x, y, lr = window[:, :-1], window[:, 1:], float(plan_lr[step])
        else:
            x = torch.randint(0, cfg["vocab_size"], (args.B, args.T), generator=gen)
            y = torch.randint(0, cfg["vocab_size"], (args.B, args.T), generator=gen)
            lr = args.lr
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        return x, y, lr

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    step_times, losses, grad_norms, device_used, first_step_end = [], [], [], [], None
    # As NanoEuler's loop reads its losses (euler_core.train.overlaps): on the GPU step k's loss and
    # gradient norm are copied to the host without waiting and read once step k+1 is queued (the first
    # step at once: the time to it is measured); a step's time is the interval between two reads.
    queued, read_at = [], None

    def read(step, loss_host, norm_host, done):
        nonlocal read_at, first_step_end
        if done is not None:
            done.synchronize()
        losses.append(float(loss_host))
        grad_norms.append(float(norm_host))
        now = time.perf_counter()
        if step == 0:
            first_step_end = time.time()
        elif step > args.warmup:
            step_times.append(now - read_at)
        read_at = now
        if cuda:
            free, total = torch.cuda.mem_get_info()
            device_used.append(total - free)

    for step in range(n_steps):
        x, y, lr = batch(step)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = run(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        opt.step()
        if cuda:
            done = torch.cuda.Event()
            queued.append((step, loss.detach().to("cpu", non_blocking=True),
                           norm.detach().to("cpu", non_blocking=True), done))
            done.record()
        else:
            queued.append((step, loss.detach(), norm.detach(), None))
        if len(queued) > (1 if cuda and step > 0 else 0):
            read(*queued.pop(0))
    for item in queued:
        read(*item)
    result = {"impl": "torch", "version": torch.__version__, "device": device, "compile": args.compile,
              "autocast": "bfloat16" if cuda else None, "fused_adamw": cuda, "threads": torch.get_num_threads(),
              "t_start": T_START, "t_first_step_end": first_step_end, "step_times": step_times, "losses": losses,
              "grad_norms": grad_norms, "maxrss_mb": peak_rss_mb(),
              "num_parameters": sum(p.numel() for p in model.parameters())}
    if cuda:
        result.update(device_name=torch.cuda.get_device_name(), cudnn=torch.backends.cudnn.version(),
                      max_memory_allocated=torch.cuda.max_memory_allocated(),
                      max_memory_reserved=torch.cuda.max_memory_reserved(), device_used_max=max(device_used))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
