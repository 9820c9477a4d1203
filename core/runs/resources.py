"""What runs load: models (a pristine copy cached once per process, copied per job) and
calibration / evaluation windows (cached per process)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from core.analysis.effdim import windows_needed
from core.data import calibration_documents, calibration_windows, eval_windows, load_corpus
from core.errors import ConfigError
from core.machine.device import dtype_name, resolve_device, resolve_dtype
from core.models.load import LoadedModel, load_model
from core.names import DOCUMENTS
from core.planning.fit import place
from core.settings.config import CalibConfig, EvalConfig, ModelSpec

_PRISTINE: dict[tuple, LoadedModel] = {}  # at most one entry: a new model evicts the old one
_WINDOW_CACHE: dict[tuple, tuple[torch.Tensor, dict[str, Any]]] = {}


def resolve_model_spec(
    spec: ModelSpec,
    device: str | None = None,
    calib: CalibConfig | None = None,
    eval_cfg: EvalConfig | None = None,
) -> ModelSpec:
    """Replace 'auto' device/dtype/stream by what they resolve to.

    device ('cpu' | 'cuda'): where remote workers run (a sweep on Ray), used for 'auto'
    without requiring this (driver) machine to have it; None: resolve on this machine, which
    checks that it has the device. stream: decided by ``core.planning.fit`` from the model's
    weight bytes, the run's planned buffers (``calib``, ``eval_cfg``) and this machine's free
    memory, which also refuses (ConfigError with the figures) a path that cannot fit; remote
    workers' memory is not this machine's: 'auto' runs in memory there, unchecked.
    """
    if device is None:
        dev = resolve_device(spec.device)
    else:
        try:
            dev = torch.device(device if spec.device == "auto" else spec.device)
        except RuntimeError as exc:
            raise ConfigError(
                f"unknown device {spec.device!r} (use auto, cpu, cuda, cuda:N)"
            ) from exc
    dtype = resolve_dtype(spec.dtype, dev)
    spec = dataclasses.replace(spec, device=str(dev), dtype=dtype_name(dtype))
    if device is not None:
        return dataclasses.replace(spec, stream=spec.stream is True)
    return place(spec, calib, eval_cfg)


def _load(key: tuple) -> LoadedModel:
    name, dtype, trust_remote_code, revision = key
    cpu = torch.device("cpu")
    return load_model(name, "cpu", resolve_dtype(dtype, cpu), trust_remote_code, revision)


def _key(spec: ModelSpec) -> tuple:
    return (spec.name, spec.dtype, spec.trust_remote_code, spec.revision)


def get_model(spec: ModelSpec, fresh: bool = True) -> LoadedModel:
    """The model of a resolved spec on its device.

    fresh=False returns the pristine copy cached once per process (never mutate it);
    fresh=True returns a private model: a deep copy of the cached one when a long-lived
    process (the app) holds it, else a direct load, so a one-shot CLI process keeps a single
    copy of the weights in memory.
    """
    key = _key(spec)
    if not fresh:
        if key not in _PRISTINE:
            _PRISTINE.clear()
            _PRISTINE[key] = _load(key)
        lm = _PRISTINE[key]
    else:
        lm = copy.deepcopy(_PRISTINE[key]) if key in _PRISTINE else _load(key)
    lm.model.to(spec.device)
    return lm


@contextmanager
def holding(spec: ModelSpec, lm: LoadedModel) -> Iterator[None]:
    """Within the block, ``lm`` (a model already in memory, e.g. a notebook's) is the pristine
    copy of the resolved ``spec``: runs of that spec copy it instead of loading it by name."""
    key = _key(spec)
    before = dict(_PRISTINE)
    _PRISTINE.clear()
    _PRISTINE[key] = lm
    try:
        yield
    finally:
        _PRISTINE.clear()
        _PRISTINE.update(before)


def get_eval_windows(lm: LoadedModel, cfg: EvalConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """Evaluation windows (n, L) and a description of the corpus, cached per process."""
    key = (lm.name, cfg.data, cfg.seqlen, cfg.max_windows)
    if key not in _WINDOW_CACHE:
        corpus = load_corpus(cfg.data)
        windows = eval_windows(lm.tokenizer, corpus, cfg.seqlen, cfg.max_windows)
        info = {
            "dataset": corpus.name,
            "split": corpus.split,
            "source": corpus.source,
            "comparable": corpus.comparable,
        }
        _WINDOW_CACHE[key] = (windows, info)
    return _WINDOW_CACHE[key]


def get_calib_windows(lm: LoadedModel, cfg: CalibConfig) -> tuple[torch.Tensor, dict[str, Any]]:
    """Calibration sequences (nsamples, seqlen) drawn by the config's sampler: windows as
    Wanda/SparseGPT draw them, or whole documents as SliceGPT's reference does."""
    corpus = load_corpus(cfg.data)
    draw = calibration_documents if cfg.sampler == DOCUMENTS else calibration_windows
    ids = draw(lm.tokenizer, corpus, cfg.nsamples, cfg.seqlen, cfg.seed)
    return ids, {"dataset": corpus.name, "split": corpus.split, "source": corpus.source}


def effdim_windows(windows: torch.Tensor, width: int) -> torch.Tensor:
    """The first evaluation windows that hold the effective dimension's 10·d tokens (all of
    them when there are fewer; the run then records ``enough_tokens = False``)."""
    return windows[: windows_needed(width, windows.shape[1])]
