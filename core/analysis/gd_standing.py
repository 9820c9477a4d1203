"""Frames for the pages about attention-gd (issue 32 item 4): the stored headroom analysis of
a run's model (``core.methods.attention_gd.headroom``) and, beside it, the detection power of
each assumption-check verdict at the budget and optimiser the run judged
(``core.methods.attention_gd.power``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from core.methods.attention_gd import headroom
from core.methods.attention_gd.power import PRODUCTION_STEPS, judged_optimizer
from core.methods.attention_gd.verdict_notes import power_note, tally_beside_controls

VERDICT_ORDER = ("supported", "contradicted", "inconclusive")
HEADROOM_COLUMNS = {
    "tokens": "tokens",
    "row": "row",
    "calib": "calib err",
    "calib_std": "± calib",
    "held": "held-out err",
    "held_std": "± held",
    "cont": "continuous err",
    "delta": "‖M_T − M₀‖/‖M₀‖",
    "flip": "keep flips",
    "agree": "shared with Wanda",
    "gap to Wanda": "gap to Wanda",
}


def headroom_frame(model: str) -> pd.DataFrame:
    """The headroom table of ``model`` (one row per calibration size and reading, the columns
    renamed for reading; the size's attribution of the gap to Wanda in the last column); an
    empty frame with those columns when the model has not been measured."""
    frame = pd.DataFrame(headroom.table(model), columns=list(HEADROOM_COLUMNS))
    return frame.rename(columns=HEADROOM_COLUMNS)


def run_budget(config: dict[str, Any]) -> tuple[int, str]:
    """(step cap, optimiser) a stored attention-gd run's verdicts were judged at."""
    options = dict((config.get("prune") or {}).get("options") or ())
    return int(options.get("steps", PRODUCTION_STEPS)), judged_optimizer(config)


def verdict_power_frame(verdicts: Iterable[str], steps: int, optimizer: str) -> pd.DataFrame:
    """One row per verdict the rule can give: how many of the run's groups got it, how many
    the controls predict for that many groups if PL holds with the layer's spectral density
    (with the interval) and if PL fails as x⁴ does (``verdict_notes.tally_beside_controls``),
    and the rule's detection power at ``steps`` ``optimizer`` steps (``power_note``)."""
    seen = list(verdicts)
    tally = tally_beside_controls({v: seen.count(v) for v in VERDICT_ORDER}, steps, optimizer)
    return pd.DataFrame(
        [
            {
                "verdict": row["verdict"],
                "groups": row["groups"],
                "if PL holds": f"{row['if PL holds']:.1f} "
                f"[{row['if PL holds lo']:.1f}, {row['if PL holds hi']:.1f}]",
                "if PL fails (x⁴)": round(row["if PL fails (x⁴)"], 1),
                "power": power_note(row["verdict"], steps, optimizer).split(": ", 1)[1],
            }
            for row in tally
        ]
    )


def standing_sentence(model: str, metrics: dict[str, Any]) -> str:
    """The run's own sentence (stored in its metrics) or, for runs from before it, the one
    the stored analysis gives now."""
    return str(metrics.get("standing_vs_wanda") or headroom.standing(model))
