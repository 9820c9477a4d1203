"""One path from field values (parsed CLI flags, app form values) to a resolved RunConfig.

``plan_command(command, values)`` fills the command's defaults (``core.requests.commands``),
checks every value's type, builds the config dataclasses and plans the run once
(``core.runs.plan``: a ``Plan``), so CLI, app and background jobs validate the same way and
get the same run id; ``plan_request`` is its config alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.data import check_text_file, default_data_dir
from core.errors import ConfigError
from core.methods.options import typed_options, typed_pairs
from core.models.catalog import check_model_name
from core.names import NO_PROTOCOL, RELATION_SWEEP
from core.requests.commands import command_fields, defaults, sweep_reference
from core.requests.protocol_fields import UNSET_UNDER_PROTOCOL, primary_values
from core.runs import (
    Plan,
    RunOptions,
    plan_config,
    plan_eval,
    plan_prune,
    plan_relation_sweep,
    plan_slice,
    plan_zeroshot,
)
from core.runs.recovery_parent import parent_of_recovery, plan_recover
from core.runs.sensitivity import plan_sensitivity
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RecoverConfig,
    RunConfig,
    ZeroShotConfig,
)
from core.settings.field import FLOAT, INT, LIST, MULTI, Field, method_list
from core.settings.outputs import FOLDER, check_output
from core.settings.patterns import parse_budget
from core.store.run_store import RunStore
from core.sweeps.grid import GridSpec

DEFAULT_MODEL = "smollm2-135m"


# ---- values ------------------------------------------------------------------------------------
def typed_value(field: Field, value: Any) -> Any:
    """A value of the field's type; numbers given as text are parsed (argparse's messages)."""
    if value is None or (value == "" and field.kind in (INT, FLOAT)):
        return None
    cast = {INT: int, FLOAT: float}.get(field.kind)
    if cast is not None and not isinstance(value, bool):
        try:
            return cast(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"argument {field.flag}: invalid {cast.__name__} value: {value!r}"
            ) from None
    if field.kind == LIST and (dataclasses.is_dataclass(value) or isinstance(value, Mapping)):
        return value  # a form's typed options (or its option values)
    if field.kind == LIST:
        return [value] if isinstance(value, str) else list(value)
    if field.kind == MULTI and not isinstance(value, str):  # a multiselect's list
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return value


def values_of(command: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The command's defaults updated with ``given`` (typed); unknown names are an error."""
    fields = {f.name: f for f in command_fields(command)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise ConfigError(f"unrecognized arguments for {command}: {flags}")
    values = defaults(command)
    values.update({k: typed_value(fields[k], v) for k, v in given.items()})
    if command == "sweep":  # calibration follows the swept methods' reference protocol
        ref = sweep_reference(values["method"])
        values.update({k: ref[k] for k in ("calib", "seed") if values[k] is None})
    return values


def parse_grid(text: str, flag: str = "--sparsities") -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in str(text).split(",") if x.strip())
    except ValueError as exc:
        raise ConfigError(f"{flag} expects numbers separated by commas, got {text!r}") from exc


def parse_seeds(text: str | None) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2); empty -> ()."""
    try:
        return tuple(int(x) for x in str(text or "").split(",") if x.strip())
    except ValueError as exc:
        raise ConfigError(f"--seeds expects integers separated by commas, got {text!r}") from exc


def _absolute(path: str | None) -> str | None:
    """Absolute, so the run id does not depend on the working directory."""
    return None if path is None else str(Path(path).expanduser().resolve())


# ---- config parts --------------------------------------------------------------------------------
def model_spec(v: Mapping[str, Any]) -> ModelSpec:
    check_model_name(v["model"])
    return ModelSpec(
        v["model"], v["device"], v["dtype"], v["trust_remote_code"], v["revision"], v["stream"]
    )


def data_spec(name: str, split: str | None, data_dir: str | None, role: str = "eval") -> DataSpec:
    if split is None:
        split = "train" if role == "calib" else ("validation" if name == "c4" else "test")
    if name.startswith("file:"):
        name = "file:" + _absolute(name.removeprefix("file:"))
        check_text_file(name.removeprefix("file:"))  # before any model is loaded
    data_dir = (data_dir or default_data_dir()) if name in ("wikitext2", "c4") else None
    return DataSpec(name, split, _absolute(data_dir))


def eval_config(v: Mapping[str, Any]) -> EvalConfig:
    dataset = v["eval"] if "eval" in v else v["dataset"]
    data = data_spec(dataset, v["split"], v["data_dir"])
    return EvalConfig(data, v["seqlen"], v["max_windows"], v["batch_size"])


def calib_config(v: Mapping[str, Any]) -> CalibConfig:
    data = data_spec(v["calib"], None, v["data_dir"], "calib")
    seqlen = v["calib_seqlen"] or v["seqlen"]
    return CalibConfig(data, v["nsamples"], seqlen, v["seed"], v["calib_sampler"])


def zeroshot_config(v: Mapping[str, Any], batch_size: int | None = None) -> ZeroShotConfig | None:
    """ZeroShotConfig from tasks/limit (None without tasks). Task files come from
    <data dir>/tasks/ (--data-dir, $PRUNESCOPE_DATA_DIR or ../shared/data), else the hub."""
    if not v["tasks"]:
        if v["limit"] is not None:
            raise ConfigError("--limit applies to zero-shot tasks: give --tasks too")
        return None
    kw = {} if batch_size is None else {"batch_size": batch_size}
    tasks = v["tasks"] if isinstance(v["tasks"], str) else ",".join(v["tasks"])
    return ZeroShotConfig(tasks, v["limit"], _absolute(v["data_dir"] or default_data_dir()), **kw)


def prune_config(v: Mapping[str, Any]) -> PruneConfig:
    return PruneConfig(
        v["method"],
        v["sparsity"],
        v["pattern"],
        v["targets"],
        v["allocation"],
        v["owl_lambda"],
        v["owl_m"],
        typed_options(v["method"], v["option"]),  # planning builds the method with it
        v["calib_dtype"],
        parse_budget(v["budget"]),
    )


def split_options(pairs: list[str]) -> tuple[tuple, tuple]:
    """--option values of a sweep: (shared KEY=VALUE texts, ((method, texts), ...)); a key
    written METHOD.KEY applies to that method only. The texts are typed per method by its
    options' kinds when a point is planned (``core.sweeps.grid.point_options``)."""
    shared, own = [], {}
    for pair in pairs:
        key = pair.partition("=")[0]
        method, dot, _ = key.partition(".")
        if dot:
            own.setdefault(method, []).append(pair.partition(".")[2])
        else:
            shared.append(pair)
    return tuple(shared), tuple((m, tuple(p)) for m, p in sorted(own.items()))


def grid_spec(given: Mapping[str, Any]) -> GridSpec:
    """The grid sweep (any method, core.sweeps) of the sweep command's fields; the relation
    sweep of the same fields is ``plan_request(RELATION_SWEEP, ...)``. Which one a ``sweep``
    line means is the CLI's choice (core.cli.sweep_command.sweep_kind); pages call the one
    they draw."""
    v = values_of("sweep", given)
    if v["protocol"] != NO_PROTOCOL:
        raise ConfigError(
            f"--protocol {v['protocol']} is Paper A's relation sweep: --method slicegpt alone, "
            "without grid-only flags"
        )
    shared, own = split_options(v["option"])
    unknown = sorted({m for m, _ in own} - set(method_list(v["method"])))
    if unknown:
        raise ConfigError(f"--option names {', '.join(unknown)}, which the sweep does not run")
    return GridSpec(
        model_spec(v),
        tuple(method_list(v["method"])),
        parse_grid(v["sparsities"]),
        calib_config(v),
        eval_config(v),
        tuple(method_list(v["patterns"])),
        tuple(method_list(v["allocations"])),
        parse_seeds(v["seeds"]) or (v["seed"],),
        v["targets"],
        shared,
        zeroshot_config(v),
        own,
        v["measure"],
        parse_grid(v["budgets"], "--budgets"),
    )


# ---- plans ---------------------------------------------------------------------------------------
def _plan_zeroshot(v: Mapping[str, Any], store: RunStore | None) -> RunConfig:
    model = model_spec(v) if v["model"] is not None else None
    if model is None and v["run"] is None:
        model = model_spec({**v, "model": DEFAULT_MODEL})
    if store is None:
        raise ConfigError("a zero-shot run needs the results store")
    return plan_zeroshot(model, zeroshot_config(v, v["batch_size"]), store, v["run"])[0]


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "sparsities":
        return sorted(parse_grid(a)) == sorted(parse_grid(b))
    if name == "seeds":
        return parse_seeds(a) == parse_seeds(b)
    return a == b


def with_protocol(v: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's values with the fields its ``protocol`` fixes
    (core.requests.protocol_fields); a field given another value than its default and the
    protocol's, or zero-shot tasks or method options, is an error (the points would not be
    the protocol's slice runs)."""
    out = dict(v)
    if (v.get("protocol") or NO_PROTOCOL) == NO_PROTOCOL:
        return out
    base, fixed = defaults("sweep"), primary_values(v["model"])
    clash = [
        f"--{k.replace('_', '-')} {v[k]}"
        for k, value in fixed.items()
        if not (_same(k, v[k], base[k]) or _same(k, v[k], value))
    ]
    clash += [f"--{k}" for k in UNSET_UNDER_PROTOCOL if v[k] not in (None, "", (), [])]
    if clash:
        raise ConfigError(
            f"--protocol {v['protocol']} fixes these itself (core.analysis.protocol): drop "
            + ", ".join(clash)
        )
    out.update(fixed)
    return out


def _plan_relation_sweep(v: Mapping[str, Any]) -> Plan:
    if method_list(v["method"]) != ["slicegpt"]:
        raise ConfigError("sweep --method supports slicegpt (the representation-dimension sweep)")
    v = with_protocol(v)
    grid = parse_grid(v["sparsities"])
    return plan_relation_sweep(
        model_spec(v),
        grid,
        calib_config(v),
        eval_config(v),
        typed_pairs("slicegpt", v["option"]),
        zeroshot_config(v),
        parse_seeds(v["seeds"]),
        v["measure"],
        None if v["protocol"] == NO_PROTOCOL else v["protocol"],
    )


def _plan_recover(v: Mapping[str, Any], store: RunStore | None) -> RunConfig:
    """Recovery of a stored run: its settings and training text (seed: the parent's
    calibration seed + 1 unless given)."""
    if store is None:
        raise ConfigError("a recovery needs the results store")
    if not v["run"]:
        raise ConfigError("recover needs --run RUN_ID: the prune or slice run to fine-tune")
    seed = v["seed"]
    if seed is None:
        _, src = parent_of_recovery(store, RecoverConfig(v["run"], 1))
        seed = (src.calib.seed if src.calib is not None else 0) + 1
    rc = RecoverConfig(
        v["run"],
        v["steps"],
        v["method"],
        v["rank"],
        v["alpha"],
        v["lr"],
        v["batch_size"],
        v["every"],
        v["curve_windows"],
        seed,
    )
    data = data_spec(v["calib"], None, v["data_dir"], "calib")
    calib = CalibConfig(data, v["nsamples"], v["calib_seqlen"], seed)
    return plan_recover(store, rc, calib, zeroshot_config(v))


def plan_command(command: str, given: Mapping[str, Any], store: RunStore | None = None) -> Plan:
    """The plan of what ``python -m core <command>`` with these values runs: its resolved,
    validated config with what planning resolved (``core.runs.planned.Plan``), made once."""
    v = values_of(command, given)
    if command == "eval":
        return plan_eval(model_spec(v), eval_config(v))
    if command == "prune":
        parts = (model_spec(v), prune_config(v), calib_config(v), eval_config(v))
        return plan_prune(*parts, zeroshot_config(v), v["measure"])
    if command == "slice":
        options = typed_options("slicegpt", v["option"])  # planning builds the method with it
        prune = PruneConfig(
            "slicegpt", v["sparsity"], options=options, budget=parse_budget(v["budget"])
        )
        parts = (model_spec(v), prune, calib_config(v), eval_config(v))
        return plan_slice(*parts, zeroshot_config(v), v["measure"])
    if command == RELATION_SWEEP:  # the sweep command's fields, planned as the relation sweep
        return _plan_relation_sweep(v)
    if command == "recover":
        return plan_config(_plan_recover(v, store))
    return plan_config(_plan_zeroshot(v, store))


def plan_request(
    command: str, given: Mapping[str, Any], store: RunStore | None = None
) -> RunConfig:
    """The resolved, validated config ``python -m core <command>`` with these values runs
    (``plan_command``'s config, for a caller that needs no more than the config)."""
    return plan_command(command, given, store).cfg


def save_folder(save: str | None, force: bool = False) -> str | None:
    """A ``--save DIR`` checked before any work (core.settings.outputs: a folder whose
    parent exists, not a file, written over when not empty only with --force)."""
    if not save:
        return None
    return str(check_output(save, "the saved model", FOLDER, force))


def sensitivity_request(
    store: RunStore,
    run_id: str,
    seeds: str | tuple[int, ...],
    calib: str | None = None,
    data_dir: str | None = None,
) -> RunConfig:
    """The resolved config of ``python -m core sensitivity RUN --seeds S [--calib C]``: seeds
    as '1,2,3' or a tuple; ``calib``: another corpus (its train split) for every draw."""
    seeds = parse_seeds(seeds) if isinstance(seeds, str) else tuple(seeds)
    data = None if calib is None else data_spec(calib, None, data_dir, "calib")
    return plan_sensitivity(store, run_id, seeds, data)


def run_options(command: str, given: Mapping[str, Any], force: bool = False) -> RunOptions:
    """How to execute: the command's non-config fields (save, activations_on_cpu)."""
    v = values_of(command, given)
    return RunOptions(force, save_folder(v.get("save"), force), bool(v.get("activations_on_cpu")))
