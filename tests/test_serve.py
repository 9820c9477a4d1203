"""pages.serve: the warm-up that `make run` does before the server opens its port."""

from __future__ import annotations

import gc
import logging
import sys
import weakref
from pathlib import Path

import pytest

from pages import serve


@pytest.fixture(autouse=True)
def _unfreeze():
    """warm() freezes the heap of the process it runs in: give the test process its own back."""
    yield
    gc.unfreeze()


SCRIPT = """\
from __future__ import annotations

import json
import os.path
from collections import abc
from pages.common import get_store
from . import sibling


def later():
    import csv  # inside a function: paid when called, not warmed
"""


def test_top_imports_reads_only_the_module_level(tmp_path: Path) -> None:
    page = tmp_path / "page.py"
    page.write_text(SCRIPT)
    assert serve.top_imports(page) == [
        "json",
        "os.path",
        "collections",
        "collections.abc",
        "pages.common",
        "pages.common.get_store",
    ]


def test_page_modules_leave_out_the_pages_and_repeat_nothing(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(SCRIPT)
    b.write_text("import json\nimport pages.forms\nfrom core import names\n")
    assert serve.page_modules([a, b]) == [
        "json",
        "os.path",
        "collections",
        "collections.abc",
        "core",
        "core.names",
    ]


def test_the_app_pages_warm_the_heavy_libraries() -> None:
    """What the pages import really is what makes a first page slow (not a fixed list)."""
    names = serve.page_modules([serve.APP, *sorted((serve.ROOT / "pages").glob("*.py"))])
    assert {
        "core.requests.request",
        "core.runs.estimate",
        "core.figures",
        "core.runs.attention_maps",
    } <= set(names)
    assert not [n for n in names if n.startswith("pages")]


def test_warm_imports_skips_attributes_and_survives_a_broken_module(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    broken = tmp_path / "prunescope_broken_mod.py"
    broken.write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    page = tmp_path / "page.py"
    (tmp_path / "prunescope_ok_mod.py").write_text("VALUE = 1\n")
    page.write_text(
        "from json import dumps\nimport prunescope_broken_mod\nimport prunescope_ok_mod\n"
    )
    with caplog.at_level(logging.WARNING, logger="prunescope.serve"):
        seconds = serve.warm([page])
    assert seconds >= 0
    assert "prunescope_ok_mod" in sys.modules  # after the failure: one bad module stops nothing
    assert "prunescope_broken_mod" not in sys.modules
    assert [r.getMessage() for r in caplog.records if "prunescope_broken_mod" in r.getMessage()]
    assert not [r for r in caplog.records if "json.dumps" in r.getMessage()]


def test_a_page_that_does_not_parse_warms_nothing_and_stops_nothing(tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text("import json\ndef broken(:\n")
    good.write_text("import json\n")
    assert serve.top_imports(bad) == []
    assert serve.page_modules([bad, good]) == ["json"]


class _Node:
    pass


def test_settle_heap_collects_garbage_then_freezes_the_rest() -> None:
    """Cyclic garbage made before is collected, not frozen; what lives is left out of later
    collections, so the full collection Streamlit runs after each script walks little."""
    dead = _Node()
    dead.self = dead  # a cycle: only the collector frees it
    gone = weakref.ref(dead)
    del dead
    alive = _Node()
    tracked_before = len(gc.get_objects())
    frozen = serve.settle_heap()
    assert gone() is None
    assert frozen > 0 and gc.get_freeze_count() == frozen
    assert len(gc.get_objects()) < tracked_before / 10  # the frozen ones are not walked
    assert alive is not None


def test_warm_freezes_its_heap(tmp_path: Path) -> None:
    page = tmp_path / "page.py"
    page.write_text("import json\n")
    serve.warm([page])
    assert gc.get_freeze_count() > 0
