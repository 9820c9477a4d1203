"""Corpora, the evaluation token stream and the calibration samplers.

Sources, in order: a local folder laid out like ``shared/data`` (``--data-dir``), Hugging
Face ``datasets`` when reachable, and the offline corpus that always works: the Python
Language Reference shipped in CPython's stdlib (``pydoc_data.topics``). Perplexities on the
offline corpus are NOT comparable with published WikiText-2 / C4 figures; every result
carries ``comparable=False`` for it.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import DataError
from core.settings.config import DataSpec

log = logging.getLogger(__name__)

# Files of the shared/data layout, relative to the data dir.
LOCAL_FILES: dict[tuple[str, str], tuple[str, ...]] = {
    ("wikitext2", "test"): (
        "wikitext-2-raw/wikitext-2-raw-v1.test.jsonl",
        "wikitext-2-raw/wiki.test.raw",
    ),
    ("wikitext2", "train"): ("wikitext-2-raw/wiki.train.raw.head-nonblank-1MB.txt",),
    ("c4", "validation"): ("c4/c4-validation.00000-of-00008.head1025.jsonl",),
    ("c4", "test"): ("c4/c4-validation.00000-of-00008.head1025.jsonl",),
    ("c4", "train"): ("c4/c4-train.00000-of-01024.head1041.jsonl",),
}
C4_EVAL_DOCS = 1100  # SparseGPT/Wanda c4 eval: " ".join(first 1100 validation docs)
C4_EVAL_WINDOWS = 256  # ... truncated to 256 windows
TEXT_SAMPLE_BYTES = 1 << 20  # how much of a file:<path> corpus is checked for being text
# Share of undecodable or control characters a text may hold: Latin-1 prose read as UTF-8
# loses its accented letters (~3-12% of characters), random bytes ~60%.
MAX_NON_TEXT = 0.25


@dataclass(frozen=True)
class Corpus:
    """Documents of one split plus how they must be joined for the evaluation stream."""

    name: str
    split: str
    documents: tuple[str, ...]
    joiner: str
    source: str  # where the text came from, for the run record
    comparable: bool  # True when the numbers are comparable with published tables

    @property
    def text(self) -> str:
        return self.joiner.join(self.documents)


def default_data_dir() -> str | None:
    """$PRUNESCOPE_DATA_DIR, else ../shared/data next to the checkout when present."""
    env = os.environ.get("PRUNESCOPE_DATA_DIR")
    if env:
        return env
    guess = Path(__file__).resolve().parents[2] / "shared" / "data"
    return str(guess) if guess.is_dir() else None


def load_corpus(spec: DataSpec) -> Corpus:
    """Resolve a DataSpec to text, or raise DataError saying what is missing."""
    if spec.dataset == "pydoc":
        return _pydoc_corpus(spec.split)
    if spec.dataset.startswith("file:"):
        return _file_corpus(Path(spec.dataset.removeprefix("file:")).expanduser(), spec.split)
    if spec.data_dir is not None:
        return _local_corpus(spec)
    return _hub_corpus(spec)


def _read_docs(path: Path) -> list[str]:
    """jsonl: the 'text' field of each row; txt/raw: one document per line (HF wikitext rows)."""
    if path.suffix == ".jsonl":
        docs = []
        with path.open(encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        docs.append(json.loads(line)["text"])
                    except (json.JSONDecodeError, KeyError, TypeError) as exc:
                        raise DataError(
                            f"{path}:{n}: not a JSON object with a 'text' field"
                        ) from exc
        return docs
    # WikiText raw: one HF row per line, blank lines become empty rows (keep the newline).
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line if line.strip() else "" for line in text.splitlines(keepends=True)]


def _local_corpus(spec: DataSpec) -> Corpus:
    root = Path(spec.data_dir).expanduser()  # type: ignore[arg-type]
    if not root.is_dir():
        raise DataError(f"data dir {root} does not exist (expected the shared/data layout)")
    candidates = LOCAL_FILES.get((spec.dataset, spec.split))
    if candidates is None:
        raise DataError(f"no local file is known for {spec.dataset} split {spec.split!r}")
    for rel in candidates:
        path = root / rel
        if path.is_file():
            docs = _read_docs(path)
            if spec.dataset == "c4" and spec.split != "train":
                docs = docs[:C4_EVAL_DOCS]
            joiner = "\n\n" if spec.dataset == "wikitext2" else " "
            subset = "wiki.train" in rel or "head" in rel
            src = f"{path}" + (" (head subset of the split)" if subset else "")
            return Corpus(spec.dataset, spec.split, tuple(docs), joiner, src, comparable=True)
    raise DataError(f"{spec.dataset}/{spec.split}: none of {list(candidates)} found under {root}")


def _hub_corpus(spec: DataSpec) -> Corpus:
    try:
        import datasets

        if spec.dataset == "wikitext2":
            ds = datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=spec.split)
            return Corpus(
                "wikitext2", spec.split, tuple(ds["text"]), "\n\n", "hf:wikitext-2-raw-v1", True
            )
        split = "train" if spec.split == "train" else "validation"
        shard = (
            "en/c4-train.00000-of-01024.json.gz"
            if split == "train"
            else "en/c4-validation.00000-of-00008.json.gz"
        )
        ds = datasets.load_dataset("allenai/c4", data_files={split: shard}, split=split)
        docs = ds["text"] if split == "train" else ds["text"][:C4_EVAL_DOCS]
        return Corpus("c4", spec.split, tuple(docs), " ", f"hf:allenai/c4 {shard}", True)
    except Exception as exc:  # offline, hub change, missing package: all the same to the user
        raise DataError(
            f"could not load {spec.dataset} ({spec.split}) from the Hugging Face Hub "
            f"({type(exc).__name__}); pass --data-dir with a local copy, a file:<path>, "
            "or use the offline corpus 'pydoc'"
        ) from exc


def _pydoc_corpus(split: str) -> Corpus:
    from pydoc_data.topics import topics

    # Several keys share one section: deduplicate, then hold out every 5th for evaluation.
    sections = list(dict.fromkeys(topics[k] for k in sorted(topics)))
    docs = tuple(t for i, t in enumerate(sections) if (i % 5 == 0) == (split != "train"))
    return Corpus(
        "pydoc",
        split,
        docs,
        "\n\n",
        "stdlib pydoc_data.topics (offline; not comparable with published WikiText-2/C4 figures)",
        comparable=False,
    )


def check_text_file(path: str | Path) -> None:
    """DataError unless ``path`` is an existing text file. The rule, on its first MiB: no
    NUL byte, and at most ``MAX_NON_TEXT`` of its characters undecodable as UTF-8 or control
    characters other than whitespace. A text in another 8-bit encoding (accented letters
    here and there) passes; an image, archive, weights file or random bytes do not: a
    model would otherwise be 'evaluated' on byte noise and the run stored as if it meant
    something."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(f"text file {path} does not exist")
    try:
        with path.open("rb") as fh:
            head = fh.read(TEXT_SAMPLE_BYTES)
    except OSError as exc:
        raise DataError(f"text file {path} cannot be read: {exc}") from exc
    text = head.decode("utf-8", errors="replace")
    if len(head) == TEXT_SAMPLE_BYTES:  # a character cut at the sample's end is not noise
        text = text[:-4]
    bad = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\n\r\f\v"))
    if b"\x00" in head or bad > MAX_NON_TEXT * max(1, len(text)):
        raise DataError(
            f"{path} is not a text file ({bad} of its first {len(text)} characters are not "
            "text); a corpus must be UTF-8 text (.txt, or .jsonl with a 'text' field)"
        )


def _file_corpus(path: Path, split: str) -> Corpus:
    check_text_file(path)
    if path.suffix == ".jsonl":
        docs = [d for d in _read_docs(path) if d.strip()]
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
        docs = [p for p in text.split("\n\n") if p.strip()]
    if not docs:
        raise DataError(f"text file {path} is empty")
    return Corpus(f"file:{path.name}", split, tuple(docs), "\n\n", str(path), comparable=False)


# ---- token streams ------------------------------------------------------------------------
def tokenize(tokenizer, text: str) -> torch.Tensor:
    """Token ids (1-D int64) of a long text, without special tokens, tokenized once."""
    ids = tokenizer(text, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def eval_windows(
    tokenizer, corpus: Corpus, seqlen: int, max_windows: int | None = None
) -> torch.Tensor:
    """Reference evaluation stream (papers.md §1): join, tokenize once, cut into
    non-overlapping windows of ``seqlen`` and drop the remainder. Returns (n, seqlen)."""
    ids = tokenize(tokenizer, corpus.text)
    n = ids.numel() // seqlen
    if corpus.name == "c4":
        n = min(n, C4_EVAL_WINDOWS)
    if max_windows is not None:
        n = min(n, max_windows)
    if n == 0:
        raise DataError(
            f"{corpus.name} has {ids.numel()} tokens, fewer than one window of {seqlen}"
        )
    return ids[: n * seqlen].view(n, seqlen)


def calibration_windows(
    tokenizer, corpus: Corpus, nsamples: int, seqlen: int, seed: int
) -> torch.Tensor:
    """Calibration sample (nsamples, seqlen) as Wanda/SparseGPT draw it.

    Document corpora (C4): pick a random document longer than ``seqlen`` tokens, then a
    random window inside it, with ``random.Random(seed)``. Stream corpora (WikiText-2 lines,
    pydoc, files): random windows of the joined token stream, same seed rule.
    """
    rng = random.Random(seed)
    if corpus.name == "c4":
        long_docs = [
            i for i, d in enumerate(corpus.documents) if len(d) > seqlen
        ]  # chars >= tokens
        out = []
        for _ in range(20 * nsamples + 100):
            if len(out) == nsamples or not long_docs:
                break
            ids = tokenize(tokenizer, corpus.documents[rng.choice(long_docs)])
            if ids.numel() <= seqlen:
                continue
            start = rng.randint(0, ids.numel() - seqlen - 1)
            out.append(ids[start : start + seqlen])
        if len(out) == nsamples:
            return torch.stack(out)
        log.warning(
            "too few C4 documents longer than %d tokens; sampling the joined stream", seqlen
        )
    ids = tokenize(tokenizer, corpus.text)
    if ids.numel() <= seqlen:
        raise DataError(f"{corpus.name} has {ids.numel()} tokens, too few for windows of {seqlen}")
    starts = [rng.randint(0, ids.numel() - seqlen - 1) for _ in range(nsamples)]
    return torch.stack([ids[s : s + seqlen] for s in starts])


def calibration_documents(
    tokenizer, corpus: Corpus, nsamples: int, seqlen: int, seed: int
) -> torch.Tensor:
    """Calibration sample (nsamples, seqlen) of whole documents, the rule of SliceGPT's
    reference code (TransformerCompression ``prepare_dataloader``, ``varied_seqlen=False``).

    The non-empty documents form a pool in corpus order. With a torch generator seeded by
    ``seed``: pick a uniformly random position in the pool; take the document there and the
    ones after it, each tokenized on its own and joined by "\\n\\n" (the separator tokenized
    with the document after it), until there are at least ``seqlen`` tokens or the pool ends;
    remove the documents taken from the pool; keep the first ``seqlen`` tokens when there are
    enough, else drop the draw. Repeat until ``nsamples`` samples are drawn, so every sample
    starts at a document's start and no document is used twice. DataError when the pool
    runs out first. The same seed draws the same positions as the reference's
    ``torch.manual_seed(seed)``; unlike it, the ids are kept as tokenized (no special tokens,
    as every sampler here) and in the order drawn (the reference shuffles them, which changes
    no calibration statistic).
    """
    gen = torch.Generator().manual_seed(seed)
    pool = [d for d in corpus.documents if d]
    out: list[torch.Tensor] = []
    while len(out) < nsamples and pool:
        start = int(torch.randint(0, len(pool), (1,), generator=gen))
        end, ids = start, []
        while len(ids) < seqlen and end < len(pool):
            piece = ("\n\n" if ids else "") + pool[end]
            ids += tokenizer(piece, add_special_tokens=False)["input_ids"]
            end += 1
        del pool[start:end]
        if len(ids) >= seqlen:
            out.append(torch.tensor(ids[:seqlen], dtype=torch.long))
    if len(out) < nsamples:
        raise DataError(
            f"{corpus.name} ({corpus.split}) has documents for only {len(out)} whole-document "
            f"samples of {seqlen} tokens, fewer than {nsamples}; use fewer or shorter "
            "samples, a larger corpus, or --calib-sampler window"
        )
    return torch.stack(out)
