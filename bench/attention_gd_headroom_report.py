"""The headroom table's report: the printed table, its JSON for the pages, the attribution of
each judged row (``core.methods.attention_gd.attribution``) and the default's choice
(``core.analysis.gd_choice``). The protocol: attention_gd_headroom.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from core.analysis.gd_choice import COMPARATOR, choose_default, held_differences
from core.methods.attention_gd.attribution import Stages, attribute

SPARSITY = 0.5
TOL = 1e-5
JUDGED = ("gd M0=wanda", "gd polytope", "gd anneal", "gd topk")  # rows the attribution judges
CANDIDATES = ("gd polytope", "gd anneal", "gd topk", *(f"{r} + swap" for r in JUDGED[1:]))
EXCLUDED = ("sparsegpt",)  # changes the weights: not a binary mask of the same objective


def _ms(rows, key) -> tuple[float, float]:
    xs = [r[key] for r in rows]
    return statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def stages(res, n: int, row: str) -> Stages:
    """The attribution's inputs for ``row`` at size n: means over seeds of the layer means;
    B_cal over every binary-mask row of the table."""
    mask_rows = [name for (size, name) in res if size == n and name not in EXCLUDED]
    return Stages(
        wanda_cal=_ms(res[(n, "wanda")], "calib")[0],
        wanda_held=_ms(res[(n, "wanda")], "held")[0],
        best_binary_cal=min(_ms(res[(n, name)], "calib")[0] for name in mask_rows),
        cont_budget=_ms(res[(n, row)], "cont")[0],
        bin_cal=_ms(res[(n, row)], "calib")[0],
        bin_held=_ms(res[(n, row)], "held")[0],
    )


def attributions(res, n: int) -> dict[str, str]:
    """The label of every judged row present at size n."""
    return {row: attribute(stages(res, n, row)) for row in JUDGED if (n, row) in res}


def default_choice(held, sizes) -> tuple[str, str, dict]:
    """(row, sentence, intervals per candidate and size) by ``choice.choose_default``."""
    arrays = {
        row: {n: np.asarray(held[row][n]) for n in sizes}
        for row in (COMPARATOR, *CANDIDATES)
        if row in held
    }
    diffs = held_differences(arrays, tuple(r for r in CANDIDATES if r in arrays))
    row, why = choose_default(diffs)
    return row, why, diffs


def write_json(path: Path, args, res, held, sizes) -> None:
    """The table (mean and std over seeds of every column), the attributions and the choice
    of the default, for the pages (``core.methods.attention_gd.headroom``)."""
    rows = sorted({name for (_, name) in res}, key=lambda name: list(held).index(name))
    row, why, diffs = default_choice(held, sizes)
    out = {
        "model": args.model,
        "sparsity": SPARSITY,
        "layers": args.headroom_layers,
        "seeds": args.seeds,
        "optimizer": args.headroom_optimizer,
        "steps": args.headroom_steps,
        "swap_evals": args.swap_evals,
        "rule": "core/methods/attention_gd/attribution.py (RULE)",
        "default": {"row": row, "why": why},
        "sizes": [
            {
                "tokens": n * args.seqlen,
                "attribution": attributions(res, n)["gd M0=wanda"],
                "attributions": attributions(res, n),
                "held_vs_wanda_swap": {
                    cand: [d[n].estimate, d[n].lo, d[n].hi] for cand, d in diffs.items()
                },
                "rows": {
                    name: {k: _ms(res[(n, name)], k) for k in res[(n, name)][0]} for name in rows
                },
            }
            for n in sizes
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


def print_table(args, res, held, sizes, ad) -> None:
    d = ad.hidden_size
    rows = list(held)
    print()
    print(
        f"headroom: model {args.model}, Q/K only, {SPARSITY:.0%} per row; layers "
        f"{args.headroom_layers} layer-wise from dense inputs, GQA group = layer mod "
        f"{ad.n_kv_heads} judged on each; seeds {args.seeds}; held-out 16 C4 "
        f"validation windows of {args.seqlen}; GD: {args.headroom_optimizer}, tol {TOL:g}, cap "
        f"{args.headroom_steps} steps, default λ_rel; swap search: <= {args.swap_evals} "
        f"evaluations per group; errors mean over layers, ± std over seeds; cont: M_T on the "
        f"budget's polytope"
    )
    head = (
        f"{'tokens':>7}  {'row':<22}{'calib err':>17}{'held-out err':>17}"
        f"{'cont err':>9}{'delta':>7}{'flip':>7}{'agree W':>8}{'conv':>6}{'steps':>6}{'s/layer':>8}"
    )
    print(head)
    print("-" * len(head))
    for n in sizes:
        tokens = n * args.seqlen
        for name in rows:
            cells = res[(n, name)]
            c, h = _ms(cells, "calib"), _ms(cells, "held")
            label = "sparsegpt (H<d)" if name == "sparsegpt" and tokens < d else name

            def opt(key, fmt, cells=cells):
                return format(_ms(cells, key)[0], fmt) if key in cells[0] else "-"

            print(
                f"{tokens:>7}  {label:<22}{c[0]:>9.4f} ± {c[1]:.4f}{h[0]:>9.4f} ± {h[1]:.4f}"
                f"{opt('cont', '.4f'):>9}{opt('delta', '.3f'):>7}{opt('flip', '.3f'):>7}"
                f"{opt('agree', '.3f'):>8}"
                f"{opt('converged', '.2f'):>6}{opt('steps', '.0f'):>6}{opt('t', '.2f'):>8}"
            )
    print()
    print(
        f"{'tokens':>7}  {'row judged':<16}{'g_obj':>9}{'g_cont':>9}{'g_bin':>9}{'g_held':>9}  gap"
    )
    for n in sizes:
        for row, label in attributions(res, n).items():
            g = stages(res, n, row).gains()
            print(
                f"{n * args.seqlen:>7}  {row:<16}{g['obj']:>9.4f}{g['cont']:>9.4f}"
                f"{g['bin']:>9.4f}{g['held']:>9.4f}  {label}"
            )
    causes = {n * args.seqlen: attributions(res, n)["gd M0=wanda"] for n in sizes}
    print(
        "\nWhere attention-gd's descent loses its gain over Wanda, by calibration tokens: "
        + "; ".join(f"{t}: {c}" for t, c in causes.items())
        + f" (rule: core/methods/attention_gd/attribution.py; d = {d})."
    )
    row, why, diffs = default_choice(held, sizes)
    print(f"\nheld-out error − {COMPARATOR!r} (paired over seeds and layers, 95 % interval):")
    for cand, per in diffs.items():
        cells = "  ".join(f"{n * args.seqlen}: {iv}" for n, iv in sorted(per.items()))
        print(f"  {cand:<22}{cells}")
    print(f"default (core/analysis/gd_choice.py): {why}.")
