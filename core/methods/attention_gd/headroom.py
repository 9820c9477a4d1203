"""Where attention-gd stands against Wanda, per model, from the stored headroom analysis.

``python bench/attention_gd_headroom.py --headroom-json FILE`` writes the headroom table
(``core.analysis.gd_headroom``): per calibration size, mean and std over seeds of every row's
calibration and held-out attention error (and the GD rows' continuous error, mask delta, keep
flips, ...), and the attribution of the gap to Wanda (objective / relaxation / optimiser /
overfitting / none). The files measured so far sit beside this module as
``headroom_<model>.json``; a run of attention-gd carries ``standing`` (one sentence) in its
metrics, and the Attention masks and Assumption checks pages draw ``table``.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_ROW = "gd M0=wanda + swap"  # the reading attention-gd's defaults run (options docstring)
WANDA_ROW = "wanda"
GD_ROW = "gd M0=wanda"  # the continuous descent alone, from Wanda's mask
COLUMNS = ("calib", "held", "cont", "delta", "flip", "agree", "converged", "steps", "t")
CAUSES = {  # the labels of attribution.RULE
    "objective": "the objective (no binary mask near Wanda's that the search found is better "
    "even on the calibration data)",
    "optimiser": "the optimiser (its relaxed point at the budget holds less than half the gain "
    "a binary mask shows)",
    "relaxation": "the relaxation (rounding loses more than half of the relaxed gain at the "
    "budget)",
    "overfitting": "overfitting (more than half of the in-sample gain over Wanda is gone held out)",
}
OLD_RULE = (
    "Judged by the attribution rule before issue 45 (a dense continuous M_T against a sparse "
    "mask); rerun the bench for the current rule (core/methods/attention_gd/attribution.py)."
)


def path_for(model: str) -> Path:
    """Where the headroom analysis of ``model`` is stored (whether or not it exists)."""
    return HERE / f"headroom_{model}.json"


@functools.lru_cache(maxsize=16)
def load(model: str) -> dict[str, Any] | None:
    """The stored headroom analysis of ``model`` (``--headroom-json``'s layout), or None."""
    path = path_for(model)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _size(data: dict[str, Any], tokens: int | None) -> dict[str, Any]:
    """The calibration size nearest ``tokens`` (the smallest when None)."""
    sizes = sorted(data["sizes"], key=lambda s: s["tokens"])
    if tokens is None:
        return sizes[0]
    return min(sizes, key=lambda s: (abs(math.log(s["tokens"] / max(tokens, 1))), s["tokens"]))


def not_measured(model: str) -> str:
    return (
        f"On {model}: where attention-gd stands against Wanda is not yet measured "
        f"(python bench/attention_gd_headroom.py --model {model})."
    )


def standing(model: str, tokens: int | None = None) -> str:
    """One sentence: attention-gd's default against Wanda on ``model`` at the calibration size
    nearest ``tokens`` (calibration and held-out attention error, where the remaining gap is
    located), or that it is not yet measured."""
    data = load(model)
    if data is None:
        return not_measured(model)
    size = _size(data, tokens)
    rows = size["rows"]
    ours, wanda = rows[DEFAULT_ROW], rows[WANDA_ROW]
    cause = size["attribution"]
    where = (
        f"its failure to beat Wanda further is located in {CAUSES[cause]}"
        if cause in CAUSES
        else "its GD reading beats Wanda on calibration and held-out data"
    )
    return (
        f"On {model} (headroom analysis, {len(data['layers'])} layers x {len(data['seeds'])} "
        f"seeds, {size['tokens']} calibration tokens, {data['sparsity']:.0%} Q/K): "
        f"attention-gd's default has calibration attention error {ours['calib'][0]:.4f} vs "
        f"Wanda's {wanda['calib'][0]:.4f} and held-out {ours['held'][0]:.4f} vs "
        f"{wanda['held'][0]:.4f}; {where}."
    )


def table(model: str) -> list[dict[str, Any]]:
    """The headroom table of ``model`` as rows (tokens, row, each column's mean and, where
    stored, its std over seeds, the size's attribution); empty when not measured."""
    data = load(model)
    if data is None:
        return []
    out = []
    for size in sorted(data["sizes"], key=lambda s: s["tokens"]):
        for name, cols in size["rows"].items():
            row: dict[str, Any] = {"tokens": size["tokens"], "row": name}
            for key in COLUMNS:
                mean, std = cols.get(key, (math.nan, None))
                row[key] = mean
                if key in ("calib", "held"):
                    row[f"{key}_std"] = math.nan if std is None else std
            row["gap to Wanda"] = size["attribution"]
            out.append(row)
    return out


def caption(model: str) -> str:
    """What the table is, for the pages: its protocol in one line and where it came from."""
    data = load(model)
    if data is None:
        return not_measured(model)
    return (
        f"Headroom analysis of {model}: Q/K only at {data['sparsity']:.0%}, layers "
        f"{data['layers']}, seeds {data['seeds']}, GD {data['optimizer']} capped at "
        f"{data['steps']} steps, swap search ≤ {data['swap_evals']} evaluations per group; "
        "errors are relative attention errors, mean over layers (± std over seeds). "
        "Rule and protocol: bench/attention_gd_headroom.py. "
        + ("" if "rule" in data else OLD_RULE + " ")
        + str(data.get("source", ""))
    ).strip()
