"""What the CLI prints: progress bars on stderr, and a few readable lines per result."""

from __future__ import annotations

import json
import sys
from typing import Any

from tqdm import tqdm

from core.analysis.verdicts import ACCURACY_RULE
from core.cli.law_lines import effdim_lines, law_lines
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
