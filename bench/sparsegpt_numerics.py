"""How far a pruned model's perplexity moves when only the last bit of the arithmetic does.

    python bench/sparsegpt_numerics.py [--method sparsegpt] [--pattern unstructured]
        [--calib-dtype float32] [--runs 4]
    MKL_CBWR=COMPATIBLE python bench/sparsegpt_numerics.py --runs 1     # MKL's other code path

The protocol of the SparseGPT figures (C4 train 32 x 512, seed 0; WikiText-2 test, first 64
windows of 512): run 0 prunes as the product does; run r >= 1 first moves a random half of
the layer-0 calibration inputs by one float32 ulp (``torch.nextafter``, seed r), the size of
the difference two CPUs' kernels make. Whatever the perplexities then spread over is the
method's numerical spread at this protocol: a figure quoted to more digits than it is noise.
Printed: each run's perplexity, their mean, standard deviation and range, and the code paths
(``MKL_CBWR`` for MKL's float32 products, ``ONEDNN_MAX_CPU_ISA`` for oneDNN's bfloat16 ones)
and thread count the process ran with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from protocol import SHARED_DATA, protocol_windows

import core.pruning.layerwise as layerwise
from core.evaluation.perplexity import evaluate_perplexity
from core.models.load import load_model
from core.names import CALIB_DTYPES, F32
from core.pruning.apply import apply_prune
from core.settings.config import PruneConfig

_capture = layerwise.capture_layer_inputs


def ulp_nudge(hidden: list[torch.Tensor], seed: int) -> None:
    """Move a random half of the entries one ulp up or down (in place)."""
    gen = torch.Generator().manual_seed(seed)
    for h in hidden:
        pick = torch.rand(h.shape, generator=gen) < 0.5
        up = torch.rand(h.shape, generator=gen) < 0.5
        toward = torch.where(up, torch.inf, -torch.inf).to(h.dtype)
        h.copy_(torch.where(pick, torch.nextafter(h, toward), h))


def run_once(args: argparse.Namespace, calib: torch.Tensor, windows: torch.Tensor, r: int):
    """One prune-and-score; r >= 1 nudges the layer-0 inputs first (module docstring)."""

    def nudged_capture(*a, **kw):
        inputs = _capture(*a, **kw)
        ulp_nudge(inputs.hidden, r)
        return inputs

    layerwise.capture_layer_inputs = nudged_capture if r else _capture
    lm = load_model(args.model)
    prune = PruneConfig(
        method=args.method, sparsity=0.5, pattern=args.pattern, calib_dtype=args.calib_dtype
    )
    t0 = time.perf_counter()
    apply_prune(lm, prune, calib, torch.device("cpu"))
    seconds = time.perf_counter() - t0
    ppl = evaluate_perplexity(lm.model, windows, device="cpu").ppl
    layerwise.capture_layer_inputs = _capture
    return ppl, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--method", default="sparsegpt")
    ap.add_argument("--pattern", default="unstructured")
    ap.add_argument("--calib-dtype", default=F32, choices=CALIB_DTYPES)
    ap.add_argument("--runs", type=int, default=4, help="run 0 as is, then ulp-nudged runs")
    ap.add_argument("--data-dir", default=str(SHARED_DATA))
    args = ap.parse_args()
    lm = load_model(args.model)
    calib, windows = protocol_windows(lm.tokenizer, args.data_dir, 32, 512, 64)
    del lm
    paths = [f"{k}={os.environ.get(k, '(default)')}" for k in ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA")]
    env = f"{', '.join(paths)}, {torch.get_num_threads()} threads"
    print(
        f"{args.model} {args.method} {args.pattern} 50%, calib forwards {args.calib_dtype}, {env}"
    )
    print("| run | layer-0 inputs | perplexity | pruning s |")
    print("|---|---|---|---|")
    ppls = []
    for r in range(args.runs):
        ppl, seconds = run_once(args, calib, windows, r)
        ppls.append(ppl)
        how = "as captured" if r == 0 else f"half nudged 1 ulp (seed {r})"
        print(f"| {r} | {how} | {ppl:.4f} | {seconds:.1f} |", flush=True)
    if len(ppls) > 1:
        mean, sd = statistics.mean(ppls), statistics.stdev(ppls)
        spread = (max(ppls) - min(ppls)) / mean
        print(
            f"mean {mean:.4f}, sd {sd:.4f} ({sd / mean:.2%}), range {min(ppls):.4f}-"
            f"{max(ppls):.4f} ({spread:.2%} of the mean) over {len(ppls)} runs"
        )


if __name__ == "__main__":
    main()
