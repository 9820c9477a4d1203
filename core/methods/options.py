"""Every pruning method's options as fields in the user's words: label, help, range or
choices, and whether the option is an expert's (drawn in an expander).

Nothing is repeated here: each method's options dataclass (``Method.options_cls``) declares
every option once, with ``core.settings.field.option``: its name, type (the field kind),
default and words. So the form, the CLI's ``--option KEY=VALUE`` and the resolved config
agree, and a new option is one line in its method's module. ``typed_options`` builds the
options dataclass once at the edge (the CLI's texts parsed by each option's kind, a form's
values as they are); planning hands it to the method it builds. ``option_pairs`` turns
widget values back into KEY=VALUE texts for a grid sweep's per-method options.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from core.errors import ConfigError
from core.methods import available_methods, get_method
from core.settings.field import CHOICE, FLAG, FLOAT, INT, WORDS, Field

_KINDS = {bool: FLAG, int: INT, float: FLOAT, str: CHOICE}


def _kind(hint: Any) -> str:
    """The field kind of an option's type in its options dataclass (``float | None``: float)."""
    (base,) = [t for t in typing.get_args(hint) or (hint,) if t is not type(None)]
    return _KINDS[base]


EXPERT = "expert"  # Field.group of an expert's option


def option_fields(method: str) -> tuple[Field, ...]:
    """The options of ``method`` as fields: name, kind, default and words, all from its options
    dataclass."""
    cls = get_method(method)
    types = typing.get_type_hints(cls.options_cls)
    out = []
    for f in dataclasses.fields(cls.options_cls):
        w = f.metadata.get(WORDS)
        if w is None:
            raise ConfigError(
                f"option {f.name!r} of {cls.name} has no label "
                "(declare it with core.settings.field.option)"
            )
        kind = _kind(types[f.name])
        choices = w.limits if kind == CHOICE else None
        span = w.limits if kind in (INT, FLOAT) else None
        group = EXPERT if w.expert else ""
        out.append(Field(f.name, w.label, w.help, f.default, kind, choices, span, group))
    return tuple(out)


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _parse(method: str, f: Field, text: str) -> Any:
    """One option's CLI text as its field's type ('20' for an int, '1e-3' for a float,
    'false' for a flag, 'none' for an option that may be empty)."""
    word = text.strip().lower()
    if word in ("none", "null", "") and f.default is None:
        return None
    try:
        if f.kind == INT:
            return int(text)
        if f.kind == FLOAT:
            return float(text)
    except ValueError:
        raise ConfigError(
            f"option {f.name} of {method} takes a{'n integer' if f.kind == INT else ' number'}, "
            f"got {text!r}"
        ) from None
    if f.kind == FLAG:
        if word not in _TRUE + _FALSE:
            raise ConfigError(f"option {f.name} of {method} is true or false, got {text!r}")
        return word in _TRUE
    return text


def typed_options(method: str, given: Any = ()) -> Any:
    """The options dataclass of ``method`` (``Method.options_cls``), built once at the edge
    from what a user gave: the dataclass itself (an app form), a mapping of values, or the
    CLI's ``KEY=VALUE`` texts, each parsed by its option's kind (not guessed from the text,
    so ``lam=1`` and the form's 1.0 are the same value and the same run id). An unknown key
    or a value of the wrong kind is one ConfigError naming the method's options; the
    dataclass checks the values."""
    cls = get_method(method).options_cls
    if isinstance(given, cls):
        return given
    fields = {f.name: f for f in option_fields(method)}
    values: dict[str, Any] = {}
    if isinstance(given, Mapping):
        values = {str(k).replace("-", "_"): v for k, v in given.items()}
    else:
        for pair in given or ():
            key, sep, text = str(pair).partition("=")
            key = key.strip().replace("-", "_")
            if not sep or not key:
                raise ConfigError(f"--option expects KEY=VALUE, got {pair!r}")
            if key in fields:
                values[key] = _parse(method, fields[key], text)
            else:
                values[key] = text
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{method} has no option {', '.join(unknown)}; its options: "
            f"{', '.join(fields) or 'none'}"
        )
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"bad options for {method}: {exc}") from exc


def typed_pairs(method: str, pairs: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """The ``KEY=VALUE`` options a user gave, each typed by its option's kind as
    ``typed_options`` types them, as sorted (key, value) pairs: only the keys given, since a
    sweep's id is its options as given."""
    typed = typed_options(method, pairs)
    keys = {str(pair).partition("=")[0].strip().replace("-", "_") for pair in pairs}
    return tuple(sorted((key, getattr(typed, key)) for key in keys))


def option_pairs(method: str, values: dict[str, Any], prefix: str = "") -> list[str]:
    """Widget values -> ['key=value', ...] for the ones that differ from the default;
    ``prefix`` ('sparsegpt.') scopes them to one method of a grid sweep."""
    out = []
    for f in option_fields(method):
        value = values.get(f.name, f.default)
        if value is None or value == f.default:
            continue
        if f.kind == FLAG:
            value = "true" if value else "false"
        out.append(f"{prefix}{f.name}={value}")
    return out


def all_option_fields() -> dict[str, tuple[Field, ...]]:
    return {m: option_fields(m) for m in available_methods()}
