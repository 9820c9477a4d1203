"""Throughput of the perplexity loop against this machine's float32 matmul rate.

    python bench/eval_throughput.py [--model smollm2-135m] [--seqlen 512] [--windows 8]
                                    [--dtype float32] [--device auto] [--batch-size 4]

Prints tokens/s of ``core.evaluation.perplexity.evaluate_perplexity``, the float32 GEMM rate
measured in the same process, the model's forward FLOPs per token, and the ratio of achieved model
FLOP/s to the GEMM rate (how close the forward pass runs to the machine's matmul peak).
"""

from __future__ import annotations

import argparse
import time

import torch

from core.data import default_data_dir
from core.machine.device import resolve_device, resolve_dtype


def matmul_rate(device: torch.device, n: int = 2048, repeats: int = 10) -> float:
    """Sustained float32 GEMM FLOP/s for (n, n) @ (n, n)."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(2):  # warm-up
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - t0)


def forward_flops_per_token(adapter, seqlen: int) -> float:
    """2·(multiply-adds) per token: every decoder linear, the LM head, and attention
    scores + weighted sum (causal, so on average seqlen/2 keys per query)."""
    linear = sum(
        lin.weight.numel() for layer in adapter.layers for lin in adapter.linears(layer).values()
    )
    head = adapter.lm_head.weight.numel()
    attn = adapter.n_layers * adapter.n_heads * adapter.head_dim * 2 * (seqlen / 2)
    return 2.0 * (linear + head + attn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()

    from core.data import eval_windows, load_corpus
    from core.evaluation.perplexity import evaluate_perplexity
    from core.models.load import load_model
    from core.settings.config import DataSpec

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    lm = load_model(args.model, device, dtype)
    data_dir = default_data_dir()
    spec = DataSpec("wikitext2", "test", data_dir) if data_dir else DataSpec("pydoc", "test")
    windows = eval_windows(lm.tokenizer, load_corpus(spec), args.seqlen, args.windows)
    evaluate_perplexity(lm.model, windows[:1], 1, device)  # warm-up
    res = evaluate_perplexity(lm.model, windows, args.batch_size, device)
    gemm = matmul_rate(device)
    fpt = forward_flops_per_token(lm.adapter, args.seqlen)
    achieved = fpt * res.tokens_per_s
    print(f"model {args.model} on {device} ({dtype}), threads {torch.get_num_threads()}")
    print(
        f"corpus {spec.dataset}: {res.n_windows} windows x {res.seqlen} tokens, "
        f"batch {args.batch_size}"
    )
    print(f"{'perplexity':<34}{res.ppl:>12.4f}")
    print(f"{'eval tokens/s':<34}{res.tokens_per_s:>12.1f}")
    print(f"{'forward GFLOP per token':<34}{fpt / 1e9:>12.4f}")
    print(f"{'achieved model GFLOP/s':<34}{achieved / 1e9:>12.2f}")
    print(f"{'float32 GEMM GFLOP/s (2048^3)':<34}{gemm / 1e9:>12.2f}")
    print(f"{'ratio achieved / GEMM':<34}{achieved / gemm:>12.3f}")


if __name__ == "__main__":
    main()
