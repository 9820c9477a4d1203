"""Widgets drawn from the field table (core.requests.commands, core.methods.options): every
form of the app (Prune, Sweeps) shows the same label, help, range and default for the same setting,
and sends field values to the one request path (core.requests.request). Not a page itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import streamlit as st

from core import jobs
from core.data import default_data_dir
from core.errors import ConfigError, PruneScopeError
from core.methods.options import EXPERT, option_fields, option_pairs, typed_options
from core.models.catalog import available_models
from core.planning.cost import device_type
from core.planning.speed import Speed, measured_speed
from core.requests import request as requests
from core.requests.commands import PRESETS, app_preset
from core.runs.estimate import estimate_seconds
from core.runs.planned import Plan
from core.settings.config import ModelSpec
from core.settings.field import CHOICE, FLAG, FLOAT, INT, MULTI, Field, method_list
from core.store.run_store import RunStore
from pages import folds
from pages.common import device_info
from pages.links import linked

OTHER_MODEL = "other (local folder or Hugging Face id)"
UPLOAD = "upload a text file"
PLAN_MEMO = "form_plans"  # session state: {command: (a form's values, their plan or refusal)}
CORPUS_FIELDS = ("calib", "eval")
PRESET_FIELDS = ("nsamples", "calib_seqlen", "seqlen", "max_windows")
PRESET_HELP = (
    "named sets of ordinary values (core.requests.commands): 'reference' is the protocol every "
    "default follows (calibration 32 × 512 C4 train, every evaluation window); 'quick' keeps a CPU "
    "run of the embedded model to minutes"
)


# ---- one widget per field ---------------------------------------------------------------------
def _menu_value(x: str, menu: list[Any]) -> Any:
    """A comma-list item as the menu's type ('0.5' -> 0.5 for a float menu)."""
    for m in menu:
        if str(m) == x or (isinstance(m, int | float) and _number(x) == m):
            return m
    return x


def _number(x: str) -> float | None:
    try:
        return float(x)
    except ValueError:
        return None


def widget(f: Field, default: Any, key: str, choices: Iterable[Any] | None = None) -> Any:
    """The widget of one field, starting at ``default`` (or at the link's value, in the URL
    as ``key``: ``pages.links``): a toggle, a list to pick one or several from, a number
    within the field's range, or text."""
    label, help_ = f.label, f.help
    menu = list(choices if choices is not None else f.choices or ())
    if f.kind == FLAG:
        return linked(st.toggle, label, key=key, value=bool(default), help=help_)
    if f.kind == MULTI:
        start = [_menu_value(x, menu) for x in method_list(default)]
        return linked(
            st.multiselect, label, menu, default=[x for x in start if x in menu], key=key,
            help=help_,
        )  # fmt: skip
    if menu:
        if default is not None and default not in menu:
            menu.append(default)
        index = menu.index(default) if default in menu else 0
        draw = st.radio if f.kind == CHOICE and len(menu) <= 3 else st.selectbox
        extra = {"horizontal": True} if draw is st.radio else {}
        return linked(draw, label, menu, index=index, key=key, help=help_, **extra)
    if f.kind in (INT, FLOAT):
        cast = int if f.kind == INT else float
        lo, hi = (cast(x) for x in f.range) if f.range else (None, None)
        step = 1 if f.kind == INT else (0.05 if hi is not None and hi <= 1 else None)
        value = None if default is None else cast(default)
        return linked(
            st.number_input, label, key=key, kind=cast, min_value=lo, max_value=hi,
            value=value, step=step, help=help_,
        )  # fmt: skip
    text = linked(st.text_input, label, key=key, value="" if default is None else str(default),
                  help=help_)  # fmt: skip
    return text.strip() or None


def draw(fields: Iterable[Field], start: dict[str, Any], key: Callable[[str], str], cols: int = 3):
    """Widgets of ``fields`` in ``cols`` columns; returns their values by field name."""
    fields = list(fields)
    columns = folds.columns(cols) if fields else []
    values = {}
    for i, f in enumerate(fields):
        with columns[i % cols]:
            values[f.name] = field_value(f, start.get(f.name), key(f.name))
    return values


def field_value(f: Field, default: Any, key: str) -> Any:
    """A field's widget with the app's own menus: models, corpora, this machine's devices."""
    if f.name == "model":
        return model_widget(f, default, key)
    if f.name in CORPUS_FIELDS:
        return corpus_widget(f, default, key)
    if f.name == "device":
        kind = device_info().get("type")
        return widget(
            f, default, key, ["auto", "cpu", *([kind] if kind in ("cuda", "mps") else [])]
        )
    return widget(f, default, key)


def model_widget(f: Field, default: Any, key: str) -> str:
    names = [*available_models(), OTHER_MODEL]
    choice = widget(f, default if default in names else names[0], key, names)
    custom = st.text_input(
        "Model folder or Hugging Face id", key=f"custom_{key}", help=f"used with '{OTHER_MODEL}'"
    )
    return custom.strip() if choice == OTHER_MODEL else choice  # empty: ModelSpec says so


def corpus_widget(f: Field, default: Any, key: str) -> Any:
    """A corpus: the local copies first when there is a data folder, pydoc (offline) else."""
    corpora = ["wikitext2", "c4", "pydoc", UPLOAD]
    if not default_data_dir():
        default = "pydoc"
    return widget(f, default, key, corpora)


def corpus_name(choice: str, upload, store: RunStore) -> str:
    """The dataset name of a corpus choice; an upload is kept in the store as a file."""
    if choice != UPLOAD:
        return choice
    if upload is None:
        raise ConfigError("choose a .txt or .jsonl file to upload, or pick another corpus")
    limit_mb = st.get_option("server.maxUploadSize")
    return jobs.save_corpus(store, upload.name, upload.getvalue(), limit_mb)


def upload_widget(key: str):
    """The corpus upload. Its file is held in the session: inside a closed fold (``pages.folds``)
    it is the value, and when the fold opens again, its uploader (drawn empty: a file cannot be
    written back into one) leaves it in place until a new file replaces it or the user removes
    it from the uploader while it shows."""
    held, shown = f"{key}_held", f"{key}_shown"
    if folds.closed():
        st.session_state[shown] = False
        return st.session_state.get(held)
    upload = st.file_uploader(
        "Text corpus (.txt or .jsonl with a 'text' field)", type=["txt", "jsonl"], key=key
    )
    if upload is not None or st.session_state.get(shown):  # a new file, or one removed
        st.session_state[held] = upload
    st.session_state[shown] = True
    kept = st.session_state.get(held)
    if kept is not None and upload is None:
        st.caption(f"Using `{kept.name}`, chosen before this section was folded.")
    st.caption(f"Local data folder: `{default_data_dir() or 'none found (pydoc works offline)'}`")
    return kept


# ---- presets, method options, estimates ---------------------------------------------------------
def preset_picker(key: str, reset: Iterable[str]) -> str:
    """The preset the form starts from; switching it resets the preset's fields."""
    names = list(PRESETS)
    keys = list(reset)

    def forget() -> None:
        for k in keys:
            st.session_state.pop(k, None)

    start = names.index(app_preset(device_info().get("type")))
    return st.selectbox("Preset", names, start, key=key, help=PRESET_HELP, on_change=forget)


def option_values(method: str, key: str) -> dict[str, Any]:
    """A method's options as widgets with their ranges (expert ones in an expander);
    returns their values by option name."""
    fields = option_fields(method)
    common = [f for f in fields if f.group != EXPERT]
    expert = [f for f in fields if f.group == EXPERT]
    values = draw(common, {f.name: f.default for f in common}, lambda n: f"{key}_{n}")
    if expert:
        with folds.fold(f"Expert options of {method}", f"fold_{key}_expert"):
            values.update(draw(expert, {f.name: f.default for f in expert}, lambda n: f"{key}_{n}"))
    return values


def typed_method_options(method: str, key: str) -> Any:
    """A method's option widgets; returns its options dataclass, built once here
    (``core.methods.options.typed_options``) and carried as it is to the method.
    Values the options class rejects come back as they are, so the one request path says
    why where the estimate and the Run button are."""
    values = option_values(method, key)
    try:
        return typed_options(method, values)
    except ConfigError:
        return values


def method_options(method: str, key: str, prefix: str = "") -> list[str]:
    """A method's option widgets; returns the KEY=VALUE pairs that differ from the defaults
    (``prefix`` 'sparsegpt.' scopes them to one method of a grid sweep)."""
    return option_pairs(method, option_values(method, key), prefix)


def speed_for(store: RunStore, model: ModelSpec) -> Speed:
    """The speed core.runs.estimate plans ``model``'s runs with: its device's, measured on the
    store's runs of that model when there are any (core.planning.speed reads it once per version of
    the store)."""
    return measured_speed(store, device_type(model), model.name)


def form_plan(store: RunStore, command: str, values: dict[str, Any]) -> Plan:
    """The plan of a form's values, exactly as ``python -m core <command>`` would plan them
    (an upload counts as a small file), made once per form state: every widget change reruns
    the page, and a rerun with the same values takes the plan (or the refusal) it made, so
    the estimate, the path caption and the launch share one plan. The form's last state is
    kept per command in the session (``PLAN_MEMO``)."""
    key = (str(store.root), repr(sorted(values.items())))
    memo = st.session_state.setdefault(PLAN_MEMO, {})
    if command not in memo or memo[command][0] != key:
        planned = {k: ("pydoc" if v == UPLOAD else v) for k, v in values.items()}
        try:
            memo[command] = (key, requests.plan_command(command, planned, store))
        except PruneScopeError as exc:
            memo[command] = (key, exc)
    found = memo[command][1]
    if isinstance(found, PruneScopeError):
        raise found
    return found


def planned_seconds(store: RunStore, command: str, values: dict[str, Any]) -> tuple[float, str]:
    """(estimated seconds, where the speed came from) of a form's values, from their plan
    (``form_plan``)."""
    cfg = form_plan(store, command, values).cfg
    speed = speed_for(store, cfg.model)
    return estimate_seconds(cfg, store, speed), speed.source


def show_estimate(plan: Callable[[], tuple[float, str]]) -> None:
    """'About N min' from ``plan() -> (seconds, what)``; a value the plan rejects is said
    once, where the user presses the button."""
    try:
        seconds, what = plan()
    except PruneScopeError as exc:
        st.caption(f"Not runnable yet: {exc}")
        return
    if seconds <= 0:
        st.caption(f":material/timer: {what}: already stored, shown at once.")
    else:
        st.caption(f":material/timer: Estimated duration: **about {duration(seconds)}** ({what}).")


def duration(seconds: float) -> str:
    """A planning figure in words: '40 s', '12 min', '2 h 50 min'."""
    if seconds < 90:
        return f"{max(round(seconds), 1)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
