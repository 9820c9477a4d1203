"""Background jobs: argv building, validation before launch, status, cancel, failure, clean-up
(the jobs table itself, the liveness rule and cancel's escalation: tests/test_jobs_state.py)."""

from __future__ import annotations

import time
import zipfile
from dataclasses import replace
from io import BytesIO

import pytest

from core import jobs
from core.errors import ConfigError, ModelLoadError
from core.requests import commands as fields
from core.requests import request as requests
from core.store.jobs_table import JobRow, get_job
from core.store.run_store import RunStore

TINY = {
    "model": "tiny-llama",
    "method": "wanda",
    "sparsity": 0.5,
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 4,
    "seqlen": 64,
    "max_windows": 4,
    "device": "cpu",
}


def wait(store: RunStore, job_id: str, timeout: float = 120.0) -> jobs.JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = jobs.job_status(store, job_id)
        if status.finished:
            return status
        time.sleep(0.25)
    raise TimeoutError(f"job {job_id} still {status.state} after {timeout} s")


# ---- pure parts ----------------------------------------------------------------------------------
def test_form_values_are_typed_like_flags() -> None:
    v = requests.values_of("prune", {"max_windows": "16", "sparsity": 0.5, "option": "lam=0.1"})
    assert v["max_windows"] == 16 and v["sparsity"] == 0.5 and v["option"] == ["lam=0.1"]
    assert v["nsamples"] == 32 and v["seed"] == 0  # the reference protocol's defaults
    with pytest.raises(ConfigError, match="unrecognized arguments"):
        requests.values_of("prune", {"no_such_flag": 1})


def test_bad_values_and_commands_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="invalid float value"):
        requests.values_of("prune", {"sparsity": "half"})
    with pytest.raises(ConfigError):
        fields.command_fields("no-such-command")


def test_fields_describe_the_prune_command() -> None:
    opts = {f.name: f for f in fields.command_fields("prune")}
    assert opts["sparsity"].kind == "float" and opts["sparsity"].default == 0.5
    assert opts["allocation"].kind == "choice" and "owl" in opts["allocation"].choices
    assert opts["option"].kind == "list" and opts["trust_remote_code"].kind == "flag"
    assert "store" not in opts and "json" not in opts  # set by the job itself
    assert "prune" in fields.COMMANDS
    with pytest.raises(ConfigError, match="no 'nope' command"):
        fields.command_fields("nope")


def test_eta_from_the_current_stage_only() -> None:
    """The row keeps when its stage began and at which step: 2 s per step over 1 step."""
    row = JobRow("j", "prune", "running", 0.0, stage="prune", done=1, total=4)
    row = replace(row, stage_started=10.0, stage_done0=0, progress_t=12.0)
    assert jobs.row_eta(row, now=12.0) == pytest.approx(6.0)  # 2 s/layer × 3 layers
    assert jobs.row_eta(row, now=13.0) == pytest.approx(5.0)
    assert jobs.row_eta(replace(row, done=0), now=11.0) is None  # no step finished yet
    assert jobs.row_eta(replace(row, done=4), now=20.0) == 0.0
    assert jobs.row_eta(replace(row, total=0), now=12.0) is None


# ---- validation before launch --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"method": "nope"}, "unknown method"),
        ({"sparsity": 1.5}, r"sparsity must be in \[0, 1\)"),
        ({"method": "attention-gd", "pattern": "2:4"}, "does not support N:M"),
        ({"method": "slicegpt", "pattern": "2:4"}, "N:M"),
        ({"pattern": "4:2"}, "N:M"),
        ({"model": "./no/such/folder"}, "does not exist"),
        ({"targets": "q,x"}, "unknown linear role"),
        ({"device": "cuda:7"}, "cuda"),
    ],
)
def test_bad_input_raises_before_anything_is_written(store, change, message) -> None:
    if change.get("device") == "cuda:7":
        pytest.importorskip("torch")
        import torch

        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has a cuda:7")
    with pytest.raises(ConfigError, match=message):
        jobs.start_job(store, "prune", {**TINY, **change})
    assert store.list() == []
    assert not list((store.root / "progress").iterdir())


def test_save_model_only_for_prune(store) -> None:
    with pytest.raises(ConfigError, match="only offered for prune"):
        jobs.start_job(store, "eval", {"model": "tiny-llama", "dataset": "pydoc"}, save_model=True)


def test_status_of_unknown_id_and_of_a_cli_run(store) -> None:
    assert jobs.job_status(store, "nothing").state == "unknown"
    assert jobs.cancel(store, "nothing") is False


# ---- real jobs (tiny model, offline corpus), started together to share the start-up time -----
@pytest.fixture(scope="module")
def bg_jobs(tmp_path_factory) -> dict:
    """Jobs run side by side: a prune that succeeds (saving its model), one that fails, one
    cancelled mid-run, a SliceGPT prune (stored as a 'slice' run) and an eval (a command
    without a planned run id)."""
    store = RunStore(tmp_path_factory.mktemp("jobs") / "store")
    ok = jobs.start_job(store, "prune", TINY, save_model=True)
    joined = jobs.start_job(store, "prune", TINY, save_model=True)
    with pytest.raises(ModelLoadError, match=r"no-such-model-xyz.*not found"):  # at the edge
        jobs.start_job(store, "prune", {**TINY, "model": "no-org/no-such-model-xyz"})
    empty = tmp_path_factory.mktemp("corpus") / "empty.txt"
    empty.write_text("")
    bad = jobs.start_job(store, "prune", {**TINY, "eval": f"file:{empty}"})  # fails when run
    slow = jobs.start_job(
        store, "prune", {**TINY, "seqlen": 512, "max_windows": 400, "nsamples": 64}
    )
    dense = jobs.start_job(
        store, "eval", {"model": "tiny-llama", "dataset": "pydoc", "seqlen": 32, "max_windows": 2}
    )
    # (its own eval windows: two jobs needing the same dense baseline at once would collide)
    sliced = jobs.start_job(
        store, "prune", {**TINY, "method": "slicegpt", "sparsity": 0.25, "seqlen": 48}
    )
    deadline = time.monotonic() + 90
    while jobs.job_status(store, slow).phase is None and time.monotonic() < deadline:
        time.sleep(0.2)
    cancelled = jobs.cancel(store, slow)
    return {
        "store": store,
        "ok": ok,
        "joined": joined,
        "sliced": sliced,
        "slow": slow,
        "cancel_sent": cancelled,
        "status": {
            name: wait(store, job)
            for name, job in [
                ("ok", ok),
                ("bad", bad),
                ("slow", slow),
                ("dense", dense),
                ("sliced", sliced),
            ]
        },
    }


def test_job_runs_to_done_under_its_planned_id(bg_jobs) -> None:
    store, job_id, status = bg_jobs["store"], bg_jobs["ok"], bg_jobs["status"]["ok"]
    assert bg_jobs["joined"] == job_id  # the same config again joins the running job
    assert status.state == "done", status.error
    assert status.run_id == job_id and status.elapsed > 0
    run = store.load(job_id)
    assert run.metrics["ppl"] > 0 and "layers" in run.tables()
    argv = get_job(store, job_id).argv
    assert "--save" in argv and "--quiet" in argv and argv[argv.index("--job") + 1] == job_id
    assert "--force" in argv  # the app's own model folder is written over on a rerun


def test_unplanned_job_records_the_run_it_made(bg_jobs) -> None:
    status = bg_jobs["status"]["dense"]
    assert status.job_id.startswith("job-") and status.state == "done", status.error
    rec = bg_jobs["store"].get(status.run_id)
    assert rec.kind == "eval" and rec.summary["ppl"] > 0


def test_failed_and_cancelled_jobs_leave_the_store_consistent(bg_jobs) -> None:
    failed, cancelled = bg_jobs["status"]["bad"], bg_jobs["status"]["slow"]
    assert failed.state == "failed"
    assert "empty" in failed.error
    assert bg_jobs["cancel_sent"] and cancelled.state == "cancelled"
    assert bg_jobs["store"].get(bg_jobs["slow"]).status == "cancelled"  # SIGTERM: a clean stop
    assert [r for r in bg_jobs["store"].list() if r.status == "running"] == []


def test_saved_model_export_and_delete(bg_jobs) -> None:
    store, job_id = bg_jobs["store"], bg_jobs["ok"]
    saved = jobs.model_dir(store, job_id)
    assert (saved / "config.json").is_file()
    assert store.load(job_id).metrics["saved_to"] == str(saved)
    with zipfile.ZipFile(BytesIO(jobs.export_runs(store, [job_id]))) as zf:
        assert f"{job_id}/metrics.json" in zf.namelist()
    with zipfile.ZipFile(BytesIO(jobs.zip_folder(saved, "model", compress=False))) as zf:
        assert "model/config.json" in zf.namelist()
    jobs.delete_run(store, job_id)
    assert not saved.exists() and not jobs.log_path(store, job_id).exists()
    assert job_id not in {r.id for r in store.list()}


def test_save_corpus_limits_and_names_by_hash(store) -> None:
    name = jobs.save_corpus(store, "notes.txt", b"some text\n\nmore text\n", limit_mb=1)
    path = name.removeprefix("file:")
    assert name.startswith("file:") and path.endswith(".txt") and "uploads" in path
    assert jobs.save_corpus(store, "again.txt", b"some text\n\nmore text\n", 1) == name
    with pytest.raises(ConfigError, match="upload limit is 1 MB"):
        jobs.save_corpus(store, "big.txt", b"x" * (2**20 + 1), limit_mb=1)
    with pytest.raises(ConfigError, match="empty"):
        jobs.save_corpus(store, "blank.jsonl", b"  \n", limit_mb=1)


def test_structured_method_job_id_is_its_slice_run(bg_jobs) -> None:
    """prune --method slicegpt is run by core.slicing; the planned id must be that run's."""
    status = bg_jobs["status"]["sliced"]
    assert status.state == "done", status.error
    assert status.run_id == bg_jobs["sliced"]
    assert bg_jobs["store"].get(status.run_id).kind == "slice"
