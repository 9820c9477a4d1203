"""What the CLI prints for the dimension analyses: the effective-dimension relation across runs,
and Paper A's estimands on a SliceGPT sweep (the joint test of (A1), the local first order,
κ against fit range, the laws and their paired differences), each figure with its interval."""

from __future__ import annotations

import math
from typing import Any

from core.analysis.laws import PARAMS
from core.analysis.protocol import EXTRAPOLATE_FROM, PRIMARY
from core.analysis.verdicts import p_text


def _interval(lo: float | None, hi: float | None) -> str:
    return "[-]" if lo is None or hi is None else f"[{lo:.1f}, {hi:.1f}]"


def effdim_lines(out: dict[str, Any]) -> list[str]:
    """The effective-dimension relation as a table per (model, evaluation) group."""
    if not out["groups"]:
        return ["no finished prune/slice runs with effective dimensions (and their dense eval run)"]
    lines = []
    for g in out["groups"]:
        lines.append(
            f"model {g['model']}: PPL0 {g['ppl0']:.4f}, dense d_eff ({g['key']}, pre-registered) "
            f"{g['d_dense']:.1f} {_interval(g.get('d_dense_lo'), g.get('d_dense_hi'))}"
        )
        lines.append(
            f"{'run':<18}{'method':<12}{'s':>6}{'pattern':>14}{'d_eff [95%]':>22}{'pca99':>7}"
            f"{'ppl':>11}{'predicted':>12}{'rel.err':>9}"
        )
        for r in sorted(g["rows"], key=lambda r: (r["method"] or "", r["sparsity"] or 0)):
            short = "" if r.get("enough_tokens") is not False else "*"
            d_eff = f"{r['d_eff']:.1f}{short} {_interval(r.get('d_eff_lo'), r.get('d_eff_hi'))}"
            pca = r.get("mean_pca99")
            lines.append(
                f"{r['run_id']:<18}{r['method'] or '-':<12}{r['sparsity'] or 0:>6.2f}"
                f"{r['pattern'] or '-':>14}{d_eff:>22}{pca if pca is None else f'{pca:.0f}':>7}"
                f"{r['ppl']:>11.3f}{r['predicted']:>12.3f}{r['rel_error']:>9.3f}"
            )
        lines.append(
            f"mean |relative error| {g['mean_abs_rel_error']:.3f}; fit ln PPL0/ln PPL = "
            f"a·(d_eff/d_dense) + b: a = {g['a']:.3f}, b = {g['b']:.3f}, R^2 = {g['r2']:.3f}"
        )
        lines += held_out_lines(g.get("held_out"))
        lines.append("* fewer than 10·d tokens behind the statistic (core.analysis.effdim)")
    if "layers" in out:
        lines.append(
            "per layer (erank_c): "
            + ", ".join(f"{r['layer']}:{r['erank_c']:.1f}" for r in out["layers"])
        )
    return lines


def _iv(v: float | None, lo: float | None, hi: float | None, fmt: str = ".3f") -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{v:{fmt}}"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def law_table(rows: list[dict[str, Any]]) -> list[str]:
    """The candidate laws of (A1) (core.analysis.laws): parameters and mean |error| in
    sample, leaving one s > 0 out and extrapolating, each with its 95% interval."""
    out = [
        f"{'law':<8}{'parameters [95%]':<58}{'in sample':>11} {'leave-one-s-out':>25} "
        f"{'extrapolating':>25}  verdict"
    ]
    for r in rows:
        params = ", ".join(
            f"{p}={_iv(r[p], r[f'{p}_lo'], r[f'{p}_hi'])}"
            for p in PARAMS
            if r.get(p) is not None and math.isfinite(r[p])
        )
        errs = [
            _iv(r[f"{k}_error"], r[f"{k}_error_lo"], r[f"{k}_error_hi"], ".1%")
            for k in ("loo", "extrap")
        ]
        fit = _iv(r["fit_error"], None, None, ".1%")
        best = [k for k in ("loo", "extrap") if r.get(f"best_{k}")]
        out.append(
            f"{r['law']:<8}{params or '-':<58}{fit:>11} {errs[0]:>25} {errs[1]:>25}  "
            f"{r['verdict']}" + (f" (best {', '.join(best)})" if best else "")
        )
    return out


def difference_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The laws' paired differences of out-of-sample error (core.analysis.law_compare)."""
    out = []
    for kind, what in (("loo", "leave-one-s-out"), ("extrap", "extrapolating")):
        parts = [
            f"{r['law']}-{r['other']} "
            + _iv(r["difference"], r["difference_lo"], r["difference_hi"], "+.1%")
            + (" *" if r["excludes_zero"] else "")
            for r in rows
            if r["kind"] == kind
        ]
        out.append(f"  {what}: " + "; ".join(parts))
    return out


def joint_line(m: dict[str, Any], sfx: str = "") -> str:
    """The joint test of (A1) and the local first order in one line."""
    p = m.get(f"joint_p{sfx}")
    test = "not computable"
    if p is not None and math.isfinite(p):
        test = (
            f"W = {m[f'joint_w{sfx}']:.4g}, {p_text(p)} (small-sample df "
            f"{m[f'joint_df{sfx}']:.3g}) -> {m[f'joint{sfx}']}"
        )
    local = _iv(
        m.get(f"kappa_local{sfx}"), m.get(f"kappa_local_lo{sfx}"), m.get(f"kappa_local_hi{sfx}")
    )
    return (
        f"joint test of kappa = kappa2 = 1: {test}; local first order (nominal 0 < s <= "
        f"{m.get(f'local_smax{sfx}')}, {m.get(f'local_points{sfx}')} points): kappa = {local} "
        f"-> {m.get(f'first_order{sfx}')}"
    )


def kappa_range_line(rows: list[dict[str, Any]]) -> str:
    return "kappa against fit range: " + "; ".join(
        f"s <= {r['s_max']:g} ({r['n_points']}): {_iv(r['kappa'], r['kappa_lo'], r['kappa_hi'])}"
        for r in rows
    )


def law_lines(m: dict[str, Any]) -> list[str]:
    """A relation sweep's (A1) report, leading with the joint test and the local first order
    on the achieved s_eff (the primary protocol's basis), then the laws as descriptions of the
    curve, then the nominal-s sensitivity analysis."""
    lines = []
    p = m.get("protocol")
    if p:
        name = p.get("name", "none")
        head = (
            "primary protocol"
            if name == PRIMARY
            else "not the primary protocol (a sensitivity analysis)"
        )
        lines.append(
            f"{head}: {p['n_windows']} evaluation windows of {p['eval_seqlen']} tokens; "
            f"calibration {p['calib_nsamples']} x {p['calib_seqlen']} tokens; "
            f"{p['n_seeds']} seed(s) per point"
        )
    if "joint" not in m:  # a sweep stored before the primary estimands
        lines.append(f"(A1): {m.get('sentence', '-')}  [stored before the joint test: --force]")
        return lines
    lines.append(f"(A1) against the achieved s_eff: {joint_line(m)}")
    lines.append(kappa_range_line(m.get("kappa_range", [])))
    for r in m.get("points", []):
        lines.append(
            f"  s = {r['s']:g} (s_eff {r['s_eff']:.4g}): PPL "
            f"{_iv(r['ppl'], r['ppl_lo'], r['ppl_hi'], '.4g')}, {r['n_seeds']} seed(s)"
        )
    lines.append(m["sentence"])
    lines.append(
        "laws, describing the curve (not tests of (A1)); mean |PPL_pred/PPL - 1|, "
        f"extrapolating = fitted on nominal s <= {EXTRAPOLATE_FROM:g}:"
    )
    lines += law_table(m.get("laws", []))
    lines.append("paired differences of mean |error| (row law minus other; * excludes 0):")
    lines += difference_lines(m.get("law_differences", []))
    lines.append(f"sensitivity, against the nominal s: {joint_line(m, '_nominal')}")
    return lines


def held_out_lines(held: dict[str, Any] | None) -> list[str]:
    """Leave-one-method-out of the effective-dimension relation (mean |PPL_pred/PPL - 1|)."""
    if not held:
        return []

    def err(d: dict[str, Any], k: str) -> str:
        return _iv(d[f"{k}_error"], d[f"{k}_error_lo"], d[f"{k}_error_hi"], ".1%")

    lines = [
        "each method predicted from the others: PPL0^(d/d_eff) "
        f"{err(held['exact'], 'exact')} ({held['exact_verdict']}); line fitted on the other "
        f"methods {err(held['line'], 'line')} ({held['line_verdict']})"
    ]
    for r in held["methods"]:
        lines.append(
            f"  {r['method']:<12}{r['n_runs']:>3} runs  PPL0^(d/d_eff) {err(r, 'exact'):<26}"
            f"line {err(r, 'line')}"
        )
    return lines
