"""Hugging Face transformers' `generate` timed the way `euler bench generate` times ours: the
reference that benchmark compares with. A script, run by `euler bench generate --hf-python PYTHON`
in an environment that has torch and transformers (never NanoEuler's: it imports neither
NanoEuler nor anything NanoEuler needs, and NanoEuler never imports it).

    python hf_generate.py --n-layer 12 --n-head 12 --n-embd 768 --device cpu --batches 1 --modes eager

For each mode and batch size it builds GPT2LMHeadModel of the given shape with random weights
(only speed is measured), then times, after warm-up calls, greedy generation of `--new-tokens` tokens
from a `--prompt-len`-token prompt per row (min_new_tokens = max_new_tokens, no end-of-text: every
row makes every token), and the same with one new token (the time to first token: prefill and one
sample). Modes:

    eager     generate with its default dynamic KV cache
    compiled  generate with cache_implementation="static": on CUDA transformers then compiles the
              decoding forward with torch.compile (mode "reduce-overhead", CUDA graphs)

One JSON object per (mode, batch) on stdout; progress on stderr. A mode that fails is a record with
its error, not a crash (the other measurements still come back).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# Run as a script, Python puts this folder first on sys.path, where profile.py (ours) would shadow
# the standard library's, which torch imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2", help="the name the records carry")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab-size", type=int, default=50257)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--batches", default="1")
    ap.add_argument("--modes", default="eager")
    ap.add_argument("--prompt-len", type=int, default=448)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    import transformers
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    config = GPT2Config(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, vocab_size=args.vocab_size,
                        n_positions=args.block_size)
    model = GPT2LMHeadModel(config).to(args.device, dtype).eval()
    cuda = args.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for mode in args.modes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            record = {"impl": f"hf-{mode}", "model": args.model, "device": args.device, "dtype": args.dtype,
                      "batch": batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
                      "threads": torch.get_num_threads(), **versions}
            try:
                g = torch.Generator().manual_seed(args.seed + batch)
                ids = torch.randint(0, args.vocab_size, (batch, args.prompt_len), generator=g).to(args.device)
                extra = {"cache_implementation": "static"} if mode == "compiled" else {}

                def run(new):
                    sync()
                    t = time.perf_counter()
                    with torch.inference_mode():
                        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                             min_new_tokens=new, do_sample=False, eos_token_id=None,
                                             pad_token_id=0, **extra)
                    sync()
                    assert out.shape == (batch, args.prompt_len + new), out.shape
                    return time.perf_counter() - t

                t0 = time.perf_counter()
                run(args.new_tokens)  # warm-up (and, compiled, the compilation)
                run(1)
                record["warmup_s"] = time.perf_counter() - t0
                totals, firsts = [], []
                for _ in range(args.repeats):
                    firsts.append(run(1))
                    totals.append(run(args.new_tokens))
                record.update(ttft_s=statistics.median(firsts), total_s=statistics.median(totals),
                              ttft_all_s=firsts, total_all_s=totals)
            except Exception as e:  # noqa: BLE001 - reported in the record
                record["error"] = f"{type(e).__name__}: {e}"[:500]
            print(json.dumps(record), flush=True)
            print(f"hf {mode} batch {batch}: {record.get('total_s', record.get('error'))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
