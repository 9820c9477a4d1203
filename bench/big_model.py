"""A model larger than the memory it is pruned in: streamed Wanda, SparseGPT and SliceGPT.

    python bench/big_model.py [--workdir /tmp/ps-big] [--layers 48] [--hidden 1024]
                              [--nsamples 4 --calib-seqlen 128 --windows 2 --seqlen 128]
                              [--threads 1] [--methods sparsegpt,slicegpt,wanda] [--no-dense]

Builds a randomly initialised Llama-shaped model (default: 48 layers, d = 1024, 2816 MLP,
32000 vocabulary, untied head: 682 M parameters, 2.73 GB float32) and saves it as
safetensors one decoder layer per shard, never holding it whole. Then, each phase in a fresh
subprocess that reports its own peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, so
phases do not pollute each other): dense perplexity streamed layer by layer; Wanda and
SparseGPT at 50% and SliceGPT at 25%, each streamed from the source files into a new folder
written shard by shard (``core.stream.pipeline``); the pruned folder's perplexity streamed;
and the folder reloaded whole with plain transformers (SliceGPT: ``load_sliced``) and
evaluated the ordinary way, which must give the same perplexity. The reload phase holds the
whole model by design; the goal (peak RSS <= 35% of the weight bytes) is for the streamed
phases. Token ids are seeded random draws from the vocabulary: on a random model the
perplexity means nothing beyond the equality checked here. Wall times are printed but on a
shared machine they are not speed figures.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from core.evaluation.perplexity import evaluate_perplexity
from core.methods.slicegpt import load_sliced
from core.settings.config import PruneConfig
from core.stream.pipeline import perplexity_streamed, prune_streamed
from core.stream.synthetic import llama_config, write_random_model
from core.stream.weights import LazyWeights

METHODS = {"wanda": 0.5, "sparsegpt": 0.5, "slicegpt": 0.25}
GOAL = 0.35


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def build(args) -> dict:
    """The random source model, one unit per shard (``core.stream.synthetic``)."""
    cfg = llama_config(args.layers, args.hidden, args.intermediate, args.vocab)
    total = write_random_model(Path(args.workdir) / "source", cfg, torch.float32)
    return {"weight_bytes": total, "n_params": total // 4, "shards": args.layers + 2}


def _ids(args, n: int, L: int, seed: int) -> torch.Tensor:
    return torch.randint(0, args.vocab, (n, L), generator=torch.Generator().manual_seed(seed))


def phase(args) -> dict:
    """One phase in this (fresh) process; returns its figures and peak RSS."""
    if args.threads:
        torch.set_num_threads(args.threads)
    work, name = Path(args.workdir), args.phase
    windows = _ids(args, args.windows, args.seqlen, seed=1)
    out: dict = {}
    t0 = time.perf_counter()
    if name == "build":
        out = build(args)
    elif name == "idle":
        pass  # interpreter + torch + transformers + core: the floor under every phase
    elif name.startswith("eval-"):
        folder = work / name.removeprefix("eval-")
        res, peak = perplexity_streamed(folder, windows, args.batch_size)
        out = {"ppl": res.ppl, "peak_params": peak}
    elif name.startswith("prune-"):
        method = name.removeprefix("prune-")
        prune = PruneConfig(method=method, sparsity=METHODS[method])
        calib = _ids(args, args.nsamples, args.calib_seqlen, seed=0)
        run = prune_streamed(work / "source", work / method, prune, calib)
        out = {
            "peak_params": run.peak_materialised,
            "out_bytes": LazyWeights(work / method).nbytes(),
        }
    elif name.startswith("reload-"):
        method = name.removeprefix("reload-")
        folder = work / method
        model = (
            load_sliced(folder)
            if method == "slicegpt"
            else AutoModelForCausalLM.from_pretrained(folder)
        )
        out = {"ppl": evaluate_perplexity(model.eval(), windows, args.batch_size).ppl}
    out.update(seconds=time.perf_counter() - t0, peak_rss=peak_rss_bytes())
    return out


def run_phase(args, name: str) -> dict:
    cmd = [sys.executable, __file__, "--phase", name, *sys.argv[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"phase {name} failed (exit {proc.returncode})")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"  {name:16s} peak RSS {res['peak_rss'] / 2**20:8.0f} MiB  {res['seconds']:7.1f} s",
        flush=True,
    )
    return res


def main(args) -> None:
    threads = args.threads or torch.get_num_threads()
    print(
        f"big_model: {args.layers} layers, d={args.hidden}, workdir {args.workdir}, "
        f"{threads} thread(s) per phase",
        flush=True,
    )
    built = run_phase(args, "build")
    weights = built["weight_bytes"]
    print(
        f"  source: {built['n_params'] / 1e6:.0f} M parameters, {weights / 1e9:.2f} GB float32, "
        f"{built['shards']} shards",
        flush=True,
    )
    idle = run_phase(args, "idle")
    rows = []
    if not args.no_dense:
        dense = run_phase(args, "eval-source")
        rows.append(("dense (eval)", dense["peak_rss"], dense["peak_rss"], dense["ppl"], math.nan))
    for method in args.methods.split(","):
        s = METHODS[method]
        pruned = run_phase(args, f"prune-{method}")
        ev = run_phase(args, f"eval-{method}")
        re = run_phase(args, f"reload-{method}")
        rows.append((f"{method} {s:.0%}", pruned["peak_rss"], ev["peak_rss"], ev["ppl"], re["ppl"]))
    print()
    print(
        f"weight bytes (source, float32): {weights:,} ({weights / 2**20:.0f} MiB); "
        f"idle process (python + torch + transformers + core): {idle['peak_rss'] / 2**20:.0f} MiB"
    )
    print(
        f"calibration {args.nsamples} x {args.calib_seqlen} tokens, eval {args.windows} x {args.seqlen}"
    )
    head = (
        f"{'method':14s} {'weight bytes':>13s} {'prune peak RSS':>15s} {'eval peak RSS':>14s} "
        f"{'ratio':>7s} {'goal':>5s} {'ppl streamed':>13s} {'ppl reloaded':>13s} {'same':>5s}"
    )
    print(head)
    print("-" * len(head))
    for method, p_rss, e_rss, ppl, ppl_re in rows:
        ratio = max(p_rss, e_rss) / weights
        ok = "yes" if ratio <= GOAL else "NO"
        same = "-" if ppl_re != ppl_re else ("yes" if abs(ppl_re - ppl) <= 1e-5 * ppl else "NO")
        print(
            f"{method:14s} {weights / 2**20:9.0f} MiB {p_rss / 2**20:11.0f} MiB "
            f"{e_rss / 2**20:10.0f} MiB {ratio:7.1%} {ok:>5s} {ppl:13.4f} {ppl_re:13.4f} {same:>5s}"
        )
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)


def parse(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", default="/tmp/ps-big")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--nsamples", type=int, default=4)
    ap.add_argument("--calib-seqlen", type=int, default=128)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the model folders afterwards")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list, in this order")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense source's perplexity")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per phase (default: torch's). On a shared, loaded machine 1 is "
        "much faster: MKL's two-thread cholesky_inverse took 14-17 s for 2816 x 2816 there, "
        "one thread 0.7 s (the bits of SparseGPT's factors depend on the thread count)",
    )
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse()
    if ARGS.phase:
        print(json.dumps(phase(ARGS)))
    else:
        main(ARGS)
