"""Attention maps of stored runs for any prompt (the app's Attention masks page).

Paper B's objective compares the *same* layer input X with dense and pruned Q/K, so both
maps here use the pristine model's q_proj input for the prompt; only W_Q/W_K differ (the
run's stored ``qk`` arrays). Everything returns numpy for the figure builders.

    lm = pristine_model(run)
    x = prompt_input(lm, "The cat sat on the mat.", layer=3)
    dense, pruned = attention_pair(lm, x, run, layer=3)   # (H, L, L) each
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.errors import ConfigError
from core.evaluation.attention_error import form
from core.evaluation.attention_ops import attention_errors, attention_probs
from core.models.layer_inputs import linear_inputs
from core.models.load import LoadedModel
from core.runs.resources import get_model
from core.settings.config import ModelSpec
from core.store.run_store import Run

MAX_PROMPT_TOKENS = 64


@dataclass(frozen=True)
class PromptInput:
    """The q_proj input of one layer for a prompt: X (L, d), RoPE (cos, sin) and tokens."""

    X: torch.Tensor
    rope: tuple[torch.Tensor, torch.Tensor] | None
    tokens: list[str]


def pristine_model(run: Run) -> LoadedModel:
    """The unpruned model of a run, on the CPU in float32 (cached once per process)."""
    m = run.config.get("model") or {}
    spec = ModelSpec(
        m.get("name", run.record.model or ""),
        "cpu",
        "float32",
        bool(m.get("trust_remote_code", False)),
        m.get("revision"),
    )
    return get_model(spec, fresh=False)


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable per-token labels: decoded text, spaces shown as '·', blanks as '␣'."""
    labels = []
    for i in ids:
        text = tokenizer.decode([i]).replace("\n", "⏎").replace(" ", "·")
        labels.append(text or "␣")
    return labels


@torch.no_grad()
def prompt_input(lm: LoadedModel, prompt: str, layer: int) -> PromptInput:
    """Run the prompt through the pristine model up to ``layer``'s q_proj and keep its input."""
    if not prompt.strip():
        raise ConfigError("type a prompt first")
    ad = lm.adapter
    if not 0 <= layer < ad.n_layers:
        raise ConfigError(f"layer {layer} is out of range (the model has {ad.n_layers})")
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"][:MAX_PROMPT_TOKENS]
    if len(ids) < 2:
        raise ConfigError("the prompt needs at least two tokens")
    device = next(lm.model.parameters()).device
    X, rope = linear_inputs(ad, torch.tensor([ids]), "q", device, range(layer, layer + 1))
    return PromptInput(X[layer][0], rope[layer], token_labels(lm.tokenizer, ids))


def dense_qk(lm: LoadedModel, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    lin = lm.adapter.linears(lm.adapter.layers[layer], ("q", "k"))
    return lin["q"].weight.detach().float().cpu(), lin["k"].weight.detach().float().cpu()


def stored_qk(run: Run, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The run's pruned W_Q, W_K of a layer (nn.Linear layout), or None if not stored."""
    keys = [f"layer{layer}.q", f"layer{layer}.k"]
    if not set(keys) <= set(run.array_keys("qk")):
        return None
    arr = run.arrays("qk", keys)
    return arr[keys[0]].float(), arr[keys[1]].float()


def keep_masks(run: Run, layer: int) -> dict[str, np.ndarray]:
    """0/1 keep masks of W_Q and W_K: the method's own masks when stored, else W ≠ 0."""
    own = [f"mask.layer{layer}.q", f"mask.layer{layer}.k"]
    if set(own) <= set(run.array_keys("method")):
        arr = run.arrays("method", own)
        return {role: arr[k].bool().numpy() for role, k in zip("qk", own, strict=True)}
    qk = stored_qk(run, layer)
    if qk is None:
        return {}
    return {role: (w != 0).numpy() for role, w in zip("qk", qk, strict=True)}


def head_rows(mask: np.ndarray, head: int, head_dim: int) -> np.ndarray:
    """Rows of one head in an nn.Linear-layout (heads·head_dim, d) matrix."""
    return mask[head * head_dim : (head + 1) * head_dim]


def _probs(
    x: PromptInput, Wq: torch.Tensor, Wk: torch.Tensor, lm: LoadedModel, layer: int
) -> torch.Tensor:
    ad = lm.adapter
    geo = (ad.n_heads, ad.n_kv_heads, ad.head_dim)
    return attention_probs(x.X, Wq, Wk, *geo, True, x.rope, form(ad, layer))


def dense_attention(lm: LoadedModel, x: PromptInput, layer: int) -> np.ndarray:
    """The dense model's attention (H, L, L) of a layer for input X."""
    return _probs(x, *dense_qk(lm, layer), lm, layer).numpy()


def pruned_attention(lm: LoadedModel, x: PromptInput, run: Run, layer: int) -> np.ndarray:
    """A run's attention (H, L, L) of a layer: its stored W_Q/W_K on the same input X."""
    pruned = stored_qk(run, layer)
    if pruned is None:
        raise ConfigError(f"run {run.id} stored no W_Q/W_K for layer {layer}")
    return _probs(x, *pruned, lm, layer).numpy()


def attention_pair(
    lm: LoadedModel, x: PromptInput, run: Run, layer: int
) -> tuple[np.ndarray, np.ndarray]:
    """Dense and pruned attention (H, L, L) of a layer for the same input X."""
    return dense_attention(lm, x, layer), pruned_attention(lm, x, run, layer)


def head_errors(dense: np.ndarray, pruned: np.ndarray) -> dict[str, np.ndarray]:
    """Per-head ‖P̃ − P‖_F, its relative value and the max row total variation (H,)."""
    errs = attention_errors(torch.from_numpy(dense), torch.from_numpy(pruned))
    return {k: v.numpy() for k, v in errs.items()}
