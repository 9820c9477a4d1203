"""Models side by side on one text: each one's continuation, per-token NLL and layer trace,
the models decoding at once on a CPU.

A *side* runs the prompt once: the prefill that starts generation (KV cache on) also records
every decoder layer's output (the trace, ``core.evaluation.compare``) and gives the logits the
per-token NLL reads. The prompt's positions do not see what follows them (causal attention),
so this trace is the one a forward of the prompt alone gives.

Why at once: decoding one token multiplies every weight of the model by one vector (a 135M
model reads 540 MB of float32 per token), so a step waits on memory, and one core's share
of the bandwidth leaves the other's idle. On a CPU with at least as many intra-op threads as
models, each model decodes in its own thread with its share of the intra-op threads (set per
thread: ``torch.set_num_threads`` acts on the calling thread's OpenMP team and MKL's
thread-local count). Each thread computes what it would alone, so the sides are the ones a
one-after-the-other run gives. Tokens reach ``on_token(name, id)`` on the caller's thread, in
the order each model chose them, so a caller that draws them (a Streamlit page) never draws
from a worker thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import torch

from core.evaluation.compare import (
    Trace,
    check_text,
    lens_of,
    model_device,
    recording,
    token_nll,
)
from core.evaluation.generate import Decoding, generate, prefill
from core.models.load import LoadedModel

TokenFn = Callable[[str, int], None]  # (which model, token id)


@dataclass(frozen=True)
class Side:
    """One model on one text: its continuation, its per-token NLL (L−1,) and its trace; with
    ``lens`` asked for, also the logit lens of the trace (``compare.lens_of``: n_layers × 8 × V
    floats, 47 MB for the embedded model, so a caller that keeps sides drops it)."""

    new_ids: list[int]
    text: str
    nll: np.ndarray
    trace: Trace
    lens: list[torch.Tensor] | None = field(default=None, repr=False, compare=False)


@torch.no_grad()
def side(lm: LoadedModel, ids: list[int], dec: Decoding, on_token=None, lens=False) -> Side:
    """One model's side: the prompt run once (trace and NLL), then its continuation, then
    (``lens``) the trace's logit lens, in the same thread: a model that stops early (end of
    text) reads its lens while the other one still decodes."""
    ids_t = torch.tensor(ids)
    check_text(ids_t)
    with recording(lm) as states:
        start = prefill(lm, ids)
    tr = Trace([s.cpu() for s in states], start.logits[0].float().cpu(), ids_t)
    new = generate(lm, ids, dec, on_token, start=start)
    text = lm.tokenizer.decode(new, skip_special_tokens=True)
    return Side(new, text, token_nll(tr.logits, tr.ids), tr, lens_of(lm, tr) if lens else None)


def _at_once(models: dict[str, LoadedModel]) -> int:
    """Intra-op threads per model when the models decode at once; 0 when they should not."""
    if len(models) < 2:
        return 0
    on_cpu = all(model_device(lm).type == "cpu" for lm in models.values())
    per = torch.get_num_threads() // len(models)
    return per if on_cpu and per >= 1 else 0


def sides(
    models: dict[str, LoadedModel],
    ids: list[int],
    dec: Decoding,
    on_token: TokenFn | None = None,
    lens: Collection[str] = (),
) -> dict[str, Side]:
    """Every model's side on the same prompt ids, by name (see the module docstring); the
    sides named in ``lens`` also read their trace's logit lens (``Side.lens``)."""
    threads = _at_once(models)
    if not threads:
        return {
            name: side(lm, ids, dec, _tagged(on_token, name), name in lens)
            for name, lm in models.items()
        }
    events: queue.Queue = queue.Queue()  # (name, token id | Side | exception)
    stop = threading.Event()  # set when the caller fails: the workers abandon their decoding

    def work(name: str, lm: LoadedModel) -> None:
        def hand_over(tok: int) -> None:
            if stop.is_set():
                raise _Abandoned
            events.put((name, tok))

        torch.set_num_threads(threads)
        try:
            events.put((name, side(lm, ids, dec, hand_over, name in lens)))
        except BaseException as exc:  # handed to the caller's thread, raised there
            events.put((name, exc))

    workers = [threading.Thread(target=work, args=item, daemon=True) for item in models.items()]
    for w in workers:
        w.start()
    done: dict[str, Side] = {}
    error: BaseException | None = None
    finished = 0
    while finished < len(models):
        name, item = events.get()
        if isinstance(item, Side | BaseException):
            finished += 1
            if isinstance(item, Side):
                done[name] = item
            elif not isinstance(item, _Abandoned):
                error = error or item
                stop.set()
        elif on_token is not None and error is None:
            try:
                on_token(name, item)
            except BaseException as exc:  # e.g. the page asked to rerun: stop the others
                error = exc
                stop.set()
    for w in workers:
        w.join()
    if error is not None:
        raise error
    return done


class _Abandoned(Exception):
    """A worker's decoding stopped because the caller failed."""


def _tagged(on_token: TokenFn | None, name: str) -> Callable[[int], None] | None:
    return None if on_token is None else (lambda tok: on_token(name, tok))
