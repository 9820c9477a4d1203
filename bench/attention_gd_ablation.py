"""Which component of attention-gd earns its perplexity gain: the ablation table.

    python bench/attention_gd_ablation.py [--model smollm2-135m] [--seeds 0 1 2]
        [--qk-sparsities 0.6 0.7 0.8] [--all-sparsity 0.5] [--nsamples 32]
        [--calib-seqlen 512] [--seqlen 256] [--max-windows 64] [--out FILE.json]
    python bench/attention_gd_ablation.py --smoke      (tiny-llama, pydoc, seconds)

Protocol (fixed before the run; readings, comparison and rule in
core/analysis/gd_ablation.py):
- Families: "qk s": W_Q and W_K only, at s = 0.6, 0.7, 0.8 (about 10 % of smollm2-135m's
  weights; everything else dense); "all s": every linear at s = 0.5, q/k by the reading, then
  every other linear by Wanda in a second layer-wise pass over the model whose q/k the reading
  has pruned, the same for every reading.
- Readings of q/k: magnitude, Wanda, OBD (the attention objective's diagonal-Hessian saliency),
  SparseGPT restricted to q/k, Wanda + swap (steps = 0), Adam without swap, the default
  (Adam + swap), each a registered method with options (``ablation.READINGS``), through
  ``core.pruning.apply.apply_prune`` on a fresh copy of the model.
- Calibration: C4 train, --nsamples x --calib-seqlen tokens (32 x 512: the default calibration
  of the 30/50/70 % runs quoted in docs/design-notes.md; attention-gd takes its first 8 x 64),
  seeds --seeds (3), drawn as every run draws them; evaluation: the first --max-windows (64)
  C4 validation windows of --seqlen (256) tokens, the same for every run and the dense model.
- Per run the NLL of every window (``evaluate_perplexity``); per reading the difference from
  Wanda paired on windows and seeds, and per component (swap search, descent) the difference
  from the default without it, each with its 95 % interval over windows and seeds; the
  component rule (``ablation.RULE``) says which earns the gain.
The per-run NLLs are kept in --out (a JSON file) as they are measured, so a stopped run goes
on where it stopped. Prints one markdown table per family and sparsity.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from protocol import open_store, protocol_parser

from core.analysis.gd_ablation import COMPONENTS, READINGS, RULE, ablation_rows
from core.evaluation.perplexity import evaluate_perplexity
from core.pruning.apply import apply_prune
from core.runs import get_calib_windows, get_eval_windows, get_model
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

# --smoke also caps the Adam readings at 10 steps (the method's default: 150), a check of
# the script, not of the readings
SMOKE = {"model": "tiny-llama", "seeds": [0, 1], "qk_sparsities": [0.7], "nsamples": 2,
         "calib_seqlen": 32, "seqlen": 32, "max_windows": 4, "gd_steps": 10}  # fmt: skip


def parse(argv=None):
    ap = protocol_parser(__doc__, nsamples=32, seqlen=256, max_windows=64)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--qk-sparsities", type=float, nargs="+", default=[0.6, 0.7, 0.8])
    ap.add_argument("--all-sparsity", type=float, default=0.5)
    ap.add_argument("--calib-seqlen", type=int, default=512, help="calibration tokens per sequence")
    ap.add_argument("--readings", nargs="+", default=list(READINGS), choices=list(READINGS))
    ap.add_argument("--out", default=None, help="per-run window NLLs (JSON), kept as measured")
    ap.add_argument("--smoke", action="store_true", help="tiny-llama on pydoc text, seconds")
    args = ap.parse_args(argv)
    args.data = ("c4", "train"), ("c4", "validation")
    args.gd_steps = None
    if args.smoke:
        vars(args).update(SMOKE)
        args.data = ("pydoc", "train"), ("pydoc", "test")
    if "wanda" not in args.readings:
        ap.error("the comparison is against Wanda: keep it among --readings")
    return args


def settings(args) -> list[tuple[str, float]]:
    """(family, sparsity) pairs: "qk" at each --qk-sparsities, then "all" at --all-sparsity."""
    return [("qk", s) for s in args.qk_sparsities] + [("all", args.all_sparsity)]


def other_roles(lm) -> str:
    """Every linear role of the model's family except q and k, as a targets list."""
    roles = type(lm.adapter).traits(lm.adapter.config).roles
    return ",".join(r for r in roles if r not in ("q", "k"))


def run_once(
    spec: ModelSpec, reading: str, family: str, s: float, calib, windows, steps=None
) -> list[float]:
    """Prune a fresh copy of the model by ``reading`` (q/k; V/O/MLP by Wanda for "all") and
    return the NLL of every evaluation window; ``steps``: a cap for a reading that descends."""
    lm = get_model(spec, fresh=True)
    device = torch.device(spec.device)
    method, options = READINGS[reading]
    if steps is not None and method == "attention-gd" and "steps" not in dict(options):
        options = (*options, ("steps", steps))
    apply_prune(lm, PruneConfig(method, s, targets="qk", options=options), calib, device)
    if family == "all":
        apply_prune(lm, PruneConfig("wanda", s, targets=other_roles(lm)), calib, device)
    return list(evaluate_perplexity(lm.model, windows, device=device).window_nll)


def measure(args) -> dict[str, list[float]]:
    """Every (family, sparsity, reading, seed) run's window NLLs, resumed from --out."""
    spec = ModelSpec(args.model, "cpu", "float32")
    out = Path(args.out) if args.out else None
    done = json.loads(out.read_text()) if out and out.is_file() else {}
    lm = get_model(spec, fresh=False)
    (cal_name, cal_split), (ev_name, ev_split) = args.data
    evalc = EvalConfig(DataSpec(ev_name, ev_split, args.data_dir), args.seqlen, args.max_windows)
    windows, _ = get_eval_windows(lm, evalc)
    if "dense" not in done:
        done["dense"] = list(evaluate_perplexity(lm.model, windows).window_nll)
    for seed in args.seeds:
        calib = CalibConfig(DataSpec(cal_name, cal_split, args.data_dir), args.nsamples,
                            args.calib_seqlen, seed)  # fmt: skip
        ids, _ = get_calib_windows(lm, calib)
        for family, s in settings(args):
            for reading in args.readings:
                key = f"{family}|{s:g}|{reading}|{seed}"
                if key in done:
                    continue
                t0 = time.perf_counter()
                done[key] = run_once(spec, reading, family, s, ids, windows, args.gd_steps)
                print(f"  {key}: ppl {np.exp(np.mean(done[key])):.3f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
                if out:
                    out.write_text(json.dumps(done))
    return done


def table(args, done: dict[str, list[float]]) -> str:
    """The markdown tables: per setting, each reading against Wanda, then the components."""
    lines = [
        f"Ablation of attention-gd: {args.model}, calibration {args.nsamples} x "
        f"{args.calib_seqlen} "
        f"({args.data[0][0]}), seeds {args.seeds}; evaluation {args.max_windows} x "
        f"{args.seqlen} {args.data[1][0]} {args.data[1][1]} windows; dense ppl "
        f"{np.exp(np.mean(done['dense'])):.3f}. Δ = ln PPL − ln PPL(Wanda), 95 % interval "
        "over windows and seeds (paired).",
    ]
    for family, s in settings(args):
        nll = {
            r: np.array([done[f"{family}|{s:g}|{r}|{seed}"] for seed in args.seeds])
            for r in args.readings
        }
        readings, components = ablation_rows(nll)
        what = "W_Q/W_K only" if family == "qk" else "every linear (V/O/MLP by Wanda)"
        lines += ["", f"**{s:.0%} of {what}**", "",
                  "| q/k reading | PPL | Δ ln PPL vs Wanda [95 %] |", "|---|---|---|"]  # fmt: skip
        for row in readings:
            lines.append(
                f"| {row['reading']} | {row['ppl']:.3f} | {row['delta']:+.4f} "
                f"[{row['delta_lo']:+.4f}, {row['delta_hi']:+.4f}] |"
            )
        if components:
            lines += ["", "| component (default − without it) | δ ln PPL [95 %] | verdict |",
                      "|---|---|---|"]  # fmt: skip
            for c in components:
                lines.append(
                    f"| {c['component']} (− {COMPONENTS[c['component']]}) | {c['delta']:+.4f} "
                    f"[{c['delta_lo']:+.4f}, {c['delta_hi']:+.4f}] | {c['verdict']} |"
                )
    lines += ["", "Rule: " + " ".join(RULE.split())]
    return "\n".join(lines)


def main(argv=None) -> str:
    args = parse(argv)
    t0 = time.perf_counter()
    open_store(args, "ablation-")  # silences transformers' progress bars and info logs
    text = table(args, measure(args))
    print(text)
    print(f"\nablation wall time {(time.perf_counter() - t0) / 60:.1f} min", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
