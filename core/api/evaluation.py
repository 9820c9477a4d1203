"""``perplexity`` and ``compare`` on models a notebook holds: the reference perplexity protocol
(``core.evaluation.perplexity``) and the Compare page's side-by-side of a dense and a pruned
model on one text (``core.runs.comparison.compare_models``), each on the device the model's
weights are on."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.api.inputs import Data, windows
from core.api.memory import device_of, evaluating, loaded
from core.evaluation.generate import Decoding
from core.evaluation.perplexity import PerplexityResult, evaluate_perplexity
from core.progress import ProgressFn
from core.runs.comparison import RunComparison, compare_models, rotation_back, text_ids

PRUNED = "pruned"  # the pruned model's name in a comparison of models in memory
HOW = "in memory"  # how its model was obtained (RunComparison.how)


def perplexity(
    model: nn.Module,
    tokenizer: Any,
    data: Data = "wikitext2",
    *,
    batch_size: int = 4,
    progress: ProgressFn | None = None,
) -> PerplexityResult:
    """Perplexity of ``model`` on ``data``: a corpus name (its test split, windows of 512
    tokens, as ``--eval``), ``eval_data(name, seqlen, max_windows)``, or windows (n, L) of
    token ids. PPL = exp(mean window NLL); ``window_nll`` holds each window's, the unit the
    intervals of Paper A's laws resample."""
    lm = loaded(model, tokenizer)
    ids = windows(lm, data)
    batch = getattr(data, "batch_size", batch_size)
    with evaluating(model):
        return evaluate_perplexity(model, ids, batch, device_of(model), progress)


def compare(
    dense: nn.Module,
    pruned: nn.Module,
    tokenizer: Any,
    text: str,
    *,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
) -> RunComparison:
    """The pruned model beside the dense one on ``text`` (the Compare page's data): both
    continuations with one decoding rule (greedy at temperature 0), per-token NLL
    (``nll_diff``, ``worst()``), and per layer the logit lens's KL(dense ‖ pruned) and the
    layer output's relative error (``layers``). A sliced model is compared in its own basis
    rotated back (``note`` says so)."""
    dec = Decoding(max_new_tokens, temperature, top_p, seed)
    dense_lm = loaded(dense, tokenizer)
    # one model beside itself runs once: two decoding threads on one module would share its
    # hooks (core.runs.comparison.compare_models skips the second side when it is the first)
    lm = dense_lm if pruned is dense else loaded(pruned, tokenizer)
    ids = text_ids(dense_lm, text)
    with evaluating(dense), evaluating(pruned):
        basis = rotation_back(dense_lm, lm)
        found, _ = compare_models(dense_lm, lm, ids, dec, PRUNED, HOW, basis)
    return found
