"""PruneScope from Python: the CLI's machinery on models a notebook already holds.

    from core import api
    model, tokenizer = api.load("tiny-llama")         # or any AutoModelForCausalLM of a family
    pruned, report = api.prune(model, tokenizer, "wanda", 0.5, calib="pydoc")
    api.perplexity(pruned, tokenizer, "pydoc").ppl
    api.compare(model, pruned, tokenizer, "The capital of France is").layers.kl
    api.runs()                                         # the store's runs as a DataFrame
    api.laws(frame).sentence                           # Paper A's laws and verdict on a frame

A thin facade: it checks its arguments once, as the CLI does (the same ``core.errors``),
and calls the modules that run the CLI and the app (``core.pruning.apply``,
``core.evaluation``, ``core.runs``, ``core.analysis``). Every call runs on the device the
model's weights are on. Nothing needs a store; ``prune(..., store=...)`` makes the stored run
the same CLI command would. ``compare_runs``, ``sweep_view`` and ``sweep_grid`` read what the
app's pages draw from a store (the notebooks the pages export call them). docs/notebook.md
walks through it.
"""

from core.api.evaluation import compare, perplexity
from core.api.frames import WINDOW_NLL, LawFit, laws, runs
from core.api.inputs import eval_data
from core.api.memory import load
from core.api.pruning import Pruned, PruneReport, open_store, prune
from core.api.views import SweepView, compare_runs, sweep_grid, sweep_view

__all__ = [
    "WINDOW_NLL",
    "LawFit",
    "PruneReport",
    "Pruned",
    "SweepView",
    "compare",
    "compare_runs",
    "eval_data",
    "laws",
    "load",
    "open_store",
    "perplexity",
    "prune",
    "runs",
    "sweep_grid",
    "sweep_view",
]
