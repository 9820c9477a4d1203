"""SliceGPT's options (the method's form and ``--option`` flags) and the report of one slicing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from core.errors import ConfigError
from core.names import PARAMS_REMOVED
from core.settings.field import option

ORIENTATIONS = ("pca", "random")


@dataclass(frozen=True)
class SliceOptions:
    """round_to: d′ multiple (reference 8); damp: PCA damping as a fraction of mean(diag C);
    slice_head: also slice the final norm/lm_head input; orientation: "pca" or "random"
    (a seeded random basis inside the kept subspace); seed: for "random"; batch_size:
    calibration sequences per forward; center_embeddings: subtract each embedding row's mean
    first, as the reference ``fuse_modules`` does (changes an RMSNorm model's function)."""

    round_to: int = option(
        8, "Round d′ to a multiple of", "kept width rounding (reference 8)", (1, 512)
    )
    damp: float = option(
        0.01, "PCA damping", "fraction of the covariance's mean diagonal", (0.0, 1.0)
    )
    slice_head: bool = option(
        False, "Slice the output head too", "the final norm and LM head input"
    )
    orientation: str = option(
        "pca",
        "Kept directions",
        "'pca': the principal directions; 'random': a seeded random basis (a control)",
        ORIENTATIONS,
    )
    seed: int = option(
        42, "Seed of the random basis", "used with 'random' directions", (0, 2**31 - 1), expert=True
    )
    batch_size: int = option(
        8, "Sequences per forward", "calibration batch", (1, 1024), expert=True
    )
    center_embeddings: bool = option(
        False,
        "Center the embeddings first",
        "as the reference does (changes an RMSNorm model's function)",
        expert=True,
    )

    def __post_init__(self) -> None:
        if not isinstance(self.center_embeddings, bool):
            raise ConfigError(
                f"center_embeddings must be true or false, got {self.center_embeddings!r}"
            )
        if not isinstance(self.round_to, int) or self.round_to < 1:
            raise ConfigError(f"round_to must be a positive integer, got {self.round_to!r}")
        if not self.damp >= 0.0:
            raise ConfigError(f"damp must be >= 0, got {self.damp!r}")
        if self.orientation not in ORIENTATIONS:
            raise ConfigError(
                f"orientation must be one of {ORIENTATIONS}, got {self.orientation!r}"
            )
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size!r}")


@dataclass
class SliceReport:
    """What ``slice_model`` did.

    n_params_*: every parameter (shortcut matrices and post-norm writers included; a tied
    head counts once when dense and again once untied, so a tied-embedding model can grow
    at small s);
    n_layer_params_*: the decoder layers only.
    rows: one per residual boundary (embed, then mid/out of every layer): kept width and
    the fraction of calibration energy Σλ[:kept]/Σλ it keeps. spectra: (n_boundaries, d)
    float64 eigenvalues of C, descending, in the order of ``rows``.
    """

    sparsity: float
    d: int
    d_sliced: int
    n_params_dense: int
    n_params_sliced: int
    n_layer_params_dense: int
    n_layer_params_sliced: int
    calib_tokens: int  # calibration tokens the PCAs saw
    seconds: float
    options: SliceOptions
    rows: list[dict[str, Any]]
    spectra: torch.Tensor

    @property
    def s_eff(self) -> float:
        return 1.0 - self.d_sliced / self.d

    def summary(self) -> dict[str, Any]:
        """Flat JSON-able scalars for run records and tables: every field but the per-boundary
        ``rows`` and ``spectra``, the options as a dict, and the derived s_eff, param_ratio."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PER_BOUNDARY}
        return {
            **out,
            "options": asdict(self.options),
            "s_eff": self.s_eff,
            "param_ratio": self.n_params_sliced / self.n_params_dense,
            PARAMS_REMOVED: 1.0 - self.n_layer_params_sliced / self.n_layer_params_dense,
        }


_PER_BOUNDARY = ("rows", "spectra")
