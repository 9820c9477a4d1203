"""The adapter verbs that give a decoder smaller dense shapes (ShortGPT, FLAP, structured
Wanda: core.methods.structure), kept beside the protocol's other verbs as one mixin of
``ModelAdapter``.

- ``drop_layers``: keep some decoder layers and say so in the config (layer count, per-layer
  attention kinds, each kept layer's index for the KV cache);
- ``set_heads``: tell a layer's attention block how many heads its narrowed q/k/v/o hold
  (Llama-shaped blocks read it off the shapes; OPT keeps a count);
- ``write_widths``: write uniform head counts and MLP widths into the config when the family's
  config can express them at the same head width (then plain transformers reloads the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn


class ReshapeVerbs:
    """Mixed into ``core.adapters.base.ModelAdapter``: uses its ``stack``, ``layers``,
    ``config``, ``attention_block`` and ``head_dim``."""

    stack: nn.Module
    layers: nn.ModuleList
    config: Any
    head_dim: int

    def drop_layers(self, keep: Sequence[int]) -> None:
        """Keep decoder layers ``keep`` (original indices, ascending) in that order: the
        config's layer count and per-layer attention kinds follow, and every kept layer's
        modules carry their new index (the KV cache is indexed by it)."""
        kept = nn.ModuleList([self.layers[i] for i in keep])
        types = getattr(self.config, "layer_types", None)
        if types:
            self.config.layer_types = [types[i] for i in keep]
        self.stack.layers = kept
        self.config.num_hidden_layers = len(kept)
        for j, layer in enumerate(kept):
            for module in layer.modules():
                if hasattr(module, "layer_idx"):
                    module.layer_idx = j

    def set_heads(self, layer: nn.Module, n_heads: int, n_kv_heads: int) -> None:
        """Tell ``layer``'s attention block it holds ``n_heads`` query and ``n_kv_heads`` KV
        heads (its linears already have the shapes). Llama-shaped blocks reshape by
        head_dim and keep the group size, so nothing needs telling."""

    def write_widths(self, n_heads: int, n_kv_heads: int, intermediate: int) -> bool:
        """Write uniform widths into the config (every layer alike) and return True, when
        the family's config expresses them at the same head width; else change nothing
        and return False."""
        self.config.head_dim = self.head_dim  # explicit: no longer hidden_size / heads
        self.config.num_attention_heads = n_heads
        self.config.num_key_value_heads = n_kv_heads
        self.config.intermediate_size = intermediate
        return True
