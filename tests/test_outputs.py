"""Output paths checked before any work (core.settings.outputs): a folder where a file goes, a
missing parent, an unwritable place, an existing file or a non-empty folder (replaced only
with --force), for ``runs report``, ``runs export`` and ``--save``: one message, exit code 2,
no traceback, nothing written and no run started."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.settings.config import DataSpec, EvalConfig, ModelSpec, RunConfig
from core.settings.outputs import FILE, FOLDER, check_output
from core.store.run_store import RunStore


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into (root writes anywhere but a read-only mount)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    if not os.access(folder, os.W_OK):
        return folder
    if Path("/proc/sys").is_dir() and not os.access("/proc/sys", os.W_OK):
        return Path("/proc/sys")
    pytest.skip("no folder here is unwritable to this process")


@pytest.fixture
def run_id(store) -> str:
    """A finished eval run of tiny-llama, stored by hand (no model loads)."""
    cfg = RunConfig(
        "eval", ModelSpec("tiny-llama", "cpu", "float32"), EvalConfig(DataSpec("pydoc"))
    )
    with store.begin(cfg) as w:
        w.commit({"ppl": 250.0, "n_windows": 4})
    return cfg.run_id


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_message(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# ---- the rule ------------------------------------------------------------------------------------
def test_a_file_target(tmp_path) -> None:
    (tmp_path / "old.html").write_text("x")
    assert check_output(tmp_path / "new.html", "the report") == tmp_path / "new.html"
    assert check_output(tmp_path / "old.html", "the report", force=True) == tmp_path / "old.html"
    for path, force, says in [
        (tmp_path, False, "is a folder; name a file in it"),
        (tmp_path / "old.html", False, "exists; --force replaces it"),
        (tmp_path / "missing" / "r.html", False, "does not exist (create it first)"),
        (tmp_path / "old.html" / "r.html", False, "is a file, not a folder"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            check_output(path, "the report", FILE, force)


def test_a_folder_target(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text("{}")
    (tmp_path / "file").write_text("x")
    assert check_output(tmp_path / "new", "the model", FOLDER) == tmp_path / "new"
    assert check_output(tmp_path / "empty", "the model", FOLDER) == tmp_path / "empty"
    assert check_output(tmp_path / "full", "the model", FOLDER, force=True) == tmp_path / "full"
    with pytest.raises(ConfigError, match="is not empty; --force writes the model over it"):
        check_output(tmp_path / "full", "the model", FOLDER)
    with pytest.raises(ConfigError, match=r"the model is a folder: .* is a file"):
        check_output(tmp_path / "file", "the model", FOLDER)
    with pytest.raises(ConfigError, match="does not exist"):
        check_output(tmp_path / "no" / "model", "the model", FOLDER)


def test_an_unwritable_place(tmp_path) -> None:
    locked = unwritable_folder(tmp_path)
    for kind in (FILE, FOLDER):
        with pytest.raises(ConfigError, match="is not writable"):
            check_output(locked / "out", "the output", kind)


# ---- the commands --------------------------------------------------------------------------------
def test_runs_report_to_a_folder_is_one_message(store_root, run_id, tmp_path, capsys) -> None:
    err = one_message(
        *cli(capsys, "runs", "report", run_id, str(tmp_path), "--store", str(store_root))
    )
    assert f"{tmp_path} is a folder; name a file in it" in err


def test_runs_report_checks_its_file(store_root, run_id, tmp_path, capsys) -> None:
    store = ("--store", str(store_root))
    missing = tmp_path / "no" / "r.html"
    err = one_message(*cli(capsys, "runs", "report", run_id, str(missing), *store))
    assert f"the folder {missing.parent} does not exist" in err and not missing.parent.exists()
    locked = unwritable_folder(tmp_path)
    err = one_message(*cli(capsys, "runs", "report", run_id, str(locked / "r.html"), *store))
    assert f"{locked} is not writable" in err
    html = tmp_path / "r.html"
    html.write_text("mine")
    err = one_message(*cli(capsys, "runs", "report", run_id, str(html), *store))
    assert "exists; --force replaces it" in err and html.read_text() == "mine"
    assert cli(capsys, "runs", "report", run_id, str(html), *store, "--force")[0] == 0
    assert run_id in html.read_text()


def test_runs_export_checks_its_folder(store_root, run_id, tmp_path, capsys) -> None:
    store = ("--store", str(store_root))
    err = one_message(*cli(capsys, "runs", "export", run_id, str(tmp_path / "no"), *store))
    assert f"the folder {tmp_path / 'no'} does not exist" in err
    code, out, _ = cli(capsys, "runs", "export", run_id, str(tmp_path), *store, "--json")
    assert code == 0 and json.loads(out)["to"] == str(tmp_path / run_id)
    err = one_message(*cli(capsys, "runs", "export", run_id, str(tmp_path), *store))
    assert f"{tmp_path / run_id} is not empty; --force writes run {run_id}'s copy over it" in err
    (tmp_path / run_id / "stale.txt").write_text("left from before")
    assert cli(capsys, "runs", "export", run_id, str(tmp_path), *store, "--force")[0] == 0
    assert sorted(p.name for p in (tmp_path / run_id).iterdir()) == sorted(
        p.name for p in RunStore(store_root).load(run_id).dir.iterdir()
    )


@pytest.mark.parametrize("command", ["prune", "slice"])
def test_save_is_checked_before_any_run_starts(command, tiny_flags, store_root, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    for save, says in [
        (tmp_path / "file", "the saved model is a folder"),
        (tmp_path / "full", "is not empty; --force writes the saved model over it"),
        (tmp_path / "no" / "model", "does not exist (create it first)"),
    ]:
        err = one_message(*cli(capsys, command, *tiny_flags, "--save", str(save)))
        assert says in err
    assert RunStore(store_root).list() == []  # not even the dense baseline started
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_run_config_checks_its_save_folder(store_root, tmp_path, capsys) -> None:
    cfg = RunConfig(
        "eval", ModelSpec("tiny-llama", "cpu", "float32"), EvalConfig(DataSpec("pydoc"))
    )
    path = tmp_path / "job.json"
    path.write_text(json.dumps(cfg.to_dict()))
    argv = ("run", "--config", str(path), "--store", str(store_root), "--quiet")
    err = one_message(*cli(capsys, *argv, "--save", str(path)))
    assert f"the saved model is a folder: {path} is a file" in err
    assert RunStore(store_root).list() == []
