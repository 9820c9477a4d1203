"""Llama and Mistral: the protocol's default layout (``ModelAdapter``), GQA included.

SmolLM2 and other Llama-shaped decoders load as ``LlamaForCausalLM``. Mistral differs only in
attending through a sliding window on every layer (``config.sliding_window``, None: global).
"""

from __future__ import annotations

from typing import Any, ClassVar

from core.adapters.base import ModelAdapter


class LlamaAdapter(ModelAdapter):
    """Llama 2/3, SmolLM, Mistral: RMSNorm pre-norm layers, separate q/k/v/o and SwiGLU."""

    family: ClassVar[str] = "llama"
    model_types: ClassVar[tuple[str, ...]] = ("llama", "mistral")

    def layer_window(self, index: int) -> int | None:
        if self.config.model_type == "mistral":  # every layer slides
            return self.window(self.config)
        return super().layer_window(index)

    @classmethod
    def window(cls, config: Any) -> int | None:
        if config.model_type == "mistral":
            return getattr(config, "sliding_window", None)
        return super().window(config)
