"""Continuations of a prompt with one decoding rule for every model compared.

Greedy by default (temperature 0: the most likely next token, deterministic). With a
temperature > 0 the next token is drawn from softmax(logits / T) restricted to the smallest set
of tokens whose probability reaches ``top_p`` (nucleus sampling), with a generator seeded by
``seed``, so the dense and the pruned model draw from the same random stream. The loop keeps
the model's KV cache (one token per step after the prompt) and reports every new token; a
caller that already ran the prompt (``prefill``, e.g. to record the layers on the way) hands
its output in, so the prompt is run once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.errors import ConfigError
from core.models.load import LoadedModel

MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Decoding:
    """How continuations are decoded: ``max_new_tokens`` tokens (stopping at end-of-text),
    greedy when ``temperature`` is 0, else nucleus sampling with ``top_p`` and ``seed``."""

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ConfigError(f"new tokens must be between 1 and {MAX_NEW_TOKENS}")
        if not 0.0 <= self.temperature <= 5.0:
            raise ConfigError("temperature must be between 0 (greedy) and 5")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError("top-p must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def describe(self) -> str:
        if self.greedy:
            return f"greedy, {self.max_new_tokens} new tokens"
        return (
            f"sampled at T = {self.temperature:g}, top-p {self.top_p:g}, seed {self.seed}, "
            f"{self.max_new_tokens} new tokens"
        )


def next_token(logits: torch.Tensor, dec: Decoding, gen: torch.Generator | None) -> int:
    """One token id from next-token logits (V,) under ``dec``."""
    if dec.greedy:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / dec.temperature, -1)
    sorted_p, order = probs.sort(descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < dec.top_p  # the nucleus, at least one token
    sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    pick = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=gen)
    return int(order[pick])


@torch.no_grad()
def prefill(lm: LoadedModel, ids: list[int]):
    """The prompt ids through the model with the KV cache on: the output's ``logits`` (1, L, V)
    and ``cache`` start ``generate``."""
    if not ids:
        raise ConfigError("type a prompt first")
    device = next(lm.model.parameters()).device
    return lm.model(input_ids=torch.tensor([ids], device=device), use_cache=True)


# Inference mode, not no_grad: a step skips autograd's version counting and view tracking
# (a small share of a step's Python; docs/benchmarks.md, Compare). Only token ids leave this
# function, so no inference tensor escapes into code that runs outside the mode.
@torch.inference_mode()
def generate(
    lm: LoadedModel,
    ids: list[int],
    dec: Decoding,
    on_token: Callable[[int], None] | None = None,
    start=None,
) -> list[int]:
    """New token ids after the prompt ids, calling ``on_token(id)`` as each one is chosen
    (``start``: the prompt's ``prefill`` output, when the caller ran it already)."""
    out = prefill(lm, ids) if start is None else start
    device = next(lm.model.parameters()).device
    gen = None if dec.greedy else torch.Generator().manual_seed(dec.seed)
    eos = lm.tokenizer.eos_token_id
    new: list[int] = []
    for _ in range(dec.max_new_tokens):
        tok = next_token(out.logits[0, -1].cpu(), dec, gen)
        new.append(tok)
        if on_token is not None:
            on_token(tok)
        if tok == eos or len(new) == dec.max_new_tokens:
            break
        step = torch.tensor([[tok]], device=device)
        out = lm.model(input_ids=step, cache=out.cache, use_cache=True)
    return new
