"""One user setting (``Field``) and the kinds of value it takes: what the CLI turns into a
flag and the app into a widget (core.requests.commands holds the table of every command's
fields)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

FLAG, INT, FLOAT, CHOICE, LIST, TEXT = "flag", "int", "float", "choice", "list", "text"
MULTI = "multi"  # several of ``choices``: a comma list on the CLI, a multiselect in the app


@dataclass(frozen=True)
class Field:
    """One setting: ``name`` is its key in a values dict and its flag (--name, _ as -)."""

    name: str
    label: str
    help: str
    default: Any = None
    kind: str = TEXT
    choices: tuple[Any, ...] | None = None
    range: tuple[float, float] | None = None  # inclusive bounds of a number
    group: str = ""
    config: bool = True  # False: how to run it (save, force), not part of the run id
    advanced: bool = False  # drawn in the app's "Advanced" expander

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


WORDS = "words"  # the metadata key of a method option's Words


@dataclass(frozen=True)
class Words:
    """A method option in the user's words: label and help, the range (lo, hi) of a number or
    the choices of a word (None for a flag), and whether it is an expert's (the app draws
    those in an expander)."""

    label: str
    help: str
    limits: tuple[Any, ...] | None = None
    expert: bool = False


def option(
    default: Any, label: str, help: str, limits: tuple[Any, ...] | None = None, expert: bool = False
) -> Any:
    """A field of a method's options dataclass, with its words beside it, which
    ``core.methods.options`` turns into a form field: ``steps: int = option(20, "Gradient
    steps", "cap per group", (1, 1000))``."""
    return dataclasses.field(default=default, metadata={WORDS: Words(label, help, limits, expert)})


SPARSITY_MENU = tuple(round(0.05 * i, 2) for i in range(20))  # the app's choices of s
SEED_MENU = tuple(range(10))


def method_list(value: Any) -> list[str]:
    """'wanda, sparsegpt' or ['wanda', 'sparsegpt'] -> ['wanda', 'sparsegpt']."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return [str(m).strip() for m in items if str(m).strip()]
