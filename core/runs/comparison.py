"""Stored runs beside their dense model on one text (the Compare page and ``python -m core
compare``): generations with one decoding rule, per-token NLL differences, logit lens and
per-layer divergence (``core.evaluation.compare``).

Models come from ``compare_model``: the dense model is the pristine copy cached per process; a
prune run's model is rebuilt from what it stored (``core.runs.restore``: seconds), else
loaded from its saved folder, else rebuilt once by re-running its pruning (an older run, or a
SliceGPT run: ``core.runs.rebuild``, about as long as its pruning took, ``rebuild_seconds``).
The last ``MODEL_CACHE`` models and ``RESULT_CACHE`` results per (run, text, decoding) are
kept in the process, so a page that asks again costs nothing.

    cmp = compare_run(store, run_id, "The capital of France is", Decoding())
    cmp.pruned_text, cmp.mean_nll_diff, cmp.layers.kl
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.data import load_corpus
from core.errors import ConfigError, DataError
from core.evaluation.compare import (
    LayerDivergence,
    layer_divergence,
    rotation_back,
    token_nll,
    trace,
    worst_tokens,
)
from core.evaluation.generate import Decoding
from core.evaluation.side_by_side import Side, TokenFn, sides
from core.machine.device import resolve_device
from core.models.load import LoadedModel
from core.names import EVAL, PRUNE, PRUNED_KINDS
from core.progress import ProgressFn, report
from core.runs.attention_maps import token_labels
from core.runs.rebuild import load_saved, model_of_run
from core.runs.resources import get_model
from core.runs.restore import keep_rebuilt, restorable, restore_model
from core.settings.config import DataSpec, ModelSpec, RunConfig
from core.store.record import Run
from core.store.run_store import RunStore

MAX_TEXT_TOKENS = 256  # longer texts are cut here (the lens keeps n_layers × L × d floats)
MODEL_CACHE = 3  # rebuilt models kept per process (a 135M model is ~0.5 GB in float32)
RESULT_CACHE = 64
SLICED_NOTE = (
    "SliceGPT computes in its own rotated, sliced basis: its layer outputs are rotated back to "
    "the dense basis, h·(Q_ℓD)ᵀ, before the relative error is taken, and into its head's basis "
    "for its logit lens (its own folded norm and rotated head)."
)
SAME_BASIS = "The run computes in the dense model's basis."
DENSE = "dense"  # the dense model's name in on_token calls and in HOW
# how a compared model was obtained -> what the page says
HOW = {
    DENSE: "the dense model",
    "stored": "rebuilt from what it stored (keep masks, and changed weights)",
    "saved": "loaded from its saved folder",
    "rebuilt": "rebuilt by re-running its pruning",
}

# The teaching path's prepared prompts (the Compare page): a fact, a short arithmetic, and a
# sentence of the run's evaluation corpus (``corpus_sentence``).
FACT, ARITHMETIC, CORPUS = "A fact", "A short arithmetic", "From the evaluation corpus"
PROMPTS = {
    FACT: "The capital of France is",
    ARITHMETIC: "Question: what is 12 + 7? Answer:",
    CORPUS: None,
}
CORPUS_WORDS = (12, 40)  # a sentence of at least 12 words, cut at 40
FALLBACK_SENTENCE = "The tower is 324 metres tall, about the same height as an 81-storey building."

_MODELS: OrderedDict[tuple, tuple[LoadedModel, str]] = OrderedDict()
_RESULTS: OrderedDict[tuple, Any] = OrderedDict()
_BASES: OrderedDict[tuple, Any] = OrderedDict()  # rotation_back per run model
# One comparison at a time per process: the app serves every session from threads of one
# process, and two sessions asking for the same new model would otherwise build it twice.
_LOCK = threading.RLock()


def _remember(cache: OrderedDict, key: tuple, value: Any, size: int) -> Any:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def dense_spec(run: Run) -> ModelSpec:
    """The run's pristine model on this machine's device, in the dtype the run used."""
    m = run.config.get("model") or {}
    device = str(resolve_device("auto"))
    dtype = m.get("dtype", "float32") if device != "cpu" else "float32"
    return ModelSpec(
        m.get("name", run.record.model or ""),
        device,
        dtype,
        bool(m.get("trust_remote_code", False)),
        m.get("revision"),
    )


def comparable(run: Run) -> None:
    """ConfigError unless the run is a finished dense evaluation, prune or slice run."""
    if run.record.kind not in (EVAL, *PRUNED_KINDS):
        raise ConfigError(
            f"run {run.id} is a {run.record.kind} run; compare takes eval, prune or slice runs"
        )
    if run.record.status != "done":
        raise ConfigError(f"run {run.id} is {run.record.status}, not finished")


def how_built(run: Run) -> str:
    """How ``compare_model`` will obtain the run's model, without building it."""
    if run.record.kind == EVAL:
        return DENSE
    if run.record.kind == PRUNE and restorable(run):
        return "stored"
    saved = run.metrics.get("saved_to")
    return "saved" if saved and Path(saved).is_dir() else "rebuilt"


def rebuild_seconds(run: Run) -> float | None:
    """Seconds a re-run of the pruning is expected to take (what it took when the run ran),
    or None when the model comes from what the run stored."""
    if how_built(run) != "rebuilt":
        return None
    return float(run.metrics.get("prune_seconds") or 0.0) or None


def corpus_sentence(run: Run) -> str:
    """The first line of the run's evaluation corpus with at least ``CORPUS_WORDS[0]`` words
    (cut at ``CORPUS_WORDS[1]``); a fixed sentence when the corpus cannot be read."""
    data = (run.config.get("eval") or {}).get("data") or {}
    try:
        corpus = load_corpus(DataSpec(**data))
    except (DataError, ConfigError, TypeError):
        return FALLBACK_SENTENCE
    lo, hi = CORPUS_WORDS
    for doc in corpus.documents[:2000]:
        for line in doc.splitlines():
            words = line.split()
            if len(words) >= lo and not line.lstrip().startswith(("=", "#", ">>>")):
                return " ".join(words[:hi])
    return FALLBACK_SENTENCE


def prompt_text(run: Run, name: str) -> str:
    """A prepared prompt by its name (``PROMPTS``)."""
    if name not in PROMPTS:
        raise ConfigError(f"unknown prepared prompt {name!r}; use one of {list(PROMPTS)}")
    return PROMPTS[name] or corpus_sentence(run)


def _stamp(run: Run) -> tuple:
    return (run.id, run.record.finished or 0.0)


def model_cached(run: Run) -> bool:
    """Whether the run's model is already built in this process."""
    return _stamp(run) in _MODELS


def tokenizer_of(run: Run):
    """The tokenizer of the run's model (its dense model's)."""
    return get_model(dense_spec(run), fresh=False).tokenizer


def compare_model(store: RunStore, run: Run, progress: ProgressFn | None = None):
    """(model, how) of a run; cached per process (never mutate the model)."""
    comparable(run)
    key = _stamp(run)
    with _LOCK:
        if key in _MODELS:
            _MODELS.move_to_end(key)
            return _MODELS[key]
        return _build(store, run, key, progress)


def _build(store: RunStore, run: Run, key: tuple, progress: ProgressFn | None):
    spec, how = dense_spec(run), how_built(run)
    if how == DENSE:
        return get_model(spec, fresh=False), how  # the pristine copy is cached by resources
    report(progress, "load", 0, 1, f"run {run.id[:8]}: {HOW[how]}")
    if how == "stored":
        lm = restore_model(run, spec)
    elif how == "saved":
        lm = load_saved(RunConfig.from_dict(run.config), run.metrics["saved_to"])
    else:
        src = RunConfig.from_dict(run.config)
        src = dataclasses.replace(src, model=dataclasses.replace(src.model, **_device(spec)))
        lm, how = model_of_run(src, store, run.id, progress)
        if run.record.kind == PRUNE:  # stored once: the next process restores it in seconds
            keep_rebuilt(run, lm)
    lm.model.eval()
    return _remember(_MODELS, key, (lm, how), MODEL_CACHE)


def _device(spec: ModelSpec) -> dict[str, str]:
    return {"device": spec.device, "dtype": spec.dtype}


def text_ids(lm: LoadedModel, text: str) -> list[int]:
    """Token ids of a text (the tokenizer's own special tokens; cut at ``MAX_TEXT_TOKENS``)."""
    if not text.strip():
        raise ConfigError("type a prompt first")
    ids = lm.tokenizer(text)["input_ids"][:MAX_TEXT_TOKENS]
    if len(ids) < 2:
        raise ConfigError("the text needs at least two tokens")
    return list(ids)


def dense_key(run: Run, text: str, dec: Decoding) -> tuple:
    """The cache key of the dense model's side on a text (shared by its runs)."""
    return (DENSE, dense_spec(run), text, dec)


@dataclass(frozen=True)
class RunComparison:
    """A run beside its dense model on one text."""

    run_id: str
    how: str
    tokens: list[str]  # labels of the text's tokens
    dense: Side
    pruned: Side
    layers: LayerDivergence
    note: str  # what the per-layer view measured (SliceGPT: the basis, stated)

    @property
    def nll_diff(self) -> np.ndarray:
        """Per predicted token (L−1,): pruned NLL − dense NLL, nats."""
        return self.pruned.nll - self.dense.nll

    @property
    def mean_nll_diff(self) -> float:
        return float(self.nll_diff.mean())

    def worst(self) -> list[dict]:
        return worst_tokens(self.nll_diff, self.tokens)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the CLI's --json)."""
        return {
            "run_id": self.run_id,
            "model_from": self.how,
            "dense_continuation": self.dense.text,
            "continuation": self.pruned.text,
            "dense_new_ids": self.dense.new_ids,
            "new_ids": self.pruned.new_ids,
            "tokens": self.tokens,
            "dense_nll": self.dense.nll.tolist(),
            "nll": self.pruned.nll.tolist(),
            "mean_nll_diff": self.mean_nll_diff,
            "worst_tokens": self.worst(),
            "layer_kl": self.layers.kl,
            "layer_rel_error": self.layers.rel_error,
            "note": self.note,
        }


def compare_run(
    store: RunStore,
    run_id: str,
    text: str,
    dec: Decoding | None = None,
    on_token: TokenFn | None = None,
    progress: ProgressFn | None = None,
) -> RunComparison:
    """A stored run beside its dense model on ``text``; cached per (run, text, decoding)."""
    dec = dec or Decoding()
    run = store.load(run_id)
    key = (*_stamp(run), text, dec)
    with _LOCK:
        if key in _RESULTS:
            _RESULTS.move_to_end(key)
            return _RESULTS[key]
        comparable(run)
        return _remember(
            _RESULTS, key, _compare(store, run, text, dec, on_token, progress), RESULT_CACHE
        )


def _compare(store: RunStore, run: Run, text: str, dec: Decoding, on_token, progress):
    lm, how = compare_model(store, run, progress)
    dense_lm = get_model(dense_spec(run), fresh=False)
    ids = text_ids(dense_lm, text)
    key = dense_key(run, text, dec)
    if _stamp(run) not in _BASES:
        _remember(_BASES, _stamp(run), rotation_back(dense_lm, lm), MODEL_CACHE)
    # the dense side is computed once per text and shared by the runs compared on it
    found, dense = compare_models(
        dense_lm, lm, ids, dec, run.id, how, _BASES[_stamp(run)], on_token, _RESULTS.get(key)
    )
    _remember(_RESULTS, key, dense, RESULT_CACHE)
    return found


def compare_models(
    dense_lm: LoadedModel, lm: LoadedModel, ids: list[int], dec: Decoding, name: str, how: str,
    basis: list[torch.Tensor | None] | None, on_token: TokenFn | None = None,
    dense: Side | None = None,
) -> tuple[RunComparison, Side]:  # fmt: skip
    """A model beside its dense model on token ids: (the comparison, the dense side, its lens
    dropped, to reuse). ``basis``: ``rotation_back`` of a sliced model, None when both share
    the dense basis; ``dense``: the dense side already computed on these ids and decoding.
    When the dense side is new, dense and pruned decode at once
    (core.evaluation.side_by_side); ``on_token`` hears ``name``'s tokens and ``DENSE``'s."""
    models = {} if dense is not None else {DENSE: dense_lm}
    if lm is not dense_lm:  # a dense evaluation run's model is the dense model itself
        models[name] = lm
    # each side reads its own logit lens in its thread (a sliced model's is read here, in its
    # head's basis); the lenses are dropped before a side is kept (47 MB each at 135M)
    own_lens = [DENSE] if basis is not None else [DENSE, name]
    done = sides(models, ids, dec, on_token, lens=own_lens)
    lens = {who: s.lens for who, s in done.items()}
    done = {who: dataclasses.replace(s, lens=None) for who, s in done.items()}
    dense = done.get(DENSE, dense)
    pruned = done.get(name, dense)
    dense_lens = lens.get(DENSE)
    pruned_lens = lens.get(name, dense_lens if lm is dense_lm else None)
    layers = layer_divergence(
        dense_lm, dense.trace, lm, pruned.trace, basis, dense_lens, pruned_lens
    )
    note = SLICED_NOTE if basis is not None else SAME_BASIS
    tokens = token_labels(lm.tokenizer, ids)
    return RunComparison(name, how, tokens, dense, pruned, layers, note), dense


def window_nll_diff(store: RunStore, run_id: str, windows: torch.Tensor) -> np.ndarray:
    """Per-token NLL difference (pruned − dense) over evaluation windows (n, L): (n, L−1)."""
    run = store.load(run_id)
    lm, _ = compare_model(store, run)
    dense_lm = get_model(dense_spec(run), fresh=False)
    rows = []
    for w in windows:
        rows.append(token_nll(trace(lm, w).logits, w) - token_nll(trace(dense_lm, w).logits, w))
    return np.stack(rows)
