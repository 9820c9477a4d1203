"""PruneScope command line: evaluate, prune, slice and sweep models, and manage stored runs.

Examples::

    python -m core eval --model smollm2-135m --dataset wikitext2 --data-dir ../shared/data
    python -m core prune --method wanda --sparsity 0.5 --pattern 2:4 --calib c4 --json
    python -m core run --config job.json      # a resolved RunConfig (background jobs)
    python -m core sensitivity RUN_ID --seeds 1,2,3 --calib wikitext2
    python -m core runs list

The run commands' arguments come from the field table (``core.requests.commands``); their values go
through ``core.requests.request`` to the same resolved config the app builds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import transformers

from core.cli import compare_command as cli_compare
from core.cli import runs_command as cli_runs
from core.cli import sensitivity_command as cli_sensitivity
from core.cli import sweep_command as cli_sweep
from core.cli.output import TqdmProgress, print_human
from core.errors import ConfigError, PruneScopeError
from core.families import family_support, method_patterns
from core.jobs.reporter import job_process
from core.methods import available_methods, get_method
from core.methods.options import option_fields
from core.models.catalog import EMBEDDED_MODEL
from core.models.gguf import prepare
from core.names import GRID_SWEEP
from core.requests.commands import CHOICE, COMMANDS, FLAG, FLOAT, INT, LIST, Field, command_fields
from core.requests.request import plan_command, run_options, save_folder
from core.runs import RunOptions, effdim_report, execute
from core.runs.store_access import tee
from core.settings.config import RunConfig
from core.store.run_store import RunStore
from core.sweeps.executors import LocalExecutor
from core.sweeps.grid import GridJob, is_grid_job
from core.sweeps.orchestrate import run_grid

HELP = {
    "eval": "dense perplexity of a model on a corpus",
    "prune": "prune a model and compare its perplexity with the dense one",
    "slice": "SliceGPT: slice the representation dimension d to (1-s)d",
    "sweep": "the relation sweep (slicegpt: perplexity against d' over a grid of s, with "
    "Paper A's relation) or a grid sweep of any method (--grid, or any other method)",
    "zeroshot": "zero-shot accuracy (lm-eval scoring) of a model or run",
    "recover": "fine-tune a prune/slice run's model, keeping its zeros (LoRA or masked)",
}


# ---- parser ------------------------------------------------------------------------------------
def _with_option_keys(f: Field) -> Field:
    """The --option field whose help lists each registered method's option keys."""
    keys = "; ".join(
        f"{m}: {', '.join(o.name for o in option_fields(m)) or '-'}" for m in available_methods()
    )
    return dataclasses.replace(f, help=f"{f.help}. Keys per method: {keys}")


def _add_field(group: argparse._ArgumentGroup, f: Field) -> None:
    if f.kind == FLAG:
        group.add_argument(f.flag, action="store_true", help=f.help)
    elif f.kind == LIST:
        group.add_argument(f.flag, action="append", default=[], metavar="KEY=VALUE", help=f.help)
    elif f.kind == CHOICE and set(f.choices or ()) == {"auto", "on", "off"}:
        # --stream [auto|on|off]: the bare flag forces it on, --no-stream off
        group.add_argument(
            f.flag, nargs="?", const="on", default=f.default, choices=f.choices, help=f.help
        )
        group.add_argument(
            "--no-" + f.flag.removeprefix("--"), dest=f.name, action="store_const", const="off"
        )
    else:
        typ = {INT: int, FLOAT: float}.get(f.kind)
        # Only closed sets are argparse choices; a method name is checked by the registry.
        choices = f.choices if f.kind == CHOICE else None
        group.add_argument(f.flag, type=typ, default=f.default, choices=choices, help=f.help)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help="results store folder (default $PRUNESCOPE_HOME)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--force",
        action="store_true",
        help="recompute even if the same run is stored (and write over a non-empty --save DIR)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core",
        description="PruneScope: prune LLMs (magnitude, Wanda, SparseGPT, SliceGPT, attention-"
        "matrix GD), measure perplexity, and keep every run in a local results store.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        fields = command_fields(command)
        if command == "prune":  # each registered method's --option keys
            fields = tuple(_with_option_keys(f) if f.name == "option" else f for f in fields)
        p = sub.add_parser(command, help=HELP[command])
        groups: dict[str, argparse._ArgumentGroup] = {}
        for f in fields:
            if f.group not in groups:
                groups[f.group] = p.add_argument_group(f.group)
            _add_field(groups[f.group], f)
        if command == "sweep":
            cli_sweep.add_grid_args(p)
        _add_common(p)

    p = sub.add_parser("run", help="execute a resolved configuration (JSON; background jobs)")
    p.add_argument(
        "--config", required=True, metavar="FILE", help="a RunConfig or a resolved grid, as JSON"
    )
    p.add_argument("--save", default=None, metavar="DIR", help="save the changed model in DIR")
    p.add_argument("--activations-on-cpu", action="store_true")
    p.add_argument(
        "--job",
        default=None,
        metavar="ID",
        help="run as background job ID: its row of the store's jobs table records state, "
        "progress and outcome (core.jobs.reporter)",
    )
    _add_common(p)

    p = sub.add_parser(
        "effdim",
        help="effective dimension of stored runs and the relation PPL = PPL0^(d_eff,dense/d_eff) "
        "across methods",
    )
    p.add_argument("run_ids", nargs="*", help="runs to include (default: every prune/slice run)")
    _add_common(p)

    cli_compare.add_parser(sub)
    cli_sensitivity.add_parser(sub)

    sub.add_parser(
        "prepare",
        help="set-up: convert the embedded model once and read the other packaged models' "
        "GGUF headers once (make run / make test call it; silent when done)",
    )

    p = sub.add_parser("methods", help="the registered pruning methods and their --option keys")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")

    cli_runs.add_parser(sub)
    return parser


# ---- commands ------------------------------------------------------------------------------------
def field_values(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed arguments of a run command, keyed by field name."""
    return {f.name: getattr(args, f.name) for f in COMMANDS[args.command]}


def cmd_run_command(args: argparse.Namespace, progress: TqdmProgress) -> dict[str, Any]:
    """eval, prune, slice, sweep, zeroshot: plan from the flags, then execute."""
    store = RunStore(args.store)
    values = field_values(args)
    if args.command == "sweep" and cli_sweep.sweep_kind(args, values) == GRID_SWEEP:
        return cli_sweep.cmd_grid(args, progress, values, store)
    opts = run_options(args.command, values, args.force)  # --save checked before planning
    return execute(plan_command(args.command, values, store), store, progress, opts)


def cmd_run_config(args: argparse.Namespace, progress: TqdmProgress) -> dict[str, Any]:
    """``run --config FILE``: the one launch protocol of background jobs. FILE holds a
    resolved configuration as JSON: a RunConfig (eval, prune, slice, relation sweep,
    zeroshot) or a resolved grid sweep (core.sweeps.grid.GridJob, run in this process)."""
    try:
        doc = json.loads(Path(args.config).read_text())
        job = GridJob.from_dict(doc) if is_grid_job(doc) else None
        cfg = RunConfig.from_dict(doc) if job is None else None
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise ConfigError(f"{args.config} is not a run configuration: {exc}") from exc
    store = RunStore(args.store)
    if job is not None:
        if args.force or args.save or args.activations_on_cpu:
            raise ConfigError("--force, --save and --activations-on-cpu are for single runs")
        executor = LocalExecutor()
        return run_grid(list(job.configs), store, executor, cli_sweep.grid_progress(progress))
    opts = RunOptions(args.force, save_folder(args.save, args.force), args.activations_on_cpu)
    return execute(cfg, store, progress, opts)  # the job's one plan is made there, from FILE


def cmd_job(args: argparse.Namespace, progress: TqdmProgress) -> dict[str, Any]:
    """``run --config FILE --job ID``: a background job's process. Its row of the jobs table
    (core.jobs.reporter) gets the progress, the run it produced and its outcome."""
    with job_process(RunStore(args.store), args.job) as reporter:
        out = cmd_run_config(args, tee(progress, reporter))
        reporter.result(out.get("run_id"))
    return out


def cmd_effdim(args: argparse.Namespace, progress: TqdmProgress) -> dict[str, Any]:
    store = RunStore(args.store)
    out = effdim_report(store, args.run_ids or None)
    if args.run_ids and len(args.run_ids) == 1:
        run = store.load(args.run_ids[0])
        out["layers"] = run.table("effdim").to_dict(orient="records")
    return out


def cmd_methods() -> dict[str, Any]:
    """Every registered method with its patterns and option defaults, and per model family
    which methods and patterns run on it (core.families)."""
    out = []
    for name in available_methods():
        cls = get_method(name)
        opts = {f.name: f.default for f in dataclasses.fields(cls.options_cls)}
        patterns = method_patterns(name)
        out.append(
            {
                "method": name,
                "structured": cls.structured,
                "patterns": patterns,
                "options": opts,
                "doc": (cls.__doc__ or "").strip().splitlines()[0],
            }
        )
    return {"methods": out, "families": family_support()}


def _dispatch(args: argparse.Namespace, progress: TqdmProgress) -> Any:
    if args.command == "prepare":
        return prepare(EMBEDDED_MODEL, lambda line: print(line, file=sys.stderr, flush=True))
    if args.command == "runs":
        return cli_runs.cmd_runs(args)
    if args.command == "methods":
        return cmd_methods()
    if args.command == "compare":
        return cli_compare.cmd_compare(args, progress)
    if args.command == "sensitivity":
        return cli_sensitivity.cmd_sensitivity(args, progress)
    if args.command == "run":
        return cmd_job(args, progress) if args.job else cmd_run_config(args, progress)
    if args.command == "effdim":
        return cmd_effdim(args, progress)
    return cmd_run_command(args, progress)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    progress = TqdmProgress(enabled=not getattr(args, "quiet", False))
    try:
        out = _dispatch(args, progress)
    except PruneScopeError as exc:
        progress.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.close()
        print("cancelled", file=sys.stderr)
        return 130
    progress.close()
    if args.command == "prepare":
        return 0
    if getattr(args, "json", False):
        print(json.dumps(out, default=str))
    elif args.command == "compare":
        print(cli_compare.human_text(out))
    elif args.command == "sensitivity":
        print(cli_sensitivity.human_text(out))
    else:
        print_human(args.command, out)
    return 0
