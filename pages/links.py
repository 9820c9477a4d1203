"""Views you can link to: every page keeps its selections in the URL (``?key=value``) and opens
on them, so a copied link opens the same view. Not a page itself.

A page draws a selection through ``linked`` (or ``restore`` before the widget and ``publish``
after it): the link's value seeds the widget, once, when it names one of the widget's options
(or a number in its range); every run then writes the widget's value back to the URL, all of
them at once when the page's run ends (``one_write``). Values are written by what they are,
never by their label: a run by its id, a number as a number.
Streamlit's own ``bind="query-params"`` writes a picker's label (a run's label holds its
perplexity) and drops values equal to the default (a default that is the newest run moves),
so the pages use this instead. The link is read as the session first saw it (``opened``):
it seeds each widget once, and a selection made afterwards is the user's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import streamlit as st

from pages import folds

_OPENED = "_link_opened"  # session key: the URL's parameters as the session first saw them
# The selections a run has published and not yet written (``one_write``); one per script thread.
_queued: ContextVar[dict[str, list[str] | None] | None] = ContextVar("link_queue", default=None)


def opened() -> dict[str, list[str]]:
    """The parameters of the URL the session was opened with (taken on the first call; the
    entry redirect of a deep link, ``pages.common.require_frame``, takes them first)."""
    if _OPENED not in st.session_state:
        st.session_state[_OPENED] = {k: st.query_params.get_all(k) for k in st.query_params}
    return st.session_state[_OPENED]


def _decode(text: str, options: Sequence[Any] | None, kind: type | None, lo, hi) -> Any:
    """One URL value as the widget's value, or None when it is not one of its values."""
    if options is not None:
        return next((o for o in options if str(o) == text), None)
    if kind is bool:
        return {"True": True, "False": False}.get(text)
    if kind in (int, float):
        try:
            value = kind(float(text)) if kind is int and float(text).is_integer() else kind(text)
        except ValueError:
            return None
        ok = (lo is None or value >= lo) and (hi is None or value <= hi)
        return value if ok else None
    return text


def take(
    name: str,
    options: Sequence[Any] | None = None,
    *,
    many: bool = False,
    kind: type | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> Any:
    """The link's value of ``name`` decoded (a list when ``many``), consumed: None when the
    link has none, or none that is valid."""
    texts = opened().pop(name, None)
    if not texts:
        return None
    values = [_decode(t, options, kind, lo, hi) for t in texts]
    if many:
        found = [v for v in values if v is not None]
        return found or None
    return values[0]


def restore(key: str, options: Sequence[Any] | None = None, *, param: str | None = None,
            **kw: Any) -> None:  # fmt: skip
    """Before the widget keyed ``key`` is drawn: its value from the link (URL parameter
    ``param``, by default the key), when there is a valid one."""
    value = take(param or key, options, **kw)
    if value is not None:
        st.session_state[key] = value


def publish(name: str, value: Any) -> None:
    """The selection ``value`` into the URL as ``name`` (a list as repeated parameters; None
    removes it): at the end of the run inside ``one_write``, at once otherwise."""
    if value is None or (isinstance(value, list | tuple) and not value):
        texts = None
    elif isinstance(value, list | tuple):
        texts = [str(v) for v in value]
    else:
        texts = [str(value)]
    queued = _queued.get()
    if queued is None:
        _write({name: texts})
    else:
        queued[name] = texts


@contextmanager
def one_write() -> Iterator[None]:
    """Within it, the selections published are written to the URL in one message when it
    ends, and only those that changed. Each write to ``st.query_params`` is a message of its
    own, which the browser takes as a ``history.pushState`` (a history entry); written one by
    one, every run made a page load wait on one per widget (docs/benchmarks.md, "Speed of the
    app"). The app's frame runs each page inside it."""
    token = _queued.set({})
    try:
        yield
    finally:
        queued = _queued.get()
        _queued.reset(token)
        _write(queued)


def _write(selections: dict[str, list[str] | None]) -> None:
    """The URL with ``selections`` (None: removed), in one message when anything changed."""
    url = st.query_params
    changed = {k: v for k, v in selections.items() if v is not None and url.get_all(k) != v}
    gone = [k for k, v in selections.items() if v is None and k in url]
    if gone:
        kept = {k: url.get_all(k) for k in url if k not in gone}
        url.from_dict({**kept, **changed})
    elif changed:
        url.update(changed)


def linked(draw: Callable[..., Any], label: str, options: Sequence[Any] | None = None, *,
           key: str, param: str | None = None, kind: type | None = None,
           **kw: Any) -> Any:  # fmt: skip
    """``draw(label, options, key=key, **kw)`` (a Streamlit widget) seeded from the link and
    written back to the URL: pick one (selectbox, radio), several (multiselect), a number or a
    flag (number_input, slider, toggle: ``value``, ``min_value``, ``max_value`` as keywords;
    ``kind`` when ``value`` is None) or a text. ``param``: the URL name when it differs from
    the key (a key that changes). Inside a closed fold (``pages.folds``) nothing is drawn
    and the widget's held value is returned."""
    many = getattr(draw, "__name__", "") == "multiselect"
    start = kw.get("value")
    if kind is None and isinstance(start, bool | int | float):
        kind = type(start)
    lo, hi = kw.get("min_value"), kw.get("max_value")
    restore(key, options, param=param, many=many, kind=kind, lo=lo, hi=hi)
    if folds.closed():  # not drawn: the value it holds (pages.folds)
        value = folds.kept(key, folds.start_value(many, options, kw))
    elif options is None:
        value = draw(label, key=key, **kw)
    else:
        value = draw(label, options, key=key, **kw)
    publish(param or key, value)
    return value
