"""The protocol every model family's adapter implements, with the Llama layout as default.

Methods, the runner, SliceGPT and the evaluations reach a model only through these verbs:

- structure: ``layers``, ``linears(layer, roles)`` (role -> nn.Linear or a ``RowSlice`` of a
  fused projection), ``input_module`` (where a role's input can be hooked), ``backbone``
  (final hidden states), ``logits``, ``embed_tokens`` with its ``embed_scale``,
  ``position_table`` (learned positions) or ``rotary_emb``, ``lm_head`` / ``tied``;
- attention: ``qk_gains`` (q/k norms as effective gains), q/k biases (on the linears),
  ``attention_scale``, ``layer_kind`` (full or sliding-window attention, per layer);
- SliceGPT: ``attn_norm`` / ``mlp_norm`` / ``final_norm`` and ``norm_affine`` (the γ, β a
  norm applies, to fold), ``post_norms`` (norms on the block outputs before the residual add,
  Gemma-3), ``attn_readers`` / ``attn_writer`` / ``mlp_readers`` /
  ``mlp_writer`` (the physical linears around each block), ``attention_block`` /
  ``mlp_block`` (callable blocks), ``layout.children`` (what a plain layer contains);
- geometry (``shape``) and ``traits``, both read from the config alone, so run planning can
  refuse a method for a family before any weight is loaded;
- smaller shapes (``core.adapters.reshape``): ``drop_layers``, ``set_heads``,
  ``write_widths``.

A family subclass (core/adapters/<family>.py) declares its ``layout`` (module paths, norm kind,
constant traits: core/adapters/layout.py) and overrides only the verbs that differ from Llama.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from core.adapters.layout import LLAMA, Layout
from core.adapters.reshape import ReshapeVerbs
from core.adapters.roles import RowSlice
from core.adapters.traits import Traits
from core.errors import ModelLoadError
from core.names import ROLES


def _get(obj: object, paths: str) -> Any:
    """The attribute at a dotted path; "a|b.c" tries each alternative in turn."""
    for path in paths.split("|"):
        found = obj
        for part in path.split("."):
            found = getattr(found, part, None)
            if found is None:
                break
        if found is not None:
            return found
    return None


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, None)
    return default if value is None else value


class ModelAdapter(ReshapeVerbs):
    """View of one causal LM through the protocol. Build it with ``core.adapters.adapter_for``."""

    family: ClassVar[str] = "llama"
    model_types: ClassVar[tuple[str, ...]] = ("llama",)
    layout: ClassVar[Layout] = LLAMA  # module paths, norm kind and constant traits

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    @classmethod
    def from_model(cls, model: nn.Module) -> ModelAdapter:
        adapter = cls(model)
        adapter.validate()
        return adapter

    # ---- read from the config alone ------------------------------------------------------
    @classmethod
    def shape(cls, config: Any) -> dict[str, int]:
        """Geometry: layers, widths, heads (GQA: n_kv_heads <= n_heads), context."""
        n_heads = int(config.num_attention_heads)
        hd = _cfg(config, "head_dim")
        return {
            "n_layers": int(config.num_hidden_layers),
            "hidden_size": int(config.hidden_size),
            "intermediate_size": int(config.intermediate_size),
            "n_heads": n_heads,
            "n_kv_heads": int(_cfg(config, "num_key_value_heads", n_heads)),
            "head_dim": int(hd) if hd else int(config.hidden_size) // n_heads,
            "max_positions": int(_cfg(config, "max_position_embeddings", 0)),
        }

    @classmethod
    def traits(cls, config: Any) -> Traits:
        shape = cls.shape(config)
        traits = dict(
            family=cls.family,
            roles=cls.layout.roles,
            norm=cls.layout.norm,
            positions=cls.positions(config),
            pre_norm=True,
            post_norms=False,
            qk_norm=False,
            qkv_bias=bool(_cfg(config, "attention_bias", False)),
            fused=(),
            tied=bool(_cfg(config, "tie_word_embeddings", False)),
            embed_scale=1.0,
            attn_scale=1.0 / math.sqrt(shape["head_dim"]),
            sliding_window=cls.window(config),
        )
        return Traits(**{**traits, **cls.layout.fixed})

    @classmethod
    def positions(cls, config: Any) -> str:
        rope = _cfg(config, "rope_parameters", {}) or {}
        factor = rope.get("partial_rotary_factor", _cfg(config, "partial_rotary_factor", 1.0))
        return "rope" if float(factor) == 1.0 else "rope_partial"

    @classmethod
    def window(cls, config: Any) -> int | None:
        """The sliding window if any layer uses one (config.layer_types), else None."""
        types = _cfg(config, "layer_types", ())
        if "sliding_attention" in types and _cfg(config, "sliding_window"):
            return int(config.sliding_window)
        return None

    # ---- structure -------------------------------------------------------------------------
    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def backbone(self) -> nn.Module:
        """The base model: ``backbone(input_ids=...)`` returns the final hidden states."""
        return self.model.model

    @property
    def stack(self) -> nn.Module:
        """The module that holds the decoder layers and the token embeddings (OPT: the
        backbone's ``decoder``)."""
        return self.backbone

    @property
    def layers(self) -> nn.ModuleList:
        return self.stack.layers

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.stack.embed_tokens

    @property
    def embed_scale(self) -> float:
        """The factor the model applies to looked-up embeddings (Gemma: √d)."""
        return 1.0

    @property
    def position_table(self) -> nn.Embedding | None:
        """Learned absolute position embeddings added to the token embeddings, if any."""
        return None

    @property
    def rotary_emb(self) -> nn.Module | None:
        return getattr(self.backbone, "rotary_emb", None)

    def pre_modules(self) -> list[nn.Module]:
        """Modules the model runs before decoder layer 0 (moved to the device for capture)."""
        mods = [self.embed_tokens, self.position_table, self.rotary_emb]
        return [m for m in mods if m is not None]

    @property
    def final_norm(self) -> nn.Module:
        return getattr(self.stack, self.layout.final_norm)

    def set_final_norm(self, norm: nn.Module) -> None:
        setattr(self.stack, self.layout.final_norm, norm)

    @property
    def lm_head(self) -> nn.Linear:
        return self.model.lm_head

    @property
    def tied(self) -> bool:
        return self.lm_head.weight.data_ptr() == self.embed_tokens.weight.data_ptr()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d) final hidden states -> (..., V) logits as the model computes them."""
        return self.lm_head(hidden)

    def layer_kind(self, index: int) -> str:
        """ "full_attention" or "sliding_attention": layers of one kind share mask and RoPE."""
        types = getattr(self.config, "layer_types", None)
        return types[index] if types else "full_attention"

    def linears(self, layer: nn.Module, roles: tuple[str, ...] = ROLES) -> dict[str, nn.Module]:
        """role -> linear of one decoder layer, in canonical order; roles the family lacks
        (OPT has no gate) are left out."""
        out = {}
        for role in ROLES:
            if role in roles and role in self.layout.roles:
                out[role] = self._linear(layer, role)
        return out

    def _linear(self, layer: nn.Module, role: str) -> nn.Module:
        return _get(layer, self.layout.paths[role])

    def input_module(self, layer: nn.Module, role: str) -> nn.Module:
        """The module whose forward input is ``role``'s input (its hook point)."""
        lin = self._linear(layer, role)
        return lin.source if isinstance(lin, RowSlice) else lin

    # ---- attention ---------------------------------------------------------------------------
    def qk_norms(self, layer: nn.Module) -> tuple[nn.Module | None, nn.Module | None]:
        """Per-head norms applied to q and k before RoPE (Qwen3/Gemma-3 q_norm/k_norm)."""
        return _get(layer, "self_attn.q_norm"), _get(layer, "self_attn.k_norm")

    def qk_gains(self, layer: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None, float]:
        """(γ_q, γ_k, ε) of the per-head RMSNorms on q and k: q̂ = γ·q/√(mean q² + ε), with
        γ the effective gain ((1 + w) for Gemma); None where the family has no such norm.
        ModelLoadError for a q/k norm that is not this family's RMSNorm."""
        gains, eps = [], 1e-6
        for norm in self.qk_norms(layer):
            if norm is None:
                gains.append(None)
                continue
            weight = getattr(norm, "weight", None)
            eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
            if weight is None or eps is None or weight.dim() != 1:
                raise ModelLoadError(
                    f"{self.family}: the q/k norm {type(norm).__name__} is not a per-head "
                    "RMSNorm with a weight and an epsilon"
                )
            gains.append(self.norm_affine(norm)[0])
        return gains[0], gains[1], float(eps)

    @property
    def attention_scale(self) -> float:
        return self.traits(self.config).attn_scale

    def layer_window(self, index: int) -> int | None:
        """Tokens decoder layer ``index`` attends to (itself included), None: all earlier."""
        if self.layer_kind(index) == "sliding_attention":
            return self.traits(self.config).sliding_window
        return None

    def attention_form(self, index: int) -> dict[str, Any]:
        """What layer ``index`` adds to q·kᵀ/√d_h, as ``core.evaluation.attention_ops.QKForm``
        fields: q/k biases, q/k norm gains and ε, the scale and the sliding window."""
        layer = self.layers[index]
        lin = self.linears(layer, ("q", "k"))
        q_gain, k_gain, eps = self.qk_gains(layer)
        bias = {r: None if lin[r].bias is None else lin[r].bias.detach() for r in ("q", "k")}
        return {
            "bq": bias["q"],
            "bk": bias["k"],
            "q_gain": q_gain,
            "k_gain": k_gain,
            "eps": eps,
            "scale": self.attention_scale,
            "window": self.layer_window(index),
        }

    def position_embeddings(
        self, hidden: torch.Tensor, position_ids: torch.Tensor, layer: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """RoPE (cos, sin) of decoder layer ``layer``, each (B, L, head_dim); None without."""
        rotary = self.rotary_emb
        return None if rotary is None else rotary(hidden, position_ids=position_ids)

    # ---- blocks and norms (SliceGPT) ---------------------------------------------------------
    def attn_norm(self, layer: nn.Module) -> nn.Module:
        return _get(layer, self.layout.attn_norm)

    def mlp_norm(self, layer: nn.Module) -> nn.Module:
        return _get(layer, self.layout.mlp_norm)

    def post_norms(self, layer: nn.Module) -> tuple[nn.Module | None, nn.Module | None]:
        """The norms on the attention and the MLP output before the residual add (None: none)."""
        paths = self.layout.post_norms
        return (None, None) if paths is None else (_get(layer, paths[0]), _get(layer, paths[1]))

    def set_norms(self, layer: nn.Module, attn: nn.Module, mlp: nn.Module) -> None:
        """Replace the norms before the attention and the MLP (SliceGPT's folded norms)."""
        for paths, new in ((self.layout.attn_norm, attn), (self.layout.mlp_norm, mlp)):
            for path in paths.split("|"):
                parent, _, name = path.rpartition(".")
                owner = _get(layer, parent) if parent else layer
                if owner is not None and getattr(owner, name, None) is not None:
                    setattr(owner, name, new)
                    break

    def norm_affine(self, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(γ, β) float tensors (d,) that ``norm`` applies after normalising (β None: no bias)."""
        return norm.weight.detach().float(), None

    def attn_readers(self, layer: nn.Module) -> list[nn.Linear]:
        """The physical linears reading the normed attention input (fused ones once)."""
        return self._physical(layer, ("q", "k", "v"))

    def attn_writer(self, layer: nn.Module) -> nn.Linear:
        return self._linear(layer, "o")

    def mlp_readers(self, layer: nn.Module) -> list[nn.Linear]:
        return self._physical(layer, tuple(r for r in ("gate", "up") if r in self.layout.roles))

    def mlp_writer(self, layer: nn.Module) -> nn.Linear:
        return self._linear(layer, "down")

    def _physical(self, layer: nn.Module, roles: tuple[str, ...]) -> list[nn.Linear]:
        seen: dict[int, nn.Linear] = {}
        for role in roles:
            mod = self.input_module(layer, role)
            seen.setdefault(id(mod), mod)
        return list(seen.values())

    def attention_block(self, layer: nn.Module) -> nn.Module:
        return layer.self_attn

    def mlp_block(self, layer: nn.Module) -> nn.Module:
        return layer.mlp

    # ---- geometry ----------------------------------------------------------------------------
    @property
    def geometry(self) -> dict[str, int]:
        return self.shape(self.config)

    n_layers = property(lambda self: len(self.layers))
    hidden_size = property(lambda self: self.geometry["hidden_size"])
    n_heads = property(lambda self: self.geometry["n_heads"])
    n_kv_heads = property(lambda self: self.geometry["n_kv_heads"])
    head_dim = property(lambda self: self.geometry["head_dim"])
    intermediate_size = property(lambda self: self.geometry["intermediate_size"])
    max_positions = property(lambda self: self.geometry["max_positions"])
    vocab_size = property(lambda self: int(self.config.vocab_size))

    @property
    def rms_eps(self) -> float:
        """ε of the residual-stream norms."""
        return float(_cfg(self.config, "rms_norm_eps", 1e-6))

    def describe(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "n_layers": self.n_layers,
            "hidden_size": self.hidden_size,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "max_positions": self.max_positions,
            "n_params": self.n_params(),
        }

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def validate(self) -> None:
        """ModelLoadError with a clear message unless the model has this family's layout."""
        name = type(self.model).__name__
        model_type = getattr(getattr(self.model, "config", None), "model_type", None)
        if isinstance(model_type, str) and model_type not in self.model_types:
            raise ModelLoadError(
                f"{name} (model_type {model_type!r}) is not a {self.family} model; build "
                "adapters with core.adapters.adapter_for, which picks the family"
            )
        try:
            layers = self.layers
        except AttributeError:
            layers = None
        if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
            raise ModelLoadError(
                f"{name} has no decoder layers where the {self.family} adapter expects them"
            )
        linears = self.linears(layers[0])
        missing = [
            r for r in self.layout.roles if not isinstance(linears.get(r), nn.Linear | RowSlice)
        ]
        if missing:
            paths = ", ".join(str(self.layout.paths[r]) for r in missing)
            raise ModelLoadError(
                f"{name}: decoder layers lack separate linears for {missing} (expected {paths});"
                f" not the {self.family} layout"
            )
        for what in (self.layout.attn_norm, self.layout.mlp_norm):
            if _get(layers[0], what) is None:
                raise ModelLoadError(f"{name}: decoder layers have no {what}; not supported")
        if getattr(self.model, "lm_head", None) is None or self.embed_tokens is None:
            raise ModelLoadError(f"{name}: no embed_tokens / lm_head; not a causal LM we support")
