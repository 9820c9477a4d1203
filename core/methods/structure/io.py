"""Save and reload a structured model (fewer layers, heads or channels).

``save_structured`` writes what ``save_pretrained`` writes (safetensors, ``config.json``)
plus ``structure.json``. Where the config states the result itself (fewer layers; one head
count and MLP width for every layer, and no bias the family's config does not create:
``finish_config``), plain transformers reloads the folder. Otherwise (per-layer widths,
FLAP's added biases) ``load_structured`` builds the model from the config on the meta
device, gives it the recorded shapes (``apply_spec``) and loads the weights into them: the
way SliceGPT's sliced models reload (core.methods.slicegpt.io).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from accelerate import init_empty_weights
from safetensors.torch import load_file
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from core.adapters import ModelAdapter, adapter_for
from core.errors import ConfigError, ModelLoadError
from core.methods.structure.spec import STRUCTURE_FILE, StructureSpec, is_structured
from core.models.weights import weight_map


def finish_config(adapter: ModelAdapter, spec: StructureSpec) -> StructureSpec:
    """Write the spec's widths into the model's config when it can state them (every layer
    alike, no added bias, and a family whose config expresses them: ``write_widths``); the
    spec, marked ``in_config`` when it did. The layer count is in the config already
    (``drop_layers``)."""
    if not spec.uniform or spec.added_bias or not spec.kept:
        return spec
    if not adapter.write_widths(spec.heads[0], spec.kv_heads[0], spec.channels[0]):
        return spec
    return dataclasses.replace(spec, in_config=True)


def _empty(lin: nn.Linear, out: int, inp: int, bias: bool) -> None:
    """Give a linear of a model built on the meta device the shape (out, in) (and a bias)."""
    lin.weight = nn.Parameter(torch.empty(out, inp, dtype=lin.weight.dtype, device="meta"))
    lin.bias = (
        nn.Parameter(torch.empty(out, dtype=lin.weight.dtype, device="meta")) if bias else None
    )
    lin.out_features, lin.in_features = out, inp


def apply_spec(model: nn.Module, spec: StructureSpec) -> None:
    """Give a model built from the saved config (on the meta device) the spec's shapes."""
    adapter = adapter_for(model)
    if adapter.n_layers != len(spec.kept):
        raise ModelLoadError(
            f"{STRUCTURE_FILE} records {len(spec.kept)} layers, the config {adapter.n_layers}"
        )
    hd = spec.head_dim
    for i, layer in enumerate(adapter.layers):
        lin = adapter.linears(layer)
        q_rows, kv_rows = spec.heads[i] * hd, spec.kv_heads[i] * hd
        for role, out in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
            _empty(lin[role], out, lin[role].in_features, lin[role].bias is not None)
        o = lin["o"]
        _empty(o, o.out_features, q_rows, spec.attn_bias[i])
        for role in ("gate", "up"):
            if role in lin:
                _empty(
                    lin[role], spec.channels[i], lin[role].in_features, lin[role].bias is not None
                )
        down = lin["down"]
        _empty(down, down.out_features, spec.channels[i], spec.mlp_bias[i])
        adapter.set_heads(layer, spec.heads[i], spec.kv_heads[i])
    model.structure = spec


def save_structured(model: nn.Module, folder: str | Path) -> Path:
    """``save_pretrained`` (safetensors) and ``structure.json`` into ``folder``."""
    if not is_structured(model):
        raise ConfigError("save_structured needs a model a structured method changed")
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / STRUCTURE_FILE).write_text(json.dumps(model.structure.to_json(), indent=2) + "\n")
    return folder


def load_structured(
    folder: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Rebuild a model ``save_structured`` wrote: the config's model on the meta device,
    the recorded shapes, then the saved weights (every parameter accounted for; a head tied
    to the embeddings is tied again). Returns it in eval mode on ``device``."""
    folder = Path(folder)
    missing = [f for f in ("config.json", STRUCTURE_FILE) if not (folder / f).is_file()]
    if missing:
        raise ModelLoadError(f"{folder} is not a structured model folder: no {', '.join(missing)}")
    spec = StructureSpec.from_json(json.loads((folder / STRUCTURE_FILE).read_text()))
    config = AutoConfig.from_pretrained(folder)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attn_implementation
        )
    apply_spec(model, spec)
    state: dict[str, torch.Tensor] = {}
    for file in sorted(set(weight_map(folder).values())):
        state.update(load_file(folder / file))
    result = model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    left = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if result.unexpected_keys or left:
        raise ModelLoadError(
            f"{folder}: the weights do not match {STRUCTURE_FILE} (unexpected "
            f"{result.unexpected_keys[:3]}, missing {left[:3]})"
        )
    return model.to(device=device, dtype=dtype).eval()
