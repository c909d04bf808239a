"""A PyTorch CPU eager reference of NanoEuler's GPT, for bench/cpu_training.py only.

The same model as euler_core.model.GPT, written plainly in PyTorch for timing: token and position
embeddings, n_layer pre-norm blocks (layernorm, fused qkv linear, causal multi-head attention
through F.scaled_dot_product_attention, projection, residual; layernorm, 4C linear, GELU with the
tanh approximation, projection, residual), a final layernorm and the classifier tied to the token
embedding (over the padded vocabulary, loss over the real one). No dropout. AdamW with weight
decay on 2-D weights only, gradient-norm clipping at 1.0, float32, eager mode (no torch.compile).

PyTorch is never a NanoEuler dependency: this file runs in its own virtual environment as a
subprocess of the benchmark (see bench/cpu_training.py), and prints one JSON line of results.

    /work/venv-torch/bin/python bench/torch_reference.py --config '{"n_layer": 6, ...}' --B 12 --T 256
"""

import argparse
import json
import math
import os
import resource
import time

T_START = time.time()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):                                   # x (B,T,C)
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)  # (B,T,C) each
        q, k, v = (a.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for a in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B,NH,T,HS)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab):
        super().__init__()
        self.vocab_size = vocab_size
        self.wte = nn.Embedding(padded_vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():             # GPT-2's initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):                     # (B,T) each
        B, T = tokens.shape
        x = self.wte(tokens) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T           # (B,T,Vp) tied classifier
        return F.cross_entropy(logits[..., :self.vocab_size].reshape(B * T, -1), targets.reshape(-1),
                               ignore_index=-1)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="JSON of n_layer, n_head, n_embd, block_size, vocab_size, padded_vocab")
    ap.add_argument("--B", type=int, required=True)
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = json.loads(args.config)
    model = GPT(**cfg)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(0)
    step_times, losses, first_step_end = [], [], None
    for step in range(1 + args.warmup + args.steps):
        x = torch.randint(0, cfg["vocab_size"], (args.B, args.T), generator=gen)
        y = torch.randint(0, cfg["vocab_size"], (args.B, args.T), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if step == 0:
            first_step_end = time.time()
        elif step > args.warmup:
            step_times.append(dt)
    print(json.dumps({"impl": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                      "t_start": T_START, "t_first_step_end": first_step_end, "step_times": step_times,
                      "losses": losses, "maxrss_mb": peak_rss_mb(),
                      "num_parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
