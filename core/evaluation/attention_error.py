"""Attention-matrix approximation error of pruned W_Q/W_K, for any method.

Paper B's objective compares the softmax attention of the *same* layer input X under dense
and pruned query/key projections. ``AttentionProbe`` captures X (the q_proj input of every
layer, i.e. the normed residual stream) and the RoPE tables from the dense model on a few
windows before pruning, together with the dense W_Q/W_K; after pruning, ``errors`` compares
the attention matrices per layer and head: ‖P̃ − P‖_F, its ratio to ‖P‖_F, and the maximum
row-wise total variation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.adapters import ModelAdapter
from core.evaluation.attention_ops import QKForm, attention_errors, attention_probs
from core.models.layer_inputs import linear_inputs


def form(adapter: ModelAdapter, index: int) -> QKForm:
    """Layer ``index``'s biases, q/k norms, scale and window, on the CPU in float32."""
    return QKForm(
        **{
            k: v.detach().float().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in adapter.attention_form(index).items()
        }
    )


@dataclass
class AttentionProbe:
    """Dense references for one set of windows.

    X[i]: (N, L, d) float32 q_proj input of layer i (CPU); ropes[i]: (cos, sin) (L, head_dim)
    of layer i (layers of one kind share them; None without RoPE); dense[i]: (Wq, Wk) float32
    clones in nn.Linear layout.
    """

    name: str
    X: list[torch.Tensor]
    ropes: list[tuple[torch.Tensor, torch.Tensor] | None]
    dense: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def rope(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Layer 0's RoPE tables (every layer's, for a model with one layer kind)."""
        return self.ropes[0]

    @classmethod
    @torch.no_grad()
    def capture(
        cls,
        adapter: ModelAdapter,
        ids: torch.Tensor,
        name: str,
        device,
        dense: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> AttentionProbe:
        """Run the (still dense) model on ids (N, L) and keep every layer's q_proj input.
        ``dense``: another probe's dense W_Q/W_K of the same model, shared instead of cloned."""
        X, rope = linear_inputs(adapter, ids, "q", device)
        ropes = [rope[i] for i in range(adapter.n_layers)]
        if dense is None:
            dense = [
                tuple(
                    lin.weight.detach().float().cpu().clone()
                    for lin in adapter.linears(layer, ("q", "k")).values()
                )
                for layer in adapter.layers
            ]
        return cls(name, [X[i] for i in range(adapter.n_layers)], ropes, dense)  # type: ignore[arg-type]

    @torch.no_grad()
    def errors(self, adapter: ModelAdapter, causal: bool = True) -> list[dict[str, Any]]:
        """Rows (text, layer, head, fro, fro_rel, tv_max) for the model's current W_Q/W_K."""
        rows = []
        geo = (adapter.n_heads, adapter.n_kv_heads, adapter.head_dim)
        for i, layer in enumerate(adapter.layers):
            lin = adapter.linears(layer, ("q", "k"))
            Wq, Wk = (lin[r].weight.detach().float().cpu() for r in ("q", "k"))
            kw = {"causal": causal, "rope": self.ropes[i], "form": form(adapter, i)}
            P = attention_probs(self.X[i], *self.dense[i], *geo, **kw)
            P_new = attention_probs(self.X[i], Wq, Wk, *geo, **kw)
            err = attention_errors(P, P_new)
            for h in range(adapter.n_heads):
                rows.append(
                    {
                        "text": self.name,
                        "layer": i,
                        "head": h,
                        **{k: float(v[h]) for k, v in err.items()},
                    }
                )
        return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean relative Frobenius error and worst total variation, per text."""
    out: dict[str, float] = {}
    for text in sorted({r["text"] for r in rows}):
        sel = [r for r in rows if r["text"] == text]
        out[f"attn_fro_rel_{text}"] = sum(r["fro_rel"] for r in sel) / len(sel)
        out[f"attn_tv_max_{text}"] = max(r["tv_max"] for r in sel)
    return out
