"""The data arguments of the Python API, typed once at its edge: a corpus name becomes the
frozen config the CLI builds for the same flag (``core.requests.request.data_spec``: the
same default data folder, the same absolute file paths), a config passes as it is, and token
ids (a tensor) are used as they are."""

from __future__ import annotations

import torch

from core.api.memory import geometry_of
from core.data import eval_windows, load_corpus
from core.errors import ConfigError
from core.models.load import LoadedModel
from core.requests.request import data_spec
from core.runs.plan import check_seqlen
from core.runs.resources import get_calib_windows
from core.settings.config import CalibConfig, EvalConfig

Data = str | EvalConfig | torch.Tensor  # a corpus name, an evaluation config, or windows (n, L)
Calib = str | CalibConfig | torch.Tensor  # a corpus name, a calibration config, or ids (N, L)


def eval_data(
    name: str = "wikitext2",
    seqlen: int = 512,
    max_windows: int | None = None,
    *,
    split: str | None = None,
    data_dir: str | None = None,
    batch_size: int = 4,
) -> EvalConfig:
    """Evaluation windows as ``--eval NAME --seqlen L --max-windows N`` asks for them: the
    first ``max_windows`` non-overlapping windows of ``seqlen`` tokens of the corpus (its test
    split; C4's validation), ``batch_size`` at a time."""
    return EvalConfig(data_spec(name, split, data_dir), seqlen, max_windows, batch_size)


def calib_config(
    calib: Calib, nsamples: int, seqlen: int, seed: int, data_dir: str | None
) -> CalibConfig | None:
    """The calibration config of a corpus name (its train split, ``nsamples`` random windows of
    ``seqlen`` tokens drawn with ``seed``) or the config given; None for token ids."""
    if isinstance(calib, torch.Tensor):
        return None
    if isinstance(calib, CalibConfig):
        return calib
    if not isinstance(calib, str):
        raise ConfigError(
            f"calib is a corpus name, a CalibConfig or token ids, got {type(calib).__name__}"
        )
    return CalibConfig(data_spec(calib, None, data_dir, "calib"), nsamples, seqlen, seed)


def as_eval(data: Data) -> EvalConfig | None:
    """The evaluation config of ``data`` (a name: ``eval_data``'s defaults); None for windows."""
    if isinstance(data, torch.Tensor):
        return None
    if isinstance(data, EvalConfig):
        return data
    if not isinstance(data, str):
        raise ConfigError(
            f"data is a corpus name, an EvalConfig or windows, got {type(data).__name__}"
        )
    return eval_data(data)


def _ids(ids: torch.Tensor, what: str) -> torch.Tensor:
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 2 or ids.is_floating_point():
        raise ConfigError(f"{what} must be integer token ids shaped (n, L) with L >= 2")
    return ids.long().cpu()


def windows(lm: LoadedModel, data: Data) -> torch.Tensor:
    """Evaluation windows (n, L) of ``data`` in the model's tokenizer, checked against its
    context."""
    cfg = as_eval(data)
    if cfg is None:
        ids = _ids(data, "evaluation windows")  # type: ignore[arg-type]
    else:
        ids = eval_windows(lm.tokenizer, load_corpus(cfg.data), cfg.seqlen, cfg.max_windows)
    check_seqlen(geometry_of(lm.model), ids.shape[1])
    return ids


def calib_ids(lm: LoadedModel, calib: Calib, cfg: CalibConfig | None) -> torch.Tensor:
    """Calibration ids (N, L): drawn as a run draws them (``cfg``), or the ids given."""
    if cfg is None:
        return _ids(calib, "calibration ids")  # type: ignore[arg-type]
    return get_calib_windows(lm, cfg)[0]
