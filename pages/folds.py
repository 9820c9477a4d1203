"""Folded form sections: an expander whose widgets are drawn only while it is open. Not a page.

A collapsed expander's widgets still cost every page load their layout (docs/benchmarks.md,
"Speed of the app"). Inside a closed fold, widgets drawn through ``pages.links.linked`` are
not drawn: each gives the value it holds, or the one it would start at, so a form reads the
same values open or closed. Streamlit forgets an undrawn widget's value when the run ends, so
a closed fold writes each held value back (``kept``). The fold's own state lives under its
key (``st.session_state[key]``: True when open), which is also how tests open it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

import streamlit as st

# True while drawing inside a closed fold; one value per script thread (each session's run has
# its own context), so concurrent sessions never see each other's folds.
_closed: ContextVar[bool] = ContextVar("prunescope_fold_closed", default=False)


def closed() -> bool:
    """Whether the widgets being drawn now sit in a closed fold (and are not drawn)."""
    return _closed.get()


@contextmanager
def fold(label: str, key: str) -> Iterator[bool]:
    """``with fold(label, key) as shown:`` an expander, collapsed at first, whose content is
    drawn only while it is open (opening it reruns the page); ``shown`` says whether it is.
    A fold inside a closed fold draws nothing at all."""
    if closed():
        yield False
        return
    box = st.expander(label, key=key, on_change="rerun")
    token = _closed.set(not box.open)
    try:
        with box:
            yield bool(box.open)
    finally:
        _closed.reset(token)


def kept(key: str, start: Any) -> Any:
    """The value of the undrawn widget ``key``: the one it holds, kept for the next runs, else
    ``start``."""
    if key not in st.session_state:
        return start
    st.session_state[key] = st.session_state[key]  # undrawn, Streamlit would drop it at run end
    return st.session_state[key]


def start_value(multi: bool, options: Sequence[Any] | None, kw: dict[str, Any]) -> Any:
    """What a widget drawn with ``options`` and keywords ``kw`` returns on its first run: a
    choice's ``index``-th option (several: its ``default``), else its ``value``."""
    if options is None:
        return kw.get("value")
    if multi:
        return list(kw.get("default") or [])
    options = list(options)
    return options[kw.get("index", 0)] if options else None


def columns(spec: int | list[int]) -> list:
    """``st.columns(spec)``, or as many empty contexts inside a closed fold (nothing is drawn
    there)."""
    if closed():
        return [nullcontext() for _ in range(spec if isinstance(spec, int) else len(spec))]
    return list(st.columns(spec))
