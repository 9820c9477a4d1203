"""What the CLI prints: progress bars on stderr, and a few readable lines per result."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from tqdm import tqdm

from core.analysis.laws import PARAMS
from core.analysis.protocol import EXTRAPOLATE_FROM, PRIMARY
from core.analysis.verdicts import ACCURACY_RULE, p_text
from core.cli.recovery_lines import recovery_lines
from core.cli.sweep_command import grid_lines
from core.families import family_lines
from core.names import PARAMS_REMOVED


class TqdmProgress:
    """A ProgressFn drawing one tqdm bar per stage on stderr."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self.bar, self.stage = enabled, None, None

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        if stage != self.stage or self.bar is None or total != self.bar.total:
            self.close()
            self.stage = stage
            self.bar = tqdm(total=total, desc=stage, unit="step", file=sys.stderr, leave=True)
        self.bar.n = done
        if detail:
            self.bar.set_postfix_str(detail, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


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


def zeroshot_lines(zs: dict[str, Any], dense: dict[str, Any] | None = None) -> list[str]:
    """Per-task acc / acc_norm (± standard error), dense beside when given."""
    head = f"{'task':<16}{'n':>6}{'acc':>16}{'acc_norm':>16}"
    lines = [head + (f"{'dense acc':>12}" if dense else "")]
    for name, t in zs["tasks"].items():
        norm = f"{t['acc_norm']:.4f}±{t['acc_norm_stderr']:.4f}" if "acc_norm" in t else "-"
        row = f"{t['label']:<16}{t['n']:>6}{t['acc']:>9.4f}±{t['acc_stderr']:.4f}{norm:>16}"
        if dense:
            row += f"{dense['tasks'][name]['acc']:>12.4f}"
        lines.append(row)
    lines.append(
        f"{'mean acc':<22}{zs['mean_acc']:>9.4f}"
        + (f"{'':>23}{dense['mean_acc']:>12.4f}" if dense else "")
    )
    for t in zs["tasks"].values():
        if t.get("note"):
            lines.append(f"note: {t['note']}")
    if zs.get("limit"):
        lines.append(f"limit: first {zs['limit']} items per task")
    return lines


def summary_lines(command: str, m: dict[str, Any]) -> list[str]:
    """A few readable lines of a run's metrics."""
    lines = []
    if command == "zeroshot":
        src = m.get("source_run")
        lines.append(
            f"model: {m.get('model_name', '?')}"
            + (f" from run {src} ({m['model_from']})" if src else " (dense)")
        )
        return lines + zeroshot_lines(m["zeroshot"])
    if command == "recover" or "parent_run" in m:
        return recovery_lines(m)
    data = m.get("data") or {}
    if data:
        note = "" if data.get("comparable", True) else "  [NOT comparable with published figures]"
        lines.append(
            f"data: {data.get('dataset')} ({data.get('split')}) from {data.get('source')}{note}"
        )
    if command == "sweep":
        lines.append(f"dense perplexity PPL0 = {m['ppl0']:.4f}, d = {m['d']}")
        lines += law_lines(m)
        if "acc_fit_kappa" in m:
            lines.append(
                f"accuracy (mean of tasks, point fit): ln(acc/acc_dense) = k(1-s) + c: k = "
                f"{m['acc_fit_kappa']:.4f}, c = {m['acc_fit_intercept']:.4f}, "
                f"R^2 = {m['acc_fit_r2']:.4f}"
            )
            verdicts = m.get("acc_verdicts") or {}
            lines.append(
                "(A2) per task: "
                + ", ".join(f"{t} {v}" for t, v in verdicts.items())
                + f"  [{ACCURACY_RULE}]"
            )
        lines.append(
            "per-point tables: python -m core runs show <id> (tables 'sweep', 'laws', "
            "'law_points', 'law_differences', 'kappa_range') or the app"
        )
    elif command == "eval" or "tokens_per_s" in m:
        lines.append(f"perplexity: {m['ppl']:.4f}  (mean NLL {m['nll']:.4f} nats)")
        lines.append(
            f"tokens evaluated: {m['n_tokens']} ({m['n_windows']} windows of {m['seqlen']})"
        )
        lines.append(f"throughput: {m['tokens_per_s']:.1f} tokens/s in {m['seconds']:.1f} s")
    elif "dense_ppl" in m:
        lines.append(f"dense perplexity:  {m['dense_ppl']:.4f}")
        lines.append(
            f"pruned perplexity: {m['ppl']:.4f}  ({m['n_windows']} windows, {m['n_tokens']} tokens)"
        )
        if "d_sliced" in m:
            lines.append(
                f"width d' = {m['d_sliced']} of {m['d']} (s_eff = {m['s_eff']:.4f}); "
                f"parameters {m['n_params_sliced']:,} vs {m['n_params_dense']:,} dense"
            )
            if "latency_ms" in m:  # not measured when streamed or lean
                lines.append(
                    f"forward latency: {m['latency_ms']:.1f} ms "
                    f"vs {m['latency_ms_dense']:.1f} ms dense"
                )
        if PARAMS_REMOVED in m:  # slice and structured runs: what a parameter budget matches
            what = f" ({m['removed']})" if m.get("removed") else ""
            lines.append(f"decoder parameters removed: {m[PARAMS_REMOVED]:.4f}{what}")
        if "achieved_sparsity" in m:
            lines.append(
                f"achieved sparsity: {m['achieved_sparsity']:.4f} of targeted weights "
                f"({m['decoder_sparsity']:.4f} of all decoder linears)"
            )
        lines.append(f"pruning time: {m['prune_seconds']:.1f} s")
        if m.get("standing_vs_wanda"):  # attention-gd: where it stands against Wanda
            lines.append(m["standing_vs_wanda"])
        if "zeroshot" in m:
            lines.append(f"zero-shot accuracy (dense run {m['dense_zeroshot_run']}):")
            lines.extend("  " + ln for ln in zeroshot_lines(m["zeroshot"], None))
            lines.append(f"  dense mean acc {m['dense_mean_acc']:.4f}")
        if m.get("saved_to"):
            lines.append(f"saved to: {m['saved_to']}")
    return lines


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def job_text(row: dict[str, Any]) -> str:
    """A ``runs list`` row's job in words: state, stage and steps, e.g. 'running prune 3/8'."""
    steps = f" {row['done']}/{row['total']}" if row.get("total") else ""
    stage = f" {row['stage']}{steps}" if row.get("stage") else ""
    return f"{row['job_state']}{stage}"


def print_human(command: str, out: Any) -> None:
    if command == "methods":
        for m in out["methods"]:
            opts = ", ".join(f"{k}={v!r}" for k, v in m["options"].items()) or "(none)"
            print(f"{m['method']:<14}{'/'.join(m['patterns']):<18}{m['doc']}")
            print(f"{'':<14}options: {opts}")
        print("\nper model family (from each family's config; run planning refuses the same):")
        print("\n".join(family_lines(out["families"])))
        return
    if isinstance(out, list):  # runs list
        if not out:
            print("no runs stored")
            return
        cols = ["id", "kind", "status", "model", "method", "sparsity", "pattern", "dataset", "ppl"]
        rows = [[_fmt(r.get(c)) if r.get(c) is not None else "-" for c in cols] for r in out]
        if any(r.get("job") for r in out):  # jobs at work: state and progress
            cols.append("job")
            for row, r in zip(rows, out, strict=True):
                row.append(job_text(r) if r.get("job") else "-")
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        for r in out:
            if r["status"] == "damaged":
                print(f"\n{r['error']}")
        return
    if command == "effdim":
        print("\n".join(effdim_lines(out)))
        return
    if "table" in out and "run_ids" in out:  # a grid sweep (sweep, or run --config GRID)
        print("\n".join(grid_lines(out)))
        return
    if "metrics" not in out:
        print(json.dumps(out, indent=2, default=str))
        return
    m = out["metrics"]
    reused = " (stored result reused; --force recomputes)" if out.get("cached") else ""
    print(f"run {out['run_id']}{reused}")
    if out.get("status") == "damaged":  # runs show: what the index holds, and why no more
        print(f"status: damaged (below: what the index holds)\n{out['error']}")
    for line in summary_lines(command, m):
        print(line)
