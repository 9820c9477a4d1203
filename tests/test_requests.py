"""One path from flags or form values to a config: the same choices give the same run id from
the CLI and the app, every preset is made of ordinary values, and bad configurations fail at
the edge, before a model is loaded."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.cli.main import build_parser, field_values
from core.errors import ConfigError
from core.methods import available_methods
from core.names import method_names
from core.requests import commands as fields
from core.requests import request as requests
from core.settings.config import RunConfig
from core.store.run_store import RunStore

ROOT = Path(__file__).resolve().parents[1]
APP_PRUNE = {
    "model": "tiny-llama",
    "method": "wanda",
    "calib": "pydoc",
    "eval": "pydoc",
    "device": "cpu",
}


@pytest.mark.parametrize("preset", sorted(fields.PRESETS))
def test_cli_and_app_give_the_same_run_id(preset) -> None:
    """The app sends field values; the CLI parses flags into the same values."""
    app_values = {**APP_PRUNE, **fields.PRESETS[preset]}
    argv = ["prune"]
    for key, value in app_values.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    args = build_parser().parse_args(argv)
    cli_cfg = requests.plan_request("prune", field_values(args))
    app_cfg = requests.plan_request("prune", app_values)
    assert cli_cfg.run_id == app_cfg.run_id
    assert cli_cfg.calib.nsamples == fields.defaults("prune", preset)["nsamples"]


def test_defaults_are_the_reference_protocol() -> None:
    cfg = requests.plan_request("prune", {"model": "tiny-llama", "device": "cpu"})
    assert (cfg.calib.nsamples, cfg.calib.seqlen, cfg.calib.seed) == (32, 512, 0)
    assert (cfg.calib.data.dataset, cfg.calib.data.split) == ("c4", "train")


@pytest.mark.parametrize("command", ["prune", "slice", "sweep"])
def test_calib_sampler_flag_reaches_the_config(command) -> None:
    """--calib-sampler goes from the flag to the run config and its id; the default
    ("window") stays out of the canonical JSON, so stored runs without it keep their ids."""
    argv = [command, "--model", "tiny-llama", "--device", "cpu", "--calib", "pydoc"]
    window = requests.plan_request(command, field_values(build_parser().parse_args(argv)))
    args = build_parser().parse_args([*argv, "--calib-sampler", "documents"])
    docs = requests.plan_request(command, field_values(args))
    assert (window.calib.sampler, docs.calib.sampler) == ("window", "documents")
    assert docs.run_id != window.run_id
    assert "sampler" not in window.to_dict()["calib"]
    back = RunConfig.from_dict(docs.to_dict())
    assert (back.calib, back.run_id) == (docs.calib, docs.run_id)
    assert RunConfig.from_dict(window.to_dict()).run_id == window.run_id


def test_unknown_calib_sampler_is_refused_before_any_model_loads(store) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["prune", "--calib-sampler", "shuffled"])
    with pytest.raises(ConfigError, match="sampler must be one of window, documents"):
        requests.plan_request(
            "prune", {"model": "tiny-llama", "device": "cpu", "calib_sampler": "shuffled"}, store
        )
    assert store.list() == []


@pytest.mark.parametrize(
    ("command", "values", "message"),
    [
        ("slice", {"sparsity": 0.999}, "rounds down to 0"),
        ("slice", {"sparsity": 0.8}, "less than one attention head"),
        ("slice", {"sparsity": 0.25, "allocation": "owl"}, "unrecognized"),
        ("prune", {"pattern": "2:3"}, "divisible by 3"),
        ("prune", {"seqlen": 4096}, "exceeds the model's context"),
        ("prune", {"calib_seqlen": 4096}, "calibration seqlen 4096 exceeds"),
        ("prune", {"method": "slicegpt", "allocation": "owl"}, "uniform"),
        ("prune", {"method": "attention-gd", "pattern": "2:4"}, "does not support N:M"),
        ("sweep", {"sparsities": "0,0.5,0.99"}, "rounds down to 0"),
        ("eval", {"seqlen": 2048}, "exceeds the model's context"),
    ],
)
def test_invalid_configs_fail_at_the_edge(store, command, values, message) -> None:
    with pytest.raises(ConfigError, match=message):
        requests.plan_request(command, {"model": "tiny-llama", "device": "cpu", **values}, store)
    assert store.list() == []


@pytest.mark.slow
def test_cli_slice_0999_fails_fast(tmp_path) -> None:
    """The embedded model's width check needs only its config.json (the whole process,
    interpreter start-up included, well under the 10 s budget on an idle machine)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "core", "slice", "--sparsity", "0.999", "--store", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "rounds down to 0" in proc.stderr
    assert RunStore(tmp_path).list() == []
    print(f"slice --sparsity 0.999 failed in {time.perf_counter() - t0:.1f} s")


def _core_modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] != "__main__":  # runs the CLI when imported
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _imports(path: Path, known: set[str]) -> set[str]:
    """core modules a file imports anywhere (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {
                n
                for n in (node.module, *(f"{node.module}.{a.name}" for a in node.names))
                if n in known
            }
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
    return out


def test_core_has_no_import_cycle_and_every_module_imports() -> None:
    names = _core_modules()
    files = {n: ROOT / (n.replace(".", "/") + ".py") for n in names}
    files = {n: f if f.is_file() else f.with_suffix("") / "__init__.py" for n, f in files.items()}
    graph = {n: _imports(f, set(names)) - {n} for n, f in files.items()}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            assert state.get(m) != 1, f"import cycle: {' -> '.join([*stack, n, m])}"
            if m not in state:
                visit(m, [*stack, n])
        state[n] = 2

    for n in names:
        if n not in state:
            visit(n, [])
    # Every module imports in a fresh interpreter.
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


# Optional heavy dependencies a function may import when it needs them.
OPTIONAL = {"lm_eval", "datasets", "resource", "pydoc_data", "ray", "peft"}  # resource: Unix only


def test_no_imports_inside_functions_except_optional_dependencies() -> None:
    bad = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    mods = [node.module or ""]
                else:
                    continue
                bad += [
                    f"{path.name}:{node.lineno} {m}"
                    for m in mods
                    if m.split(".")[0] not in OPTIONAL
                ]
    assert bad == []


# What the forms validate with: none of it may import torch or transformers (issue #18:
# Home's first render paid 4-6 s for those imports). Checked in a fresh interpreter.
LIGHT_MODULES = (
    "core.settings.config",
    "core.requests.commands",
    "core.settings.patterns",
    "core.names",
    "core.models.catalog",
    "core.names",
)


def test_config_and_field_modules_import_without_torch() -> None:
    code = (
        "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *LIGHT_MODULES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


def test_method_names_are_the_registry_s() -> None:
    assert tuple(available_methods()) == method_names()


def test_calib_dtype_flag_reaches_the_config(store) -> None:
    """--calib-dtype goes from the flag to the prune config and its id; the default
    (float32) stays out of the canonical JSON, so stored runs keep their ids; SliceGPT,
    whose rotations come from float32 forwards, refuses bfloat16 before anything loads."""
    argv = ["prune", "--model", "tiny-llama", "--device", "cpu", "--calib", "pydoc"]
    f32 = requests.plan_request("prune", field_values(build_parser().parse_args(argv)))
    args = build_parser().parse_args([*argv, "--calib-dtype", "bfloat16"])
    bf16 = requests.plan_request("prune", field_values(args))
    assert (f32.prune.calib_dtype, bf16.prune.calib_dtype) == ("float32", "bfloat16")
    assert "calib_dtype" not in f32.to_dict()["prune"]
    assert bf16.run_id != f32.run_id
    assert RunConfig.from_dict(bf16.to_dict()).run_id == bf16.run_id
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--calib-dtype", "float16"])
    with pytest.raises(ConfigError, match="slicegpt computes its rotations from float32"):
        requests.plan_request(
            "prune",
            {
                "model": "tiny-llama",
                "device": "cpu",
                "method": "slicegpt",
                "sparsity": 0.2,
                "calib_dtype": "bfloat16",
            },
            store,
        )
    assert store.list() == []
