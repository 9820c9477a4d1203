"""The demo set (core.demo) and the job queue that runs it (core.jobs.queue): every piece plans
on the models the app offers, the dense piece is every pruned piece's baseline, the CLI line
gives the same run id, and the queue runs its items in order, records outcomes and skips
the rest when cancelled."""

from __future__ import annotations

import os
import re
import shlex
import socket
import time

import pytest
from test_app import open_page, texts  # the same AppTest helpers as the page tests

from core import demo
from core.cli.main import build_parser, field_values
from core.jobs import queue
from core.jobs.status import JobStatus
from core.requests import request as requests
from core.runs import plan_eval
from core.settings.config import ModelSpec, RunConfig
from core.store.jobs_table import (
    DONE,
    JOB_STALE_S,
    RUNNING,
    JobRow,
    get_job,
    insert_job,
    update_job,
)
from core.store.run_store import RunStore


def test_every_piece_plans_and_the_dense_piece_is_their_baseline(store) -> None:
    pieces = demo.demo_pieces("tiny-llama")
    configs = {p.key: demo.piece_config(store, p) for p in pieces}
    dense_id = configs["dense"].run_id
    for key, cfg in configs.items():
        if cfg.kind == "prune":
            assert plan_eval(cfg.model, cfg.eval).cfg.run_id == dense_id, key
            assert (cfg.calib.nsamples, cfg.calib.seqlen) == (8, 128)
    assert len({c.run_id for c in configs.values()}) == len(pieces)  # no piece twice


def test_shortgpt_and_flap_pieces_measure_the_dimension_at_a_quarter_budget(store) -> None:
    """The structured view's pieces: their dense baseline is the set's, they ask a quarter of
    the decoder and measure the effective dimension (the view's dimension axis)."""
    pieces = {p.key: p for p in demo.demo_pieces("tiny-llama")}
    dense_id = demo.piece_config(store, pieces["dense"]).run_id
    for key in ("shortgpt", "flap"):
        cfg = demo.piece_config(store, pieces[key])
        assert (cfg.kind, cfg.prune.method, cfg.prune.budget) == ("structured", key, 0.25)
        assert not cfg.lean and plan_eval(cfg.model, cfg.eval).cfg.run_id == dense_id


def test_the_queue_carries_each_piece_resolved(store, monkeypatch) -> None:
    """The demo queue holds each piece's resolved config (what its job receives as JSON)."""
    queued = {}
    monkeypatch.setattr(demo, "start_queue", lambda st, name, items: queued.update(items=items))
    demo.start_demo(store, "tiny-llama")
    pieces = demo.demo_pieces("tiny-llama")
    expect = {p.key: demo.piece_config(store, p).run_id for p in pieces}
    assert {i.key: i.config.run_id for i in queued["items"]} == expect


def test_zero_shot_joins_the_set_only_where_its_items_can_be_read(tmp_path, monkeypatch) -> None:
    """Local task files, or a Hub not declared offline; neither: the piece is left out."""
    monkeypatch.setenv("PRUNESCOPE_DATA_DIR", str(tmp_path))  # no tasks/ folder here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "zeroshot" not in [p.key for p in demo.demo_pieces("tiny-llama")]
    for task in demo.ZEROSHOT_TASKS.split(","):
        (tmp_path / "tasks" / task).mkdir(parents=True)
    assert demo.demo_pieces("tiny-llama")[-1].key == "zeroshot"
    monkeypatch.setenv("PRUNESCOPE_DATA_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert demo.demo_pieces("tiny-llama")[-1].key == "zeroshot"  # from the Hub


def test_each_analysis_page_has_the_piece_it_needs() -> None:
    for page, kind in [
        (demo.PAGE_REPDIM, "sweep"),
        (demo.PAGE_ATTENTION, "prune"),
        (demo.PAGE_ASSUMPTIONS, "prune"),
    ]:
        assert demo.piece_for(page, "tiny-llama").command == kind
    gd = demo.piece_for(demo.PAGE_ASSUMPTIONS)
    assert gd.params["method"] == "attention-gd" and gd.params["targets"] == "qk"


@pytest.mark.parametrize("key", ["dense", "wanda-24", "sweep", "attention-gd"])
def test_cli_line_gives_the_same_run_id(store, key) -> None:
    piece = next(p for p in demo.demo_pieces("tiny-llama") if p.key == key)
    argv = shlex.split(demo.cli_line(piece))[3:]  # drop "python -m core"
    args = build_parser().parse_args(argv)
    cli = requests.plan_request(args.command, field_values(args), store)
    assert cli.run_id == demo.piece_config(store, piece).run_id


# ---- the queue (start_job / job_status replaced: no subprocesses) --------------------------------
def fake_jobs(monkeypatch, outcomes: dict[str, str], started: list[str]) -> None:
    def start_config_job(store, cfg):
        name = cfg.model.name.removeprefix("m-")
        started.append(name)
        return f"job-{name}"

    def job_status(store, job_id):
        name = job_id.removeprefix("job-")
        state = outcomes[name]
        if state == "interrupt":
            raise KeyboardInterrupt
        return JobStatus(job_id, state, run_id=f"run-{name}", error=None)

    monkeypatch.setattr(queue, "start_config_job", start_config_job)
    monkeypatch.setattr(queue, "job_status", job_status)
    monkeypatch.setattr(queue, "cancel", lambda *a, **k: True)


def items(*names: str) -> list[queue.QueueItem]:
    return [queue.QueueItem(n, n.upper(), RunConfig("eval", ModelSpec(f"m-{n}"))) for n in names]


def write_queue(store: RunStore, names: tuple[str, ...]) -> None:
    state = {
        "name": "q",
        "started": time.time(),
        "finished": None,
        "cancelled": False,
        "items": [
            {
                "key": i.key,
                "title": i.title,
                "config": i.config.to_dict(),
                "state": "waiting",
            }
            for i in items(*names)
        ],
    }
    queue._write(store, "q", state)


def test_queue_runs_in_order_and_keeps_going_after_a_failure(store, monkeypatch) -> None:
    started: list[str] = []
    fake_jobs(monkeypatch, {"a": "done", "b": "failed", "c": "done"}, started)
    write_queue(store, ("a", "b", "c"))
    queue.drive(store, "q")
    status = queue.queue_status(store, "q")
    assert started == ["a", "b", "c"]
    assert [i.state for i in status.items] == ["done", "failed", "done"]
    assert status.items[0].run_id == "run-a"
    assert status.state == "done" and status.n_done == 3 and status.finished


def test_cancelled_queue_skips_what_had_not_started(store, monkeypatch) -> None:
    started: list[str] = []
    fake_jobs(monkeypatch, {"a": "done", "b": "interrupt", "c": "done"}, started)
    write_queue(store, ("a", "b", "c"))
    queue.drive(store, "q")
    status = queue.queue_status(store, "q")
    assert started == ["a", "b"]
    assert [i.state for i in status.items] == ["done", "cancelled", "skipped"]
    assert status.state == "cancelled"


def driver_row(store: RunStore, name: str, pid: int, host: str, beat_age: float = 0.0) -> None:
    """The driver's row of the jobs table, 'running' as its process last wrote it."""
    now = time.time()
    row = JobRow(
        id=queue.queue_job(name),
        kind=queue.QUEUE,
        state=RUNNING,
        started=now - beat_age - 1.0,
        pid=pid,
        host=host,
        heartbeat=now - beat_age,
    )
    insert_job(store, row)


def test_a_driver_that_died_reads_as_interrupted(store) -> None:
    write_queue(store, ("a",))
    state = queue.read_queue(store, "q")
    state["items"][0]["state"] = "running"
    queue._write(store, "q", state)
    # its row went stale and its process cannot be seen: lost (core.store.jobs_table)
    driver_row(store, "q", 2**22 + 12345, "elsewhere", beat_age=2 * JOB_STALE_S)
    status = queue.queue_status(store, "q")
    assert status.state == "interrupted" and status.items[0].state == "interrupted"


def test_a_queue_has_finished_only_when_its_driver_has(store, monkeypatch) -> None:
    """The driver writes "finished" into the file before its row ends; in between the queue
    still runs (a start then would be ignored), and it is done once the row says so."""
    fake_jobs(monkeypatch, {"a": "done"}, [])
    write_queue(store, ("a",))
    queue.drive(store, "q")
    driver_row(store, "q", os.getpid(), socket.gethostname())  # alive, not yet ended
    assert queue.queue_status(store, "q").state == "running"
    update_job(store, queue.queue_job("q"), state=DONE)
    assert queue.queue_status(store, "q").state == "done"


@pytest.mark.slow
def test_real_queue_of_two_tiny_runs(store) -> None:
    """The driver subprocess starts real jobs one after another."""
    base = {"model": "tiny-llama", "device": "cpu", "seqlen": 32, "max_windows": 2}
    dense = requests.plan_request("eval", {**base, "dataset": "pydoc"})
    prune = {**base, "calib": "pydoc", "eval": "pydoc", "nsamples": 2}
    wanda = requests.plan_request("prune", prune)
    items = [queue.QueueItem("d", "dense", dense), queue.QueueItem("w", "wanda", wanda)]
    queue.start_queue(store, "q", items)
    deadline = time.time() + 300
    while not (status := queue.queue_status(store, "q")).finished and time.time() < deadline:
        time.sleep(1)
    assert [i.state for i in status.items] == ["done", "done"], status
    assert store.get(status.items[1].run_id).kind == "prune"
    driver = get_job(store, queue.queue_job("q"))  # the driver's own row, as every job's
    assert (driver.state, driver.done, driver.total) == ("done", 2, 2)


def test_the_driver_starts_through_the_one_launch(store, monkeypatch) -> None:
    """The driver is a job launched like every other (core.jobs.launch.launch_process); a
    second start while it runs starts nothing."""
    launched = []

    def launch(st, job_id, kind, run_id, argv):
        launched.append((job_id, kind, run_id, list(argv)))
        driver_row(st, "q", os.getpid(), socket.gethostname())

    monkeypatch.setattr(queue, "launch_process", launch)
    queue.start_queue(store, "q", items("a"))
    queue.start_queue(store, "q", items("a"))
    argv = ["-m", "core.jobs.queue", "--store", str(store.root), "--job", "queue-q", "q"]
    assert launched == [("queue-q", queue.QUEUE, None, argv)]
    assert queue.queue_status(store, "q").state == "running"


def test_piece_times_say_what_each_piece_has_left() -> None:
    states = [("a", "done", 12.0), ("b", "running", 30.0), ("c", "running", 70.0)]
    states += [("d", "waiting", None), ("e", "waiting", None), ("f", "skipped", None)]
    status = queue.QueueStatus(
        "demo",
        "running",
        tuple(queue.ItemStatus(k, k.upper(), s, elapsed=e) for k, s, e in states),
        elapsed=112.0,
    )
    estimates = {"a": 10.0, "b": 50.0, "c": 60.0, "d": 40.0, "e": None, "f": 5.0}
    rows = demo.piece_times(status, estimates)
    assert [(r.title, r.state, r.elapsed, r.remaining) for r in rows] == [
        ("A", "done", 12.0, 0.0),
        ("B", "running", 30.0, 20.0),  # its estimate less the time taken
        ("C", "running", 70.0, 0.0),  # past its estimate: never negative
        ("D", "waiting", None, 40.0),
        ("E", "waiting", None, None),  # no estimate: unknown, not zero
        ("F", "skipped", None, 0.0),
    ]


def test_a_running_items_elapsed_is_its_time_so_far(store) -> None:
    write_queue(store, ("a", "b"))
    state = queue.read_queue(store, "q")
    state["items"][0].update(state="running", started=time.time() - 42.0)
    queue._write(store, "q", state)
    driver_row(store, "q", os.getpid(), socket.gethostname())
    first = queue.queue_status(store, "q").items[0]
    assert first.state == "running" and 42.0 <= first.elapsed < 60.0


# ---- the app: Home's button, the sidebar's progress ----------------------------------------------
def demo_state(store: RunStore, states: list[str], pid: int | None) -> None:
    write_queue(store, tuple(f"p{i}" for i in range(len(states))))
    state = queue.read_queue(store, "q")
    for item, s in zip(state["items"], states, strict=True):
        item["state"] = s
    queue._write(store, demo.QUEUE, state)
    if pid is not None:
        driver_row(store, demo.QUEUE, pid, socket.gethostname())


def test_home_offers_the_demo_set_with_its_estimated_time(store) -> None:
    at = open_page("home")
    labels = [b.label for b in at.button]
    assert any(re.match(r"Populate every page \(about \d", b) for b in labels), labels
    assert "SliceGPT sweep" in "\n".join(c.value for c in at.caption)


# app.py draws the sidebar around every page; AppTest keeps it only for the first page run.
def test_sidebar_shows_the_running_set(store) -> None:
    demo_state(store, ["done", "running", "waiting"], os.getpid())
    at = open_page("home")
    progress = list(at.sidebar.get("progress"))
    assert progress and "Demo set 1/3" in str(progress[0].proto.text)
    assert any(b.label == "Cancel the demo set" for b in at.button)
    # Home: every piece with its time to go
    times = next(t.value for t in at.table if "still to go" in t.value.columns)
    assert list(times["piece"]) == ["P0", "P1", "P2"]
    assert list(times["state"]) == ["done", "running", "waiting"]
    assert times["still to go"][0] == ""  # finished; the others have no estimate here
    assert list(times["still to go"][1:]) == ["–", "–"]
    assert "1/3 done; unknown left" in texts(at.info)


def test_sidebar_says_how_a_finished_set_ended(store) -> None:
    demo_state(store, ["done", "failed", "done"], None)
    state = queue.read_queue(store, demo.QUEUE)
    state["finished"] = state["started"] + 75
    queue._write(store, demo.QUEUE, state)
    at = open_page("home")
    text = "\n".join(c.value for c in at.sidebar.caption)
    assert "Demo set done in 1:15" in text and "not done: P1" in text
