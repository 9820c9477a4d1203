"""The ``python -m core`` line that computes what a form or a demo piece starts, shown to the
user so the same run ids can be had from a terminal. Display only: background jobs launch
from the resolved configuration's JSON (core.jobs.launch), never from these flags."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from core.requests.commands import command_fields, defaults
from core.requests.request import typed_value
from core.settings.field import FLAG, LIST


def command_flags(command: str, given: Mapping[str, Any]) -> list[str]:
    """The flags of ``command`` that give these field values (defaults and fields that are
    not part of the configuration left out)."""
    fields = {f.name: f for f in command_fields(command)}
    base = defaults(command)
    argv: list[str] = []
    for name, raw in given.items():
        f = fields.get(name)
        if f is None or not f.config:
            continue
        value = typed_value(f, raw)
        if value in (None, "") or value == base[name] or (f.kind == LIST and not value):
            continue
        if f.kind == FLAG:
            argv += [f.flag] if value else []
        elif f.kind == LIST:
            argv += [x for item in value for x in (f.flag, str(item))]
        else:
            argv += [f.flag, str(value)]
    return argv


def command_line(command: str, given: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """'python -m core COMMAND FLAGS... EXTRA...', quoted for a POSIX shell."""
    argv = [command, *command_flags(command, given), *extra]
    return "python -m core " + " ".join(shlex.quote(a) for a in argv)
