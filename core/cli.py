"""PruneScope command line: evaluate, prune, slice and sweep models, and manage stored runs.

Examples::

    python -m core eval --model smollm2-135m --dataset wikitext2 --data-dir ../shared/data
    python -m core prune --method wanda --sparsity 0.5 --pattern 2:4 --calib c4 --json
    python -m core runs list
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from core.errors import PruneScopeError

log = logging.getLogger("core.cli")


# ---- progress bars -------------------------------------------------------------------------------
class TqdmProgress:
    """A ProgressFn drawing one tqdm bar per stage on stderr."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self.bar, self.stage = enabled, None, None

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

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


# ---- argument groups --------------------------------------------------------------------------------
def _add_model(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default="smollm2-135m",
        help="smollm2-135m (embedded default), tiny-llama, a local folder or a HF id",
    )
    g.add_argument(
        "--device", default="auto", help="auto (CUDA > MPS > CPU), cpu, cuda, cuda:N, mps"
    )
    g.add_argument(
        "--dtype",
        default="auto",
        help="auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16",
    )
    g.add_argument("--trust-remote-code", action="store_true", help="allow model code from the Hub")
    g.add_argument("--revision", default=None, help="model revision on the Hub")  # fmt: skip


def _add_eval(p: argparse.ArgumentParser, flag: str = "--dataset") -> None:
    g = p.add_argument_group("evaluation")
    g.add_argument(
        flag,
        dest="dataset",
        default="wikitext2",
        help="wikitext2, c4, pydoc (offline, stdlib) or file:<path>",
    )
    g.add_argument("--split", default=None, help="test (wikitext2), validation (c4)")
    g.add_argument(
        "--data-dir",
        default=None,
        help="local data folder in the shared/data layout (default: $PRUNESCOPE_DATA_DIR "
        "or ../shared/data when present, else the Hugging Face Hub)",
    )
    g.add_argument("--seqlen", type=int, default=512, help="window length in tokens (default 512)")
    g.add_argument(
        "--max-windows", type=int, default=None, help="evaluate only the first N windows"
    )
    g.add_argument("--batch-size", type=int, default=4)  # fmt: skip


def _add_calib(p: argparse.ArgumentParser, default: str = "c4") -> None:
    g = p.add_argument_group("calibration")
    g.add_argument(
        "--calib", default=default, help=f"calibration corpus (default {default}, train split)"
    )
    g.add_argument("--nsamples", type=int, default=32, help="calibration sequences (default 32)")
    g.add_argument(
        "--calib-seqlen", type=int, default=None, help="tokens per sequence (default: --seqlen)"
    )
    g.add_argument(
        "--seed", type=int, default=None, help="sampler seed (default 0; 42 for SliceGPT)"
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help="results store folder (default $PRUNESCOPE_HOME)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--force", action="store_true", help="recompute even if the same run is stored")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def _add_prune(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pruning")
    g.add_argument(
        "--method", default="wanda", help="magnitude, wanda, sparsegpt, slicegpt, attention-gd"
    )
    g.add_argument(
        "--sparsity", type=float, default=0.5, help="fraction of weights to remove, in [0, 1)"
    )
    g.add_argument("--pattern", default="unstructured", help="unstructured or N:M (2:4, 4:8, ...)")
    g.add_argument("--targets", default="all", help="all, attention, mlp, qk, or roles like q,k,v")
    g.add_argument("--allocation", default="uniform", choices=["uniform", "owl"])
    g.add_argument("--owl-lambda", type=float, default=0.08)
    g.add_argument("--owl-m", type=float, default=5.0)
    g.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a method option, e.g. percdamp=0.01, lam=0.1, steps=30 (repeatable)",
    )
    g.add_argument(
        "--save", default=None, metavar="DIR", help="save the pruned model (save_pretrained)"
    )
    g.add_argument("--activations-on-cpu", action="store_true",
                   help="keep calibration activations on the CPU (large models)")  # fmt: skip


def _add_zeroshot(p: argparse.ArgumentParser, default_tasks: str | None = None) -> None:
    g = p.add_argument_group("zero-shot accuracy")
    extra = "" if default_tasks else " (default: none, perplexity only)"
    g.add_argument(
        "--tasks",
        default=default_tasks,
        help="comma list of piqa, hellaswag, arc_easy, arc_challenge, winogrande, boolq, or "
        "all" + extra,
    )
    g.add_argument("--limit", type=int, default=None, help="first N items of each task")


def zeroshot_config(args, batch_size: int | None = None):
    """ZeroShotConfig from --tasks/--limit (None without --tasks). Task files come from
    <data dir>/tasks/ (--data-dir, $PRUNESCOPE_DATA_DIR or ../shared/data), else the hub."""
    from core.config import ZeroShotConfig
    from core.data import default_data_dir

    if not args.tasks:
        if args.limit is not None:
            from core.errors import ConfigError

            raise ConfigError("--limit applies to zero-shot tasks: give --tasks too")
        return None
    data_dir = args.data_dir or default_data_dir()
    if data_dir is not None:
        data_dir = str(Path(data_dir).expanduser().resolve())
    kw = {} if batch_size is None else {"batch_size": batch_size}
    return ZeroShotConfig(args.tasks, args.limit, data_dir, **kw)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core",
        description="PruneScope: prune LLMs (magnitude, Wanda, SparseGPT, SliceGPT, attention-"
        "matrix GD), measure perplexity, and keep every run in a local results store.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("eval", help="dense perplexity of a model on a corpus")
    _add_model(p), _add_eval(p), _add_common(p)

    p = sub.add_parser("prune", help="prune a model and compare its perplexity with the dense one")
    _add_model(p), _add_prune(p), _add_calib(p), _add_eval(p, "--eval"), _add_zeroshot(p)
    _add_common(p)

    p = sub.add_parser("zeroshot", help="zero-shot accuracy (lm-eval scoring) of a model or run")
    _add_model(p)
    p.set_defaults(model=None)  # with --run the model comes from the run
    p.add_argument("--run", default=None, metavar="RUN_ID",
                   help="a stored eval/prune/slice run: evaluate the model it produced")  # fmt: skip
    _add_zeroshot(p, "all")
    p.add_argument("--data-dir", default=None,
                   help="folder with tasks/<task>/ files (default: $PRUNESCOPE_DATA_DIR or "
                        "../shared/data when present, else the Hugging Face Hub)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=8)
    _add_common(p)

    p = sub.add_parser("methods", help="the registered pruning methods and their --option keys")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")

    runs = sub.add_parser("runs", help="list, show, delete or export stored runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    for name, helptext in [("list", "table of stored runs"), ("show", "one run's config and metrics"),
                           ("delete", "delete a run"), ("export", "copy a run's folder")]:  # fmt: skip
        rp = rsub.add_parser(name, help=helptext)
        if name != "list":
            rp.add_argument("run_id", help="run id (a unique prefix is enough)")
        if name == "export":
            rp.add_argument("dest", help="destination folder")
        if name == "list":
            rp.add_argument("--kind", default=None)
            rp.add_argument("--status", default=None)
        rp.add_argument("--store", default=None)
        rp.add_argument("--json", action="store_true")
        rp.add_argument("-v", "--verbose", action="store_true")
    from core import cli_analysis

    cli_analysis.add_commands(sub, _add_model, _add_eval, _add_calib, _add_common)
    return parser


# ---- commands --------------------------------------------------------------------------------------
def parse_options(pairs: list[str]) -> tuple[tuple[str, Any], ...]:
    from core.errors import ConfigError

    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            out[key.replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.replace("-", "_")] = raw
    return tuple(sorted(out.items()))


def model_spec(args):
    from core.config import ModelSpec

    return ModelSpec(args.model, args.device, args.dtype, args.trust_remote_code, args.revision)


def data_spec(name: str, split: str | None, data_dir: str | None, role: str = "eval"):
    from core.config import DataSpec
    from core.data import default_data_dir

    if split is None:
        split = "train" if role == "calib" else ("validation" if name == "c4" else "test")
    if name.startswith("file:"):
        name = "file:" + str(Path(name.removeprefix("file:")).expanduser().resolve())
    data_dir = (data_dir or default_data_dir()) if name in ("wikitext2", "c4") else None
    if data_dir is not None:  # absolute, so the run id does not depend on the working dir
        data_dir = str(Path(data_dir).expanduser().resolve())
    return DataSpec(name, split, data_dir)


def eval_config(args):
    from core.config import EvalConfig

    return EvalConfig(data_spec(args.dataset, args.split, args.data_dir), args.seqlen,
                      args.max_windows, args.batch_size)  # fmt: skip


def calib_config(args, default_seed: int = 0):
    from core.config import CalibConfig

    seed = default_seed if args.seed is None else args.seed
    return CalibConfig(data_spec(args.calib, None, args.data_dir, "calib"), args.nsamples,
                       args.calib_seqlen or args.seqlen, seed)  # fmt: skip


def open_store(args):
    from core.store import RunStore

    return RunStore(args.store)


def cmd_eval(args, progress) -> dict[str, Any]:
    from core.pipeline import run_eval

    return run_eval(model_spec(args), eval_config(args), open_store(args), progress, args.force)


def cmd_prune(args, progress) -> dict[str, Any]:
    from core.config import PruneConfig
    from core.pipeline import run_prune

    prune = PruneConfig(args.method, args.sparsity, args.pattern, args.targets, args.allocation,
                        args.owl_lambda, args.owl_m, parse_options(args.option))  # fmt: skip
    store = open_store(args)
    return run_prune(model_spec(args), prune, calib_config(args), eval_config(args), store,
                     progress, args.force, args.save, args.activations_on_cpu,
                     zeroshot_config(args))  # fmt: skip


def cmd_zeroshot(args, progress) -> dict[str, Any]:
    from core.pipeline import run_zeroshot

    model = model_spec(args) if args.model is not None else None
    if model is None and args.run is None:
        model = model_spec(argparse.Namespace(**{**vars(args), "model": "smollm2-135m"}))
    return run_zeroshot(model, zeroshot_config(args, args.batch_size), open_store(args), args.run,
                        progress, args.force)  # fmt: skip


def cmd_methods() -> list[dict[str, Any]]:
    """Every registered method with its patterns and option defaults."""
    import dataclasses

    from core.methods import available_methods, get_method

    out = []
    for name in available_methods():
        cls = get_method(name)
        opts = {f.name: f.default for f in dataclasses.fields(cls.options_cls)}
        patterns = ["unstructured"] + (["N:M"] if "nm" in cls.supports_patterns else [])
        if cls.structured:
            patterns = ["dimension slicing"]
        out.append({"method": name, "structured": cls.structured, "patterns": patterns,
                    "options": opts, "doc": (cls.__doc__ or "").strip().splitlines()[0]})  # fmt: skip
    return out


def cmd_runs(args) -> dict[str, Any] | list[dict[str, Any]]:
    import shutil

    store = open_store(args)
    if args.runs_command == "list":
        return [{"id": r.id, "kind": r.kind, "status": r.status, "model": r.model, "method": r.method,
                 "sparsity": r.sparsity, "pattern": r.pattern, "dataset": r.dataset,
                 "ppl": r.summary.get("ppl"), "created": r.created, "error": r.error}
                for r in store.list(args.kind, args.status)]  # fmt: skip
    rec = store.get(args.run_id)
    if args.runs_command == "show":
        out = {"run_id": rec.id, "kind": rec.kind, "status": rec.status, "config": rec.config,
               "metrics": rec.summary, "error": rec.error}  # fmt: skip
        if rec.status == "done":
            run = store.load(rec.id)
            out.update(env=run.env, tables=run.tables())
        return out
    if args.runs_command == "delete":
        store.delete(rec.id)
        return {"deleted": rec.id}
    run = store.load(rec.id)
    dest = shutil.copytree(run.dir, f"{args.dest}/{rec.id}")
    return {"exported": rec.id, "to": str(dest)}


# ---- output ------------------------------------------------------------------------------------------
def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def print_human(command: str, out: Any) -> None:
    if command == "methods":
        for m in out:
            opts = ", ".join(f"{k}={v!r}" for k, v in m["options"].items()) or "(none)"
            print(f"{m['method']:<14}{'/'.join(m['patterns']):<18}{m['doc']}")
            print(f"{'':<14}options: {opts}")
        return
    if isinstance(out, list):  # runs list
        if not out:
            print("no runs stored")
            return
        cols = ["id", "kind", "status", "model", "method", "sparsity", "pattern", "dataset", "ppl"]
        rows = [[_fmt(r.get(c)) if r.get(c) is not None else "-" for c in cols] for r in out]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
        return
    from core import cli_analysis

    if command == "effdim":
        print("\n".join(cli_analysis.effdim_lines(out)))
        return
    if command == "sweep" and "table" in out:  # a grid sweep (core.cli_sweep)
        print("\n".join(cli_analysis.cli_sweep.grid_lines(out)))
        return
    if "metrics" not in out:
        print(json.dumps(out, indent=2, default=str))
        return
    m = out["metrics"]
    print(
        f"run {out['run_id']}{' (stored result reused; --force recomputes)' if out.get('cached') else ''}"
    )
    from core import cli_analysis

    for line in cli_analysis.summary_lines(command, m):
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)  # fmt: skip
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
    progress = TqdmProgress(enabled=not getattr(args, "quiet", False))
    try:
        if args.command == "runs":
            out = cmd_runs(args)
        elif args.command == "methods":
            out = cmd_methods()
        else:
            from core import cli_analysis

            handler = {"eval": cmd_eval, "prune": cmd_prune, "zeroshot": cmd_zeroshot,
                       **cli_analysis.COMMANDS}[args.command]  # fmt: skip
            out = handler(args, progress)
    except PruneScopeError as exc:
        progress.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.close()
        print("cancelled", file=sys.stderr)
        return 130
    progress.close()
    if getattr(args, "json", False):
        print(json.dumps(out, default=str))
    else:
        print_human(args.command, out)
    return 0
