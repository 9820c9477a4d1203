"""Which method runs on which model family, and with which patterns (``python -m core methods``).

Read from each family's tiny model config alone (``core.models.catalog.TINY_MODELS``), through the
same ``Method.refusal`` that run planning applies, so the listing and the planner cannot
disagree. A method refused only for long calibration sequences (attention-GD on a family with
sliding-window layers) is listed as supported with that condition.
"""

from __future__ import annotations

from typing import Any

from core.adapters import FAMILIES
from core.methods import available_methods, get_method, make_method
from core.models.geometry import Geometry
from core.models.load import TINY_MODELS, tiny_config

_LONG = 1 << 30  # a calibration length no window covers: brings out length conditions


def method_patterns(name: str) -> list[str]:
    cls = get_method(name)
    if cls.structured:
        return [cls.removes]
    return ["unstructured"] + (["N:M"] if "nm" in cls.supports_patterns else [])


def family_support() -> list[dict[str, Any]]:
    """Per family: its model types, the tiny model it was read from, its traits, and per
    method either the patterns it runs with (and any condition) or why it is refused."""
    tiny: dict[str, tuple[str, Geometry]] = {}
    for name in TINY_MODELS:
        geo = Geometry.from_config(tiny_config(name))
        tiny.setdefault(geo.family, (name, geo))
    rows = []
    for cls in FAMILIES:
        name, geo = tiny[cls.family]
        methods = {}
        for method in available_methods():
            m = make_method(method, {})
            why = m.refusal(geo, None)
            cond = None if why else m.refusal(geo, _LONG)
            methods[method] = {
                "supported": why is None,
                "patterns": [] if why else method_patterns(method),
                "refusal": why,
                "condition": cond,
            }
        rows.append(
            {
                "family": cls.family,
                "model_types": list(cls.model_types),
                "tiny_model": name,
                "traits": {k: v for k, v in geo.traits.__dict__.items() if k != "family"},
                "methods": methods,
            }
        )
    return rows


def family_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Human listing: one block per family, one line per method."""
    lines = []
    for row in rows:
        t = row["traits"]
        extras = [k for k in ("qk_norm", "qkv_bias", "post_norms", "tied") if t[k]]
        extras += [f"fused {'+'.join(t['fused'])}"] if t["fused"] else []
        extras += [f"sliding window {t['sliding_window']}"] if t["sliding_window"] else []
        lines.append(
            f"{row['family']} (model_type {', '.join(row['model_types'])}; {row['tiny_model']}): "
            f"{t['norm']} norms, {t['positions']} positions"
            + (f", {', '.join(extras)}" if extras else "")
        )
        for method, m in row["methods"].items():
            if m["supported"]:
                text = "/".join(m["patterns"])
                if m["condition"]:
                    text += f"  (conditional: {m['condition'].split('; ')[-1]})"
            else:
                text = f"refused: {m['refusal']}"
            lines.append(f"  {method:<14}{text}")
    return lines
