"""CLI commands of the representation-dimension analyses (slice, sweep, effdim) and the
human-readable summaries every command prints."""

from __future__ import annotations

from typing import Any

from core import cli_sweep
from core.errors import ConfigError


def _parse_grid(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise ConfigError(
            f"--sparsities expects numbers separated by commas, got {text!r}"
        ) from exc


def cmd_slice(args, progress) -> dict[str, Any]:
    from core import cli
    from core.config import PruneConfig
    from core.slicing import run_slice

    prune = PruneConfig("slicegpt", args.sparsity, options=cli.parse_options(args.option))
    return run_slice(cli.model_spec(args), prune, cli.calib_config(args, 42), cli.eval_config(args),
                     cli.open_store(args), progress, args.force, args.save,
                     cli.zeroshot_config(args))  # fmt: skip


def cmd_sweep(args, progress) -> dict[str, Any]:
    from core import cli
    from core.slicing import run_sweep

    if cli_sweep.is_grid(args):  # any method, patterns, seeds, executors (core.sweeps)
        built = {"model": cli.model_spec(args), "calib": cli.calib_config(args),
                 "eval": cli.eval_config(args), "options": cli.parse_options(args.option),
                 "zeroshot": cli.zeroshot_config(args), "store": cli.open_store(args),
                 "sparsities": _parse_grid(args.sparsities)}  # fmt: skip
        return cli_sweep.cmd_grid(args, progress, built)
    return run_sweep(cli.model_spec(args), _parse_grid(args.sparsities), cli.calib_config(args, 42),
                     cli.eval_config(args), cli.open_store(args), cli.parse_options(args.option),
                     progress, args.force, cli.zeroshot_config(args))  # fmt: skip


def cmd_effdim(args, progress) -> dict[str, Any]:
    from core.cli import open_store
    from core.slicing import effdim_report

    store = open_store(args)
    out = effdim_report(store, args.run_ids or None, args.key)
    if args.run_ids and len(args.run_ids) == 1:
        run = store.load(args.run_ids[0])
        out["layers"] = run.table("effdim").to_dict(orient="records")
    return out


COMMANDS: dict[str, Any] = {"slice": cmd_slice, "sweep": cmd_sweep, "effdim": cmd_effdim}


def add_commands(sub, add_model, add_eval, add_calib, add_common) -> None:
    """Register the analysis subcommands on the top-level parser."""
    from core.cli import _add_zeroshot

    p = sub.add_parser("slice", help="SliceGPT: slice the representation dimension d to (1-s)d")
    add_model(p)
    g = p.add_argument_group("slicing")
    g.add_argument("--sparsity", type=float, default=0.25, help="slicing fraction s in [0, 1)")
    g.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="round_to=8, damp=0.01, slice_head=false, orientation=pca|random",
    )
    g.add_argument("--save", default=None, metavar="DIR", help="save the sliced model (reload: "
                   "core.methods.slicegpt.load_sliced)")  # fmt: skip
    add_calib(p, "wikitext2")
    add_eval(p, "--eval")
    _add_zeroshot(p)
    add_common(p)

    p = sub.add_parser(
        "sweep",
        help="perplexity against sparsity over a grid of methods, sparsities, patterns "
        "and seeds, on a process pool, GPUs or Ray (SliceGPT alone: with Paper A's relation)",
    )
    add_model(p)
    g = p.add_argument_group("sweep")
    g.add_argument("--method", default="slicegpt",
                   help="comma list of magnitude, wanda, sparsegpt, slicegpt, attention-gd "
                        "(slicegpt alone: Paper A's relation sweep)")  # fmt: skip
    g.add_argument("--sparsities", default="0,0.1,0.2,0.3,0.4,0.5,0.6", help="comma list of s")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    cli_sweep.add_grid_args(p)
    add_calib(p, "wikitext2")
    add_eval(p, "--eval")
    _add_zeroshot(p)
    add_common(p)

    p = sub.add_parser("effdim", help="effective dimension of stored runs and the relation "
                       "PPL = PPL0^(d_eff,dense/d_eff) across methods")  # fmt: skip
    p.add_argument("run_ids", nargs="*", help="runs to include (default: every prune/slice run)")
    p.add_argument(
        "--key",
        default="mean_pca99",
        help="statistic: mean_pca99, mean_pca90, mean_erank, final_pca99, ...",
    )
    add_common(p)


def effdim_lines(out: dict[str, Any]) -> list[str]:
    """The effective-dimension relation as a table per (model, evaluation) group."""
    if not out["groups"]:
        return ["no finished prune/slice runs with effective dimensions (and their dense eval run)"]
    lines = []
    for g in out["groups"]:
        lines.append(
            f"model {g['model']}: PPL0 {g['ppl0']:.4f}, dense d_eff ({g['key']}) {g['d_dense']:.1f}"
        )
        lines.append(f"{'run':<18}{'method':<12}{'s':>6}{'pattern':>14}{'d_eff':>8}{'ppl':>11}"
                     f"{'predicted':>12}{'rel.err':>9}")  # fmt: skip
        for r in sorted(g["rows"], key=lambda r: (r["method"] or "", r["sparsity"] or 0)):
            lines.append(f"{r['run_id']:<18}{r['method'] or '-':<12}{r['sparsity'] or 0:>6.2f}"
                         f"{r['pattern'] or '-':>14}{r['d_eff']:>8.1f}{r['ppl']:>11.3f}"
                         f"{r['predicted']:>12.3f}{r['rel_error']:>9.3f}")  # fmt: skip
        lines.append(f"mean |relative error| {g['mean_abs_rel_error']:.3f}; fit ln PPL0/ln PPL = "
                     f"a·(d_eff/d_dense) + b: a = {g['a']:.3f}, b = {g['b']:.3f}, R^2 = {g['r2']:.3f}")  # fmt: skip
    if "layers" in out:
        lines.append(
            "per layer: " + ", ".join(f"{r['layer']}:{r['pca99']:.0f}" for r in out["layers"])
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
    lines.append(f"{'mean acc':<22}{zs['mean_acc']:>9.4f}"
                 + (f"{'':>23}{dense['mean_acc']:>12.4f}" if dense else ""))  # fmt: skip
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
        lines.append(f"model: {m.get('model_name', '?')}" + (
            f" from run {src} ({m['model_from']})" if src else " (dense)"))  # fmt: skip
        return lines + zeroshot_lines(m["zeroshot"])
    data = m.get("data") or {}
    if data:
        note = "" if data.get("comparable", True) else "  [NOT comparable with published figures]"
        lines.append(
            f"data: {data.get('dataset')} ({data.get('split')}) from {data.get('source')}{note}"
        )
    if command == "sweep":
        lines.append(f"dense perplexity PPL0 = {m['ppl0']:.4f}, d = {m['d']}")
        lines.append(
            f"fit ln PPL0/ln PPL = a(1-s) + b: a = {m['a']:.4f}, b = {m['b']:.4f}, R^2 = {m['r2']:.4f}"
        )
        if "acc_fit_kappa" in m:
            lines.append(
                f"accuracy (mean of tasks): ln(acc/acc_dense) = k(1-s) + c: k = "
                f"{m['acc_fit_kappa']:.4f}, c = {m['acc_fit_intercept']:.4f}, R^2 = "
                f"{m['acc_fit_r2']:.4f} ({'held' if m['acc_fit_held'] else 'did not hold'}); "
                f"ln(acc/chance) = k'(1-s): k' = {m['acc_fit_kappa_chance']:.4f}, R^2 = "
                f"{m['acc_fit_r2_chance']:.4f} ({'held' if m['acc_fit_held_chance'] else 'did not hold'})"
            )
        lines.append("per-point table: python -m core runs show <id> (table 'sweep') or the app")
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
            lines.append(f"width d' = {m['d_sliced']} of {m['d']} (s_eff = {m['s_eff']:.4f}); "
                         f"parameters {m['n_params_sliced']:,} vs {m['n_params_dense']:,} dense")  # fmt: skip
            lines.append(
                f"forward latency: {m['latency_ms_sliced']:.1f} ms vs {m['latency_ms_dense']:.1f} ms dense"
            )
        if "achieved_sparsity" in m:
            lines.append(f"achieved sparsity: {m['achieved_sparsity']:.4f} of targeted weights "
                         f"({m['decoder_sparsity']:.4f} of all decoder linears)")  # fmt: skip
        lines.append(f"pruning time: {m['prune_seconds']:.1f} s")
        if "zeroshot" in m:
            lines.append(f"zero-shot accuracy (dense run {m['dense_zeroshot_run']}):")
            lines.extend("  " + ln for ln in zeroshot_lines(m["zeroshot"], None))
            lines.append(f"  dense mean acc {m['dense_mean_acc']:.4f}")
        if m.get("saved_to"):
            lines.append(f"saved to: {m['saved_to']}")
    return lines
