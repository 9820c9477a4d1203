"""Perplexity on non-overlapping windows: PPL = exp(mean over windows of the window's mean
next-token NLL), exactly the reference protocol of Wanda / SparseGPT / SliceGPT (papers.md §1)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from core.adapters import ModelAdapter, adapter_for
from core.errors import ModelLoadError
from core.models.layer_inputs import capture_layer_inputs, walk_layers
from core.models.offload import Offload
from core.progress import ProgressFn, report


@dataclass(frozen=True)
class PerplexityResult:
    ppl: float
    nll: float  # mean window NLL in nats (= ln PPL)
    n_windows: int
    seqlen: int
    n_tokens: int  # windows × seqlen, as the reference implementations count them
    seconds: float
    tokens_per_s: float
    # Mean NLL of each window, in window order: the unit Paper A's intervals resample
    # (core.analysis.uncertainty). Stored as a table, not among the scalar metrics.
    window_nll: tuple[float, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, float | int]:
        return {k: v for k, v in asdict(self).items() if k != "window_nll"}

    def window_rows(self) -> list[dict[str, float | int]]:
        """One row per evaluation window: {window, nll} (a run's T_EVAL_WINDOWS table)."""
        return [{"window": i, "nll": v} for i, v in enumerate(self.window_nll)]


def window_nll(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean NLL per window. logits: (B, L, V), ids: (B, L) -> (B,) float32.

    Position t predicts token t+1, so each window contributes L-1 targets.
    """
    B, L, V = logits.shape
    loss = F.cross_entropy(
        logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1), reduction="none"
    )
    return loss.view(B, L - 1).mean(dim=1)


# token rows of logits materialised at once: (chunk, V) float32, and as much again for the
# cross-entropy's log-softmax: 2 x 12 MiB at a 49k vocabulary, 2 x 32 MiB at 128k. A streamed
# evaluation holds the head beside them, so they must stay well under a unit's size.
LOGIT_CHUNK = 64


def _head_nll(adapter: ModelAdapter, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean NLL per window from the final (normed) hidden states, projecting to the
    vocabulary through ``adapter.logits`` ``LOGIT_CHUNK`` rows at a time.
    hidden: (B, L-1, d), ids: (B, L) -> (B,) float32.

    With V = 49k (SmolLM2) or 128k (Llama 3) the full logits of a batch take GBs; this keeps
    evaluation memory at the model plus one chunk.
    """
    B, T, d = hidden.shape
    flat, targets = hidden.reshape(-1, d), ids[:, 1:].reshape(-1)
    losses = torch.empty(B * T, dtype=torch.float32, device=ids.device)
    for start in range(0, B * T, LOGIT_CHUNK):
        logits = adapter.logits(flat[start : start + LOGIT_CHUNK]).float()  # (chunk, V)
        losses[start : start + LOGIT_CHUNK] = F.cross_entropy(
            logits, targets[start : start + LOGIT_CHUNK], reduction="none"
        )
    return losses.view(B, T).mean(dim=1)


def _window_nll_chunked(adapter: ModelAdapter, ids: torch.Tensor) -> torch.Tensor:
    """Mean NLL per window without the (B, L, V) logits tensor: run the backbone, then
    ``_head_nll``. ids: (B, L) -> (B,) float32."""
    out = adapter.backbone(input_ids=ids, use_cache=False)
    return _head_nll(adapter, out.last_hidden_state[:, :-1], ids)  # hidden (B, L-1, d)


def _adapter(model: nn.Module) -> ModelAdapter | None:
    """The family adapter of a causal LM the adapters know, else None (scored by .logits)."""
    try:
        return adapter_for(model)
    except ModelLoadError:
        return None


@torch.no_grad()
def evaluate_perplexity(
    model: nn.Module,
    windows: torch.Tensor,
    batch_size: int = 4,
    device: torch.device | str | None = None,
    on_progress: ProgressFn | None = None,
) -> PerplexityResult:
    """windows: (n, L) token ids. The model stays where it is; batches move to ``device``.

    Causal LMs of a family the adapters know are scored in logit chunks through the adapter's
    backbone and head (same numbers, a fraction of the memory); any other module through its
    ``.logits``.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    adapter = _adapter(model)
    n, L = windows.shape
    nlls: list[torch.Tensor] = []
    t0 = time.perf_counter()
    report(on_progress, "eval", 0, n)
    for start in range(0, n, batch_size):
        ids = windows[start : start + batch_size].to(device)
        if adapter is not None:
            nll = _window_nll_chunked(adapter, ids)
        else:
            nll = window_nll(model(input_ids=ids, use_cache=False).logits, ids)
        nlls.append(nll.double().cpu())
        done = min(start + batch_size, n)
        report(on_progress, "eval", done, n, f"{done * L / (time.perf_counter() - t0):.0f} tok/s")
    return _result(torch.cat(nlls), L, time.perf_counter() - t0)


def _result(per_window: torch.Tensor, L: int, seconds: float) -> PerplexityResult:
    n = per_window.shape[0]
    nll = float(per_window.sum() / n)
    return PerplexityResult(
        ppl=math.exp(nll),
        nll=nll,
        n_windows=n,
        seqlen=L,
        n_tokens=n * L,
        seconds=seconds,
        tokens_per_s=n * L / seconds if seconds > 0 else float("inf"),
        window_nll=tuple(per_window.tolist()),
    )


@torch.no_grad()
def layerwise_perplexity(
    adapter: ModelAdapter,
    windows: torch.Tensor,
    batch_size: int,
    offload: Offload,
    store_device: torch.device | str | None = None,
    on_progress: ProgressFn | None = None,
) -> PerplexityResult:
    """The same perplexity as ``evaluate_perplexity``, with all windows (n, L) passing the
    model one decoder layer at a time: the embeddings, each layer, then the final norm and
    head visit ``offload.device`` in turn (so one layer's weights are resident when
    ``offload`` streams them). Activations (n, L, d) live on ``store_device`` (default the
    device). Batches of ``batch_size`` windows run the same operations as the whole-model
    forward, so the numbers are identical."""
    device = offload.device
    L = windows.shape[1]
    t0 = time.perf_counter()
    inputs = capture_layer_inputs(adapter, windows, device, batch_size, store_device, offload)
    steps = adapter.n_layers + 1
    report(on_progress, "eval", 0, steps)

    def visit(i: int, _layer: nn.Module) -> None:
        report(on_progress, "eval", i, steps, f"layer {i + 1}/{adapter.n_layers}")

    walk_layers(adapter, inputs, offload, visit)
    norm, head = offload.fetch(adapter.final_norm), offload.fetch(adapter.lm_head)
    try:
        nlls = []
        for b, h in enumerate(inputs.hidden):
            ids = windows[b * batch_size : (b + 1) * batch_size].to(device)
            nlls.append(_head_nll(adapter, norm(h.to(device))[:, :-1], ids).double().cpu())
    finally:
        offload.release(head)
        offload.release(norm)
    report(on_progress, "eval", steps, steps)
    return _result(torch.cat(nlls), L, time.perf_counter() - t0)
