"""The Sweeps page and the shared form definition: the sweep form and the Prune page draw the
same fields with the same defaults, the same choices give the same run ids from the CLI and
the app, and a sweep started from the page fills its grid in live, can be cancelled, and
draws its curves (tiny models, AppTest)."""

from __future__ import annotations

import shlex
import time

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from test_app import open_folds, open_page, texts
from test_app import widget_of as widget

from core.cli.main import build_parser, field_values
from core.cli.reproduce import command_flags
from core.cli.sweep_command import sweep_kind
from core.errors import ConfigError
from core.figures.sweeps import DENSE as FIGURE_DENSE
from core.figures.sweeps import accuracy_curves, sweep_curves
from core.jobs.grid_sweep import cell_grid, grid_status
from core.methods.options import all_option_fields, option_pairs
from core.names import GRID_SWEEP
from core.requests import commands as fields
from core.requests import request as requests
from core.store.run_store import RunStore
from core.sweeps.grid import resolve_grid
from core.sweeps.orchestrate import DENSE

SHARED = (
    "model",
    "device",
    "targets",
    "calib",
    "eval",
    "nsamples",
    "calib_seqlen",
    "seqlen",
    "tasks",
)
PRUNE_KEY = {"max_windows": "windows"}
TINY = {
    "model": "tiny-llama",
    "device": "cpu",
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 4,
    "calib_seqlen": 32,
    "seqlen": 32,
    "max_windows": 2,
}


def command_line(at: AppTest) -> list[str]:
    line = next(c.value for c in at.caption if c.value.startswith("Command line:"))
    return shlex.split(line.split("`")[1])[3:]  # after "python -m core"


# ---- one definition ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", sorted(fields.PRESETS))
def test_sweep_and_prune_defaults_agree(preset) -> None:
    prune = fields.defaults("prune", preset)
    sweep = fields.sweep_defaults(["wanda", "sparsegpt"], preset)
    shared = set(prune) & set(sweep) - {"method", "sparsity", "option", "targets"}
    assert {k: sweep[k] for k in shared} == {k: prune[k] for k in shared}
    # slicegpt alone keeps SliceGPT's reference calibration, as the slice command does
    alone = fields.sweep_defaults(["slicegpt"], preset)
    slice_ = fields.defaults("slice", preset)
    assert (alone["calib"], alone["seed"]) == (slice_["calib"], slice_["seed"]) == ("wikitext2", 42)


def test_a_grid_point_is_the_prune_page_run() -> None:
    """The same choice on the Prune page and in a sweep is one run id (computed once)."""
    prune = requests.plan_request("prune", {**TINY, "method": "sparsegpt", "sparsity": 0.5})
    spec = requests.grid_spec({**TINY, "method": ["wanda", "sparsegpt"], "sparsities": [0.5]})
    assert prune.run_id in {c.run_id for c in resolve_grid(spec)}


def test_a_grid_point_types_its_options_as_prune_does() -> None:
    """``--option percdamp=1`` is the float 1.0 in a sweep (shared or METHOD.KEY) as in a
    prune: one parse by the option's kind, so one run id; a key the method lacks is refused."""
    prune = requests.plan_request(
        "prune", {**TINY, "method": "sparsegpt", "sparsity": 0.5, "option": ["percdamp=1"]}
    )
    assert dict(prune.prune.options)["percdamp"] == 1.0
    for option in (["percdamp=1"], ["sparsegpt.percdamp=1"]):
        spec = requests.grid_spec(
            {**TINY, "method": ["sparsegpt"], "sparsities": [0.5], "option": option}
        )
        assert prune.run_id in {c.run_id for c in resolve_grid(spec)}, option
    bad = requests.grid_spec(
        {**TINY, "method": ["wanda"], "sparsities": [0.5], "option": ["percdamp=1"]}
    )
    with pytest.raises(ConfigError, match="no option percdamp"):
        resolve_grid(bad)


def test_cli_and_app_sweeps_give_the_same_run_ids() -> None:
    """App values (widget lists) and the CLI flags built from them meet in requests."""
    app = {
        **TINY,
        "method": ["wanda", "sparsegpt"],
        "sparsities": [0.3, 0.5],
        "patterns": ["unstructured", "2:4"],
        "seeds": [0, 1],
        "option": option_pairs("sparsegpt", {"percdamp": 0.05}, "sparsegpt."),
    }
    args = build_parser().parse_args(["sweep", *command_flags("sweep", app)])
    assert sweep_kind(args, field_values(args)) == GRID_SWEEP
    cli_ids = [c.run_id for c in resolve_grid(requests.grid_spec(field_values(args)))]
    app_ids = [c.run_id for c in resolve_grid(requests.grid_spec(app))]
    assert cli_ids == app_ids and len(app_ids) == 1 + 2 * 2 * 3  # dense + methods×points×seeds
    # the per-method option reached sparsegpt's runs only
    options = {
        c.prune.method: dict(c.prune.options) for c in resolve_grid(requests.grid_spec(app))[1:]
    }
    assert options["sparsegpt"]["percdamp"] == 0.05 and "percdamp" not in options["wanda"]


def test_every_method_option_has_words_a_range_and_its_default() -> None:
    for method, opts in all_option_fields().items():
        for f in opts:
            assert f.label and f.label != f.name and f.help, (method, f.name)
            assert f.choices or f.range or f.kind == "flag" or f.default is None, (method, f.name)
        assert option_pairs(method, {f.name: f.default for f in opts}) == []  # defaults: no flags
    assert DENSE == FIGURE_DENSE


def test_forms_show_the_same_widgets_and_no_raw_flag_names(store_root) -> None:
    prune, sweep = open_page("prune"), open_page("sweeps")
    open_folds(prune)
    for name in (*SHARED, "max_windows"):
        p, s = widget(prune, PRUNE_KEY.get(name, name)), widget(sweep, f"sw_{name}")
        assert (p.label, p.value) == (s.label, s.value), name
    kinds = (
        "selectbox",
        "number_input",
        "text_input",
        "toggle",
        "checkbox",
        "multiselect",
        "radio",
    )
    labels = {w.label.lower() for at in (prune, sweep) for k in kinds for w in getattr(at, k)}
    assert "compare scores within" in labels
    for raw in ("trust remote code", "revision", "option", "dtype", "method options"):
        assert raw not in labels
    for at in (prune, sweep):
        assert "Estimated duration" in texts(at.caption)
    # a longer calibration is a longer estimate, live
    before = next(c.value for c in sweep.caption if "Estimated" in c.value)
    widget(sweep, "sw_nsamples").set_value(512)
    sweep.run()
    assert next(c.value for c in sweep.caption if "Estimated" in c.value) != before


def test_sweep_form_command_line_is_the_cli_path(store_root) -> None:
    """The page shows the CLI line of its choices; parsed, it gives the page's run ids."""
    at = open_page("sweeps")
    assert widget(at, "sw_method").value == ["wanda"]  # the Prune page's method
    for name, value in {
        **TINY,
        "method": ["wanda", "sparsegpt"],
        "sparsities": [0.25, 0.5],
    }.items():
        widget(at, f"sw_{name}").set_value(value)
    at.run()
    args = build_parser().parse_args(command_line(at))
    assert args.grid and sweep_kind(args, field_values(args)) == GRID_SWEEP
    cli = resolve_grid(requests.grid_spec(field_values(args)))
    prune = requests.plan_request("prune", {**TINY, "method": "wanda", "sparsity": 0.5})
    assert prune.run_id in {c.run_id for c in cli}
    assert "4 of 4 point(s)" in texts(at.caption)


# ---- a real sweep from the page ------------------------------------------------------------------
def start(at: AppTest, **values) -> str:
    for name, value in {**TINY, **values}.items():
        widget(at, f"sw_{name}").set_value(value)
    at.run()
    next(b for b in at.button if b.label == "Start the sweep").click()
    at.run()
    assert not at.error, texts(at.error)
    return at.session_state["sweep_grid_job"]


def wait(at: AppTest, store: RunStore, job: str, until, limit: float = 240) -> None:
    deadline = time.monotonic() + limit
    while not until(grid_status(store, job)) and time.monotonic() < deadline:
        time.sleep(0.5)
    at.run()


def test_sweep_runs_live_and_draws_its_curves(store) -> None:
    at = open_page("sweeps")
    job = start(at, method=["magnitude", "wanda"], sparsities=[0.25, 0.5])
    # while it runs: the live grid with its counts and a Cancel button
    assert any(b.label == "Cancel the sweep" for b in at.button) or grid_status(store, job).finished
    seen: set[str] = set()

    def poll(status) -> bool:
        seen.update(status.cells["state"])
        return status.finished

    wait(at, store, job, poll)
    assert "queued" in seen  # the grid was drawn before its points finished
    status = grid_status(store, job)
    assert status.state == "done", status.error
    assert status.counts()["done"] == 5 and status.counts()["queued"] == 0  # dense + 2 × 2
    assert "finished" in texts(at.success)
    grid = at.dataframe[0].value
    assert list(grid["method"]) == ["magnitude", "wanda"] and "s=0.25" in grid
    assert set(grid["s=0.5"]) == {"✅ done"}
    assert len(at.get("plotly_chart")) == 1  # perplexity vs sparsity (no tasks asked)
    # the same sweep again reuses every point: nothing computed, all stored
    again = start(open_page("sweeps"), method=["magnitude", "wanda"], sparsities=[0.25, 0.5])
    assert again == job


def test_cancel_stops_the_sweep_and_keeps_finished_points(store) -> None:
    at = open_page("sweeps")
    # sized to outlast the start-up: many points of a slow configuration
    job = start(
        at,
        method=["sparsegpt"],
        sparsities=[round(0.05 * i, 2) for i in range(1, 13)],
        nsamples=64,
        calib_seqlen=256,
        seqlen=256,
        max_windows=64,
    )
    wait(at, store, job, lambda s: (s.cells["state"] == "running").any() or s.finished, 120)
    assert not grid_status(store, job).finished, "the sweep ended before it could be cancelled"
    next(b for b in at.button if b.label == "Cancel the sweep").click()
    at.run()
    wait(at, store, job, lambda s: s.finished, 60)
    status = grid_status(store, job)
    assert status.state == "cancelled"
    assert "cancelled" in texts(at.warning)
    assert [r for r in store.list() if r.status == "running"] == []
    assert (status.cells["state"] == "queued").any()  # the rest never started


# ---- pure pieces ---------------------------------------------------------------------------------
def test_curves_show_the_seed_spread_and_the_dense_level() -> None:
    rows = [
        {
            "method": DENSE,
            "pattern": "-",
            "allocation": "-",
            "sparsity": 0.0,
            "n_seeds": 1,
            "ppl_mean": 10.0,
            "ppl_std": None,
            "acc_mean": None,
            "acc_std": None,
        },
        {
            "method": "wanda",
            "pattern": "unstructured",
            "allocation": "uniform",
            "sparsity": 0.5,
            "n_seeds": 3,
            "ppl_mean": 20.0,
            "ppl_std": 2.0,
            "acc_mean": None,
            "acc_std": None,
        },
        {
            "method": "wanda",
            "pattern": "2:4",
            "allocation": "uniform",
            "sparsity": 0.5,
            "n_seeds": 1,
            "ppl_mean": 30.0,
            "ppl_std": None,
            "acc_mean": None,
            "acc_std": None,
        },
    ]
    fig = sweep_curves(pd.DataFrame(rows))
    names = [t.name for t in fig.data]
    assert names == ["wanda", "wanda 2:4", "dense 10"]
    assert list(fig.data[0].error_y.array) == [2.0] and list(fig.data[1].error_y.array) == [0.0]
    assert fig.layout.yaxis.type == "log"
    assert "no finished point" in accuracy_curves(pd.DataFrame(rows)).layout.annotations[0].text


def test_cell_grid_pivots_states_by_sparsity() -> None:
    cells = pd.DataFrame(
        [
            ("a", "eval", "dense", "-", "-", 0.0, None, "done"),
            ("b", "prune", "wanda", "unstructured", "uniform", 0.3, 0, "done"),
            ("c", "prune", "wanda", "unstructured", "uniform", 0.5, 0, "running"),
            ("d", "prune", "sparsegpt", "unstructured", "uniform", 0.3, 0, "queued"),
        ],
        columns=["run_id", "kind", "method", "pattern", "allocation", "sparsity", "seed", "state"],
    )
    grid = cell_grid(cells).set_index("method")
    assert grid.loc["wanda", "s=0.5"] == "running" and grid.loc["sparsegpt", "s=0.3"] == "queued"
    assert pd.isna(grid.loc["sparsegpt", "s=0.5"]) and "dense" not in grid.index
