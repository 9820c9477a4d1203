"""The store under damage: each kind of file a run folder holds (config, environment,
metrics, the file list, each table, each array file) truncated to half, overwritten with
garbage of its own length, or deleted. Every command that reads the run (``runs show``,
``runs report``, ``runs export``, ``compare``, ``recover``, ``zeroshot --run``) gives the one
damaged-run message naming the run, the file and the way out, with exit code 2 and no
traceback; ``runs list`` and ``runs show`` mark the run damaged; each page that reads the run
says the same (or marks it); and no other byte of the store changes.

One store (a Wanda prune run with its dense baseline and a SliceGPT run, all of tiny-llama)
is built once per session; each case damages a copy of it. The commands run in process.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.cli.main import main
from core.errors import DamagedRunError
from core.store.integrity import MANIFEST
from core.store.run_store import RunStore

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MODES = ("truncate", "garbage", "delete")
# (run, file in its folder): every kind of file the built store's runs hold
FILES = [
    ("prune", "config.json"),
    ("prune", "env.json"),
    ("prune", "metrics.json"),
    ("prune", MANIFEST),
    ("prune", "tables/allocation.parquet"),
    ("prune", "tables/attention_errors.parquet"),
    ("prune", "tables/effdim.parquet"),
    ("prune", "tables/eval_windows.parquet"),
    ("prune", "tables/layers.parquet"),
    ("slice", "tables/boundaries.parquet"),
    ("prune", "arrays/qk.safetensors"),
    ("prune", "arrays/rebuild.safetensors"),
    ("slice", "arrays/spectra.safetensors"),
]
# the pages that read a run of each kind (Attention masks lists prune runs only)
PAGES = {"prune": ("prune", "attention", "compare", "runs"), "slice": ("prune", "compare", "runs")}


def tiny_flags(root: Path) -> list[str]:
    return [
        *("--model", "tiny-llama", "--device", "cpu", "--dtype", "float32"),
        *("--calib", "pydoc", "--nsamples", "4", "--seqlen", "64"),
        *("--eval", "pydoc", "--max-windows", "4"),
        *("--store", str(root), "--quiet"),
    ]


PRUNE = ("prune", "--method", "wanda", "--sparsity", "0.5")


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(store root, {"dense" | "prune" | "slice": run id}), built once."""
    root = tmp_path_factory.mktemp("fuzz") / "store"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*PRUNE, *tiny_flags(root)]) == 0
        assert main(["slice", "--sparsity", "0.25", *tiny_flags(root)]) == 0
    kinds = {r.kind: r.id for r in RunStore(root).list()}
    return root, {"dense": kinds["eval"], "prune": kinds["prune"], "slice": kinds["slice"]}


@pytest.fixture
def copy(built, tmp_path, monkeypatch) -> tuple[Path, dict[str, str]]:
    root, ids = built
    dest = tmp_path / "store"
    shutil.copytree(root, dest)
    monkeypatch.setenv("PRUNESCOPE_HOME", str(dest))
    return dest, ids


def damage(path: Path, mode: str) -> None:
    data = path.read_bytes()
    if mode == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif mode == "garbage":
        path.write_bytes(random.Random(len(data)).randbytes(len(data)))
    else:
        path.unlink()


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under the store's runs/, byte for byte."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in (root / "runs").rglob("*") if p.is_file()
    }


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_names(message: str, root: Path, run_id: str, rel: str) -> None:
    """The damaged-run message: the run, the file, and the three ways out."""
    assert f"run {run_id} is damaged: {root / 'runs' / run_id / rel}: " in message, message
    assert f"runs delete {run_id} --store {root}" in message
    assert "with --force" in message and f"runs reindex --store {root}" in message


def assert_one_message(code: int, out: str, err: str, root: Path, run_id: str, rel: str) -> None:
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert_names(err, root, run_id, rel)


# ---- the command line ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("run", "rel"), FILES, ids=[f"{r}-{f}" for r, f in FILES])
def test_every_command_names_the_damaged_file(copy, tmp_path, capsys, run, rel, mode) -> None:
    root, ids = copy
    run_id, store = ids[run], ["--store", str(root)]
    damage(root / "runs" / run_id / rel, mode)
    before = snapshot(root)
    # a run without its file list reads as one stored before runs listed their files: whole
    whole = rel == MANIFEST and mode == "delete"

    code, out, _ = cli(capsys, "runs", "list", *store, "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert code == 0 and {r["status"] for i, r in rows.items() if i != run_id} == {"done"}
    assert rows[run_id]["status"] == ("done" if whole else "damaged")
    code, out, _ = cli(capsys, "runs", "show", run_id, *store, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["status"] == rows[run_id]["status"]
    assert shown["metrics"]["ppl"] == rows[run_id]["ppl"]  # what the index holds, still shown

    html, dest = tmp_path / "report.html", tmp_path / "exported"
    dest.mkdir()
    report = ("runs", "report", run_id, str(html), *store)
    export = ("runs", "export", run_id, str(dest), *store)
    if whole:
        assert cli(capsys, *report)[0] == 0 and run_id in html.read_text()
        assert cli(capsys, *export)[0] == 0 and (dest / run_id / "config.json").is_file()
    else:
        assert_names(rows[run_id]["error"], root, run_id, rel)
        assert_names(shown["error"], root, run_id, rel)
        quiet = (*store, "--quiet")
        for argv in (
            report,
            export,
            ("compare", run_id, "--prompt", "def f(x):", "--max-new-tokens", "2", *quiet),
            ("recover", "--run", run_id, *quiet),
            ("zeroshot", "--run", run_id, "--tasks", "piqa", "--limit", "2", *quiet),
        ):
            assert_one_message(*cli(capsys, *argv), root, run_id, rel)
        assert not html.exists() and list(dest.iterdir()) == []
    assert snapshot(root) == before  # no other run, and no other file of this one, touched


def test_the_cases_cover_every_kind_of_file_a_run_holds(built) -> None:
    root, ids = built
    held = {
        str(p.relative_to(root / "runs" / run_id))
        for run_id in ids.values()
        for p in (root / "runs" / run_id).rglob("*")
        if p.is_file()
    }
    assert held == {rel for _, rel in FILES}


def test_damage_inside_a_table_is_met_when_it_is_read(copy, tmp_path, capsys) -> None:
    """Bytes changed inside a parquet footer keep the file's size and magic (the checks at
    load pass) and fail the read itself: the same message."""
    root, ids = copy
    rel = "tables/eval_windows.parquet"
    path = root / "runs" / ids["prune"] / rel
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    for i in range(len(data) - 8 - footer, len(data) - 8):
        data[i] = 0xFF - data[i]
    path.write_bytes(bytes(data))
    run = RunStore(root).load(ids["prune"])  # the folder looks whole
    with pytest.raises(DamagedRunError) as exc:
        run.table("eval_windows")
    assert_names(str(exc.value), root, ids["prune"], rel)
    argv = ("runs", "report", ids["prune"], str(tmp_path / "r.html"), "--store", str(root))
    assert_one_message(*cli(capsys, *argv), root, ids["prune"], rel)


def test_a_damaged_dense_baseline_is_marked_in_its_pruned_runs_report(copy, tmp_path, capsys):
    root, ids = copy
    rel = "tables/eval_windows.parquet"
    damage(root / "runs" / ids["dense"] / rel, "truncate")
    html = tmp_path / "report.html"
    assert cli(capsys, "runs", "report", ids["prune"], str(html), "--store", str(root))[0] == 0
    text = html.read_text()
    assert "dense run damaged (no interval)" in text and f"run {ids['dense']} is damaged" in text
    assert "dense perplexity [95 % interval]" not in text
    argv = ("runs", "report", ids["dense"], str(html), "--store", str(root), "--force")
    assert_one_message(*cli(capsys, *argv), root, ids["dense"], rel)


def test_the_ways_out_rerun_with_force_delete_and_reindex(copy, capsys) -> None:
    root, ids = copy
    rel = "tables/layers.parquet"
    damage(root / "runs" / ids["prune"] / rel, "garbage")
    others = {k: v for k, v in snapshot(root).items() if ids["prune"] not in k}
    flags = [*PRUNE, *tiny_flags(root)]
    assert_one_message(*cli(capsys, *flags), root, ids["prune"], rel)  # reuse refused
    assert cli(capsys, *flags, "--force")[0] == 0  # a new folder replaces the damaged one
    RunStore(root).load(ids["prune"])  # whole again
    assert {k: v for k, v in snapshot(root).items() if ids["prune"] not in k} == others

    damage(root / "runs" / ids["slice"] / "metrics.json", "delete")
    assert cli(capsys, "runs", "delete", ids["slice"], "--store", str(root))[0] == 0
    shutil.rmtree(root / "runs" / ids["dense"])  # a folder gone from under the index
    out = cli(capsys, "runs", "list", "--store", str(root), "--json")[1]
    rows = {r["id"]: r for r in json.loads(out)}
    assert set(rows) == {ids["prune"], ids["dense"]} and rows[ids["dense"]]["status"] == "damaged"
    assert_names(rows[ids["dense"]]["error"], root, ids["dense"], ".")
    assert cli(capsys, "runs", "reindex", "--store", str(root))[0] == 0
    assert [r.id for r in RunStore(root).list()] == [ids["prune"]]


# ---- the pages -----------------------------------------------------------------------------------
def page(name: str, selected: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["selected_run"] = selected
    at.run()
    at.switch_page(f"pages/{name}.py")
    if name == "compare":
        at.session_state["cmp_runs"] = [selected]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at: AppTest) -> str:
    return "\n".join(str(e.value) for e in at.error)


# The damage mode rotates over the files: every file and every mode meets every page that
# reads the run, in 13 cases rather than 39 (a page meets damage through the same reads
# whatever the mode; the command-line cases above take every pair).
ROTATED = [(run, rel, MODES[i % len(MODES)]) for i, (run, rel) in enumerate(FILES)]


@pytest.mark.parametrize(
    ("run", "rel", "mode"), ROTATED, ids=[f"{r}-{f}-{m}" for r, f, m in ROTATED]
)
def test_every_page_that_reads_the_run_names_the_damage(copy, run, rel, mode) -> None:
    root, ids = copy
    run_id = ids[run]
    damage(root / "runs" / run_id / rel, mode)
    before = snapshot(root)
    for name in PAGES[run]:
        at = page(name, run_id)
        if name == "runs":  # the table marks it; selecting it gives the message
            table = at.dataframe[0].value
            status = dict(zip(table["id"], table["status"], strict=True))
            assert status[run_id] == "damaged"
            assert {s for i, s in status.items() if i != run_id} == {"done"}
            assert "1 run(s) are damaged" in "\n".join(str(w.value) for w in at.warning)
            row = list(table["id"]).index(run_id)
            at.session_state["runs_table_0"] = {
                "selection": {"rows": [row], "columns": [], "cells": []}
            }
            at.run()
            assert not at.get("download_button")  # no export or report of a damaged run
        assert_names(errors(at), root, run_id, rel)
    assert snapshot(root) == before
