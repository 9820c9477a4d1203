"""One plan per job, parent and child together (docs/architecture.md, "One run", step 3).

What is counted: the ``core.runs.planned.Plan`` objects a process makes (``plan_run`` is the
one maker; a spy wraps ``Plan.__init__``, so every caller is seen whatever it imported). The
Prune page's process makes one Plan for a form state, and its estimate, its in-memory/streamed
caption and the launch all take that one; a rerun with unchanged values makes none; the job's
own process (``python -m core run --config FILE``) makes one, from its file. The child is
observed through a ``sitecustomize`` put on its PYTHONPATH, which wraps ``Plan.__init__`` in
that process and writes one line per Plan to a file the test reads once the job is done.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_app import TINY_FORM, open_folds, widget_of  # the same form and lookups

from core import jobs
from core.requests import request as requests
from core.runs.planned import Plan
from core.store.run_store import RunStore

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SPY_ENV = "PRUNESCOPE_TEST_PLAN_SPY"
CHILD_SPY = f'''"""A test's spy (tests/test_plan_once.py): one line per Plan this process makes."""
import os

if os.environ.get("{SPY_ENV}"):
    from core.runs.planned import Plan

    _init = Plan.__init__

    def _counted(self, cfg, *args, **kwargs):
        with open(os.environ["{SPY_ENV}"], "a") as out:
            out.write(f"{{cfg.kind}} {{cfg.run_id}}\\n")
        _init(self, cfg, *args, **kwargs)

    Plan.__init__ = _counted
'''


@pytest.fixture
def plans(monkeypatch) -> list:
    """The configs of the Plans this process makes from now on, one entry per Plan."""
    made: list = []
    init = Plan.__init__

    def counted(self, cfg, *args, **kwargs):
        made.append(cfg)
        init(self, cfg, *args, **kwargs)

    monkeypatch.setattr(Plan, "__init__", counted)
    return made


def set_values(at: AppTest, **values) -> None:
    for key, value in values.items():
        widget_of(at, key).set_value(value)


def prune_page(**values) -> AppTest:
    """The Prune page with the tiny form's values set (not run with them yet)."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/prune.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    open_folds(at)
    set_values(at, **{**TINY_FORM, **values})
    return at


def captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


def test_a_rerun_with_unchanged_values_plans_nothing(store, plans, monkeypatch) -> None:
    at = prune_page(sparsity=0.5)
    plans.clear()  # the page's first state (the preset's model), before the tiny form
    at.run()
    assert [c.prune.sparsity for c in plans] == [0.5]  # the estimate's and the caption's plan
    assert "Estimated duration" in captions(at) and "Runs **in memory**" in captions(at)
    for _ in range(2):  # widget-free reruns (a fragment, a refresh): the same form state
        at.run()
    assert len(plans) == 1
    for shown in (False, True):  # folded and opened again (pages.folds): the same values
        for e in at.expander:
            if e.key and e.key.startswith("fold_"):
                at.session_state[e.key] = shown
        at.run()
        assert ("nsamples" in [w.key for w in at.number_input]) is shown
    assert len(plans) == 1
    set_values(at, sparsity=0.3)  # a changed value: planned once more, and only once
    at.run()
    at.run()
    assert [c.prune.sparsity for c in plans] == [0.5, 0.3]
    # a refused state is kept too: its error is said again without planning again
    tried = []
    plan_command = requests.plan_command
    monkeypatch.setattr(requests, "plan_command", lambda *a: tried.append(a) or plan_command(*a))
    set_values(at, seqlen=4096)  # beyond tiny-llama's context of 2048 tokens
    at.run()
    at.run()
    assert len(tried) == 1 and "Not runnable yet" in captions(at) and "context" in captions(at)
    assert len(plans) == 2


def test_a_launch_plans_once_in_the_page_and_once_in_the_job(
    store_root, plans, tmp_path, monkeypatch
) -> None:
    hook, child_plans = tmp_path / "hook", tmp_path / "child_plans.txt"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CHILD_SPY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(SPY_ENV, str(child_plans))
    at = prune_page(sparsity=0.4)  # a new form state, and Run pressed in the same rerun
    plans.clear()  # the page's first state (the preset's model), before the tiny form
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    job_id = at.session_state["job_id"]
    # the page's one plan served the estimate, the caption and the launch: the job is its run
    assert [c.run_id for c in plans] == [job_id]
    assert "Estimated duration" in captions(at) and "Runs **in memory**" in captions(at)
    at.run()  # the page follows the job: the unchanged form plans nothing more
    assert len(plans) == 1
    store, deadline = RunStore(store_root), time.monotonic() + 240
    while not jobs.job_status(store, job_id).finished and time.monotonic() < deadline:
        time.sleep(0.5)
    assert store.get(job_id).status == "done"
    # the job's process planned once, from its file: the same run, nothing else (its dense
    # baseline is derived from that plan)
    assert child_plans.read_text().splitlines() == [f"prune {job_id}"]
