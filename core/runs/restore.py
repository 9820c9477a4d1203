"""What a prune run keeps to rebuild its model in seconds, and the rebuild from it.

Re-running a method (``core.runs.rebuild``) costs what the pruning cost: calibration forwards,
Gram matrices, SparseGPT's solves. But a pruned model is the dense one with some weights
zeroed (and, for methods that update the kept weights, those weights changed), so the run
stores, per targeted linear of every layer, under the ``A_REBUILD`` arrays:

- ``layer{i}.{role}.keep``: the keep mask W ≠ 0, bit-packed (``np.packbits``, 1 bit a weight);
- ``layer{i}.{role}.values``: the kept weights, only for methods that update them
  (``Method.updates_weights``), in the model's dtype when the run's kept weights number at most
  ``EXACT_VALUES`` (exact), else in float16 (the rebuilt model then matches the run's to
  half precision), and only up to ``MAX_VALUES`` kept weights (beyond, the run is rebuilt by
  re-running its pruning once).

A score-and-mask method's model is rebuilt exactly: the pristine weights times the mask. A
run stored before these arrays existed gets them the first time its model is rebuilt by
re-running its pruning (``keep_rebuilt``).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from safetensors.torch import save_file

from core.errors import StoreError
from core.methods import get_method
from core.models.load import LoadedModel
from core.names import A_REBUILD, resolve_roles
from core.runs.resources import get_model
from core.settings.config import ModelSpec
from core.store.record import Run

EXACT_VALUES = 8_000_000  # kept weights stored in the model's own dtype up to this many
MAX_VALUES = 64_000_000  # beyond this many kept weights, values are not stored (128 MB f16)
KEEP, VALUES = "keep", "values"


def _linears(lm: LoadedModel, roles: tuple[str, ...]):
    """(layer index, role, linear) of every targeted linear, in layer order."""
    for i, layer in enumerate(lm.adapter.layers):
        for role, lin in lm.adapter.linears(layer, roles).items():
            yield i, role, lin


def rebuild_arrays(lm: LoadedModel, targets: str, updates_weights: bool) -> dict[str, torch.Tensor]:
    """The ``A_REBUILD`` arrays of a pruned model in memory (see the module docstring)."""
    roles = resolve_roles(targets)
    out: dict[str, torch.Tensor] = {}
    kept = 0
    for i, role, lin in _linears(lm, roles):
        keep = (lin.weight.detach() != 0).cpu()
        kept += int(keep.sum())
        out[f"layer{i}.{role}.{KEEP}"] = torch.from_numpy(np.packbits(keep.flatten().numpy()))
    if not updates_weights or kept > MAX_VALUES:
        return out
    for i, role, lin in _linears(lm, roles):
        w = lin.weight.detach().cpu()
        dtype = w.dtype if kept <= EXACT_VALUES else torch.float16
        out[f"layer{i}.{role}.{VALUES}"] = w[w != 0].to(dtype).contiguous()
    return out


def restorable(run: Run) -> bool:
    """Whether the run stored what ``restore_model`` needs (a method that updates weights
    also needs the values)."""
    keys = run.array_keys(A_REBUILD)
    if not keys:
        return False
    has_values = any(k.endswith(VALUES) for k in keys)
    return has_values or not _updates_weights(run)


def _updates_weights(run: Run) -> bool:
    prune = run.config.get("prune") or {}
    return bool(getattr(get_method(prune.get("method", "")), "updates_weights", True))


def keep_rebuilt(run: Run, lm: LoadedModel) -> bool:
    """After an older prune run's model was rebuilt by re-running its pruning, add its
    ``A_REBUILD`` arrays to the run's folder (written aside, then renamed into place), so
    the next process restores it in seconds. False when the folder cannot be written."""
    prune = run.config.get("prune") or {}
    arrays = rebuild_arrays(lm, prune.get("targets", "all"), _updates_weights(run))
    folder = run.dir / "arrays"
    tmp = folder / f".{A_REBUILD}.{os.getpid()}.tmp"
    try:
        folder.mkdir(exist_ok=True)
        save_file({k: v.contiguous() for k, v in arrays.items()}, str(tmp))
        tmp.replace(folder / f"{A_REBUILD}.safetensors")
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


@torch.no_grad()
def restore_model(run: Run, spec: ModelSpec) -> LoadedModel:
    """A private copy of the pristine model with the run's stored masks (and values) applied."""
    prune = run.config.get("prune") or {}
    roles = resolve_roles(prune.get("targets", "all"))
    arrays = run.arrays(A_REBUILD)
    lm = get_model(spec, fresh=True)
    for i, role, lin in _linears(lm, roles):
        packed = arrays.get(f"layer{i}.{role}.{KEEP}")
        if packed is None:
            raise StoreError(f"run {run.id} stored no keep mask for layer {i} {role}")
        w = lin.weight
        bits = np.unpackbits(packed.numpy(), count=w.numel())
        keep = torch.from_numpy(bits.astype(bool)).view(w.shape).to(w.device)
        values = arrays.get(f"layer{i}.{role}.{VALUES}")
        if values is None:
            w.masked_fill_(~keep, 0.0)
        else:
            w.zero_()
            w[keep] = values.to(w.device, w.dtype)
    return lm
