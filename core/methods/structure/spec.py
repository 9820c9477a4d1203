"""The record of a structured model's shapes (``StructureSpec``, stored as
``structure.json`` beside the weights): which of the dense decoder layers it kept, and per
kept layer its query and KV heads, its MLP width and whether its residual writers (o_proj,
down_proj) carry a bias. A model in memory carries it as ``model.structure``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from core.adapters import ModelAdapter
from core.errors import ModelLoadError
from core.methods.structure.edit import group_size, kept_channels

STRUCTURE_FILE = "structure.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class StructureSpec:
    """method: what made it. dense_layers: the dense model's layer count; kept: the original
    index of every kept layer. Per kept layer: heads (query), kv_heads, channels (MLP width),
    attn_bias / mlp_bias (o_proj / down_proj has a bias). head_dim: every head's width.
    added_bias: the method gave writers biases the family's config does not create (FLAP's
    compensation). in_config: the config states these widths itself (every layer alike, no
    added bias), so plain transformers reloads the folder."""

    method: str
    dense_layers: int
    kept: tuple[int, ...]
    heads: tuple[int, ...]
    kv_heads: tuple[int, ...]
    channels: tuple[int, ...]
    attn_bias: tuple[bool, ...]
    mlp_bias: tuple[bool, ...]
    head_dim: int
    added_bias: bool = False
    in_config: bool = False

    def __post_init__(self) -> None:
        n = len(self.kept)
        per_layer = (self.heads, self.kv_heads, self.channels, self.attn_bias, self.mlp_bias)
        if any(len(x) != n for x in per_layer):
            raise ModelLoadError(f"{STRUCTURE_FILE}: per-layer lists do not all have {n} entries")

    @property
    def uniform(self) -> bool:
        """Every kept layer has the same heads and width."""
        return all(len(set(x)) <= 1 for x in (self.heads, self.kv_heads, self.channels))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StructureSpec:
        if data.get("format") != FORMAT_VERSION:
            raise ModelLoadError(f"{STRUCTURE_FILE}: unknown format {data.get('format')!r}")
        fields = {k: v for k, v in data.items() if k != "format"}
        try:
            return cls(
                **{
                    **fields,
                    **{k: tuple(fields[k]) for k in ("kept", "heads", "kv_heads", "channels")},
                    "attn_bias": tuple(bool(b) for b in fields["attn_bias"]),
                    "mlp_bias": tuple(bool(b) for b in fields["mlp_bias"]),
                }
            )
        except (KeyError, TypeError) as exc:
            raise ModelLoadError(f"{STRUCTURE_FILE} is not a structure record: {exc}") from exc


def spec_of(
    adapter: ModelAdapter, method: str, kept: list[int], dense_layers: int, added_bias: bool
) -> StructureSpec:
    """The spec of a model as it is now, read off its layers' shapes."""
    heads, kv, channels, attn_bias, mlp_bias = [], [], [], [], []
    for layer in adapter.layers:
        n_kv, gs = group_size(adapter, layer)
        heads.append(n_kv * gs)
        kv.append(n_kv)
        channels.append(kept_channels(adapter, layer))
        attn_bias.append(adapter.attn_writer(layer).bias is not None)
        mlp_bias.append(adapter.mlp_writer(layer).bias is not None)
    return StructureSpec(
        method,
        dense_layers,
        tuple(kept),
        tuple(heads),
        tuple(kv),
        tuple(channels),
        tuple(attn_bias),
        tuple(mlp_bias),
        adapter.head_dim,
        added_bias,
    )


def is_structured(model: nn.Module) -> bool:
    return isinstance(getattr(model, "structure", None), StructureSpec)
