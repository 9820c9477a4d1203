"""The six zero-shot tasks as lm-evaluation-harness 0.4 builds them: one ``McItem`` per
document (its (context, continuation) pairs, the choice strings length normalisation uses,
the gold index), from local files (the ``shared/data/tasks`` layout) or the hub datasets
lm-eval names; ``limit`` keeps the first N documents, like lm-eval's ``--limit``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.settings.patterns import parse_tasks


@dataclass(frozen=True)
class McItem:
    """One multiple-choice document as lm-eval requests it.

    pairs: (context, continuation) per choice; choices share the context (ARC, PIQA, BoolQ,
    HellaSwag) or, with partial scoring (WinoGrande), share the continuation.
    choices: the doc_to_choice strings whose lengths normalise acc_norm.
    """

    pairs: tuple[tuple[str, str], ...]
    choices: tuple[str, ...]
    gold: int

    def __post_init__(self) -> None:
        if len(self.pairs) < 2 or len(self.pairs) != len(self.choices):
            raise DataError(f"an item needs >= 2 choices, one pair each; got {len(self.pairs)}")
        if not 0 <= self.gold < len(self.pairs):
            raise DataError(f"gold index {self.gold} outside 0..{len(self.pairs) - 1}")


# ---- item builders: lm-eval 0.4 task definitions (target delimiter " ") ----------------------
def _shared_context(context: str, choices: Sequence[str], gold: int) -> McItem:
    return McItem(tuple((context, " " + c) for c in choices), tuple(choices), gold)


def arc_item(question: str, texts: Sequence[str], labels: Sequence[str], answer: str) -> McItem:
    """arc_easy / arc_challenge: "Question: {q}\\nAnswer:" + " " + choice text."""
    if answer not in labels:
        raise DataError(f"ARC answer key {answer!r} is not among the labels {list(labels)}")
    return _shared_context(
        f"Question: {question}\nAnswer:", list(texts), list(labels).index(answer)
    )


def piqa_item(goal: str, sol1: str, sol2: str, label: int) -> McItem:
    """piqa: "Question: {goal}\\nAnswer:" + " " + sol1 | sol2."""
    return _shared_context(f"Question: {goal}\nAnswer:", [sol1, sol2], int(label))


def boolq_item(passage: str, question: str, label: bool) -> McItem:
    """boolq: "{passage}\\nQuestion: {question}?\\nAnswer:" + " no" | " yes"."""
    return _shared_context(f"{passage}\nQuestion: {question}?\nAnswer:", ["no", "yes"], int(label))


def winogrande_item(sentence: str, option1: str, option2: str, answer: str) -> McItem:
    """winogrande (partial scoring): contexts sentence[:i] + option, where i is the blank;
    the shared continuation " " + sentence[i+1:].strip() is what gets scored."""
    if "_" not in sentence:
        raise DataError(f"WinoGrande sentence has no blank '_': {sentence[:80]!r}")
    if str(answer) not in ("1", "2"):
        raise DataError(f"WinoGrande answer must be '1' or '2', got {answer!r}")
    i = sentence.index("_")
    contexts = (sentence[:i] + option1, sentence[:i] + option2)
    cont = " " + sentence[i + 1 :].strip()
    return McItem(tuple((c, cont) for c in contexts), contexts, int(answer) - 1)


def hellaswag_preprocess(text: str) -> str:
    """lm-eval's hellaswag preprocess: strip, ' [title]' -> '. ', drop [tags], squeeze '  '."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag_item(query: str, endings: Sequence[str], label: int) -> McItem:
    """hellaswag: preprocess(query) + " " + preprocess(ending). query is activity_label + ": "
    + ctx_a + " " + ctx_b.capitalize() for hub rows; the llama.cpp text file gives it whole."""
    choices = [hellaswag_preprocess(e) for e in endings]
    return _shared_context(hellaswag_preprocess(query), choices, int(label))


# ---- local files (shared/data/tasks layout) -------------------------------------------------
def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{n}: not valid JSON ({exc.msg})") from exc
    return rows


def _labels(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _bool_label(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise DataError(f"BoolQ label must be true/false, got {value!r}")


def _local_arc(folder: Path, files: Sequence[str]) -> list[McItem]:
    out = []
    for d in _jsonl(folder / files[0]):
        q = d["question"]
        choices = q["choices"]
        out.append(
            arc_item(
                q["stem"],
                [c["text"] for c in choices],
                [c["label"] for c in choices],
                d["answerKey"],
            )
        )
    return out


def _local_piqa(folder: Path, files: Sequence[str]) -> list[McItem]:
    docs, labels = _jsonl(folder / files[0]), _labels(folder / files[1])
    if len(docs) != len(labels):
        raise DataError(f"piqa: {len(docs)} questions but {len(labels)} labels in {files[1]}")
    return [piqa_item(d["goal"], d["sol1"], d["sol2"], int(y)) for d, y in zip(docs, labels)]  # noqa: B905


def _local_winogrande(folder: Path, files: Sequence[str]) -> list[McItem]:
    docs = _jsonl(folder / files[0])
    labels_file = folder / "dev-labels.lst"
    if any("answer" not in d for d in docs) and labels_file.is_file():
        for d, y in zip(docs, _labels(labels_file), strict=True):
            d.setdefault("answer", y)
    return [winogrande_item(d["sentence"], d["option1"], d["option2"], d["answer"]) for d in docs]


def _local_boolq(folder: Path, files: Sequence[str]) -> list[McItem]:
    return [
        boolq_item(d["passage"], d["question"], _bool_label(d["label"]))
        for d in _jsonl(folder / files[0])
    ]


def _local_hellaswag(folder: Path, files: Sequence[str]) -> list[McItem]:
    """llama.cpp's text extraction: 6 lines per item (query, gold 0-3, four endings)."""
    lines = (folder / files[0]).read_text(encoding="utf-8").splitlines()
    if len(lines) % 6:
        raise DataError(f"hellaswag: {files[0]} has {len(lines)} lines, not a multiple of 6")
    out = []
    for i in range(0, len(lines), 6):
        try:
            gold = int(lines[i + 1])
        except ValueError as exc:
            raise DataError(f"hellaswag: line {i + 2} should be the gold label 0-3") from exc
        out.append(hellaswag_item(lines[i], lines[i + 2 : i + 6], gold))
    return out


# ---- hub rows (the datasets lm-eval names) -> items -----------------------------------------
def _hub_arc(row: dict[str, Any]) -> McItem:
    return arc_item(
        row["question"], row["choices"]["text"], row["choices"]["label"], row["answerKey"]
    )


def _hub_hellaswag(row: dict[str, Any]) -> McItem:
    query = row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return hellaswag_item(query, row["endings"], int(row["label"]))


@dataclass(frozen=True)
class TaskSpec:
    name: str
    label: str
    files: tuple[str, ...]  # under <data_dir>/tasks/<name>/
    local: Callable[[Path, Sequence[str]], list[McItem]]
    hub: tuple[str, str | None, str]  # (dataset path, config name, split) as lm-eval uses
    from_row: Callable[[dict[str, Any]], McItem]
    metrics: tuple[str, ...] = ("acc", "acc_norm")
    local_note: str = ""  # how local files differ from lm-eval's source, if they do


# fmt: off
TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("piqa", "PIQA", ("valid.jsonl", "valid-labels.lst"), _local_piqa,
                 ("baber/piqa", None, "validation"),
                 lambda r: piqa_item(r["goal"], r["sol1"], r["sol2"], int(r["label"]))),
        TaskSpec("hellaswag", "HellaSwag", ("hellaswag_val_full.txt",), _local_hellaswag,
                 ("Rowan/hellaswag", None, "validation"), _hub_hellaswag,
                 local_note="HellaSwag (llama.cpp text extraction): ctx_b is not capitalised, "
                            "so scores are close to lm-eval's but not identical"),
        TaskSpec("arc_easy", "ARC-Easy", ("ARC-Easy-Test.jsonl",), _local_arc,
                 ("allenai/ai2_arc", "ARC-Easy", "test"), _hub_arc),
        TaskSpec("arc_challenge", "ARC-Challenge", ("ARC-Challenge-Test.jsonl",), _local_arc,
                 ("allenai/ai2_arc", "ARC-Challenge", "test"), _hub_arc),
        TaskSpec("winogrande", "WinoGrande", ("dev.jsonl",), _local_winogrande,
                 ("allenai/winogrande", "winogrande_xl", "validation"),
                 lambda r: winogrande_item(r["sentence"], r["option1"], r["option2"], r["answer"]),
                 metrics=("acc",)),
        TaskSpec("boolq", "BoolQ", ("val.jsonl",), _local_boolq,
                 ("aps/super_glue", "boolq", "validation"),
                 lambda r: boolq_item(r["passage"], r["question"], _bool_label(r["label"])),
                 metrics=("acc",)),
    )
}
# fmt: on


@dataclass(frozen=True)
class TaskData:
    items: list[McItem]
    source: str
    note: str


def load_task(name: str, data_dir: str | None, limit: int | None = None) -> TaskData:
    """The first ``limit`` items of a task: local files under data_dir/tasks/<name>/ when
    data_dir is given, else the Hugging Face hub through ``datasets``."""
    spec = TASKS[parse_tasks([name])[0]]
    if data_dir is not None:
        folder = Path(data_dir).expanduser() / "tasks" / spec.name
        missing = [f for f in spec.files if not (folder / f).is_file()]
        if missing:
            raise DataError(
                f"task {spec.name}: missing {', '.join(missing)} under {folder} "
                f"(expected {', '.join(spec.files)})"
            )
        try:
            items = spec.local(folder, spec.files)
        except (KeyError, TypeError) as exc:
            raise DataError(f"task {spec.name}: {folder} has a row without field {exc}") from exc
        source, note = str(folder), spec.local_note
    else:
        items, source, note = _hub_items(spec, limit), "hub:" + spec.hub[0], ""
    if not items:
        raise DataError(f"task {spec.name}: no items in {source}")
    return TaskData(items[:limit] if limit else items, source, note)


def _hub_items(spec: TaskSpec, limit: int | None) -> list[McItem]:
    path, config, split = spec.hub
    try:
        from datasets import load_dataset

        ds = load_dataset(path, config, split=split)
    except Exception as exc:  # offline, renamed dataset, no datasets package ...
        raise DataError(
            f"task {spec.name}: the hub could not provide {path} ({exc}); pass "
            "--data-dir with a tasks/ folder for offline use"
        ) from exc
    rows = ds.select(range(min(limit, len(ds)))) if limit else ds
    return [spec.from_row(dict(r)) for r in rows]
