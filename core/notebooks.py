"""Jupyter notebooks that rebuild a page's figure from the store: what the Compare,
Representation dimension and Sweeps pages' "Export notebook" buttons download.

Each notebook (nbformat 4) holds a short account of the view, a cell that makes this
checkout importable and names the store, a cell that reads the view's data through
``core.api`` (``compare_runs``, ``sweep_view``, ``sweep_grid``: what the page itself calls)
and cells that draw it with the page's own figure builders (``core.figures``). A figure is the
last expression of its cell, so Jupyter shows it; run as a script, nothing opens a browser.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from core.evaluation.generate import Decoding

ROOT = Path(__file__).resolve().parents[1]  # the checkout whose core the cells import


def _setup(store_root: str | Path) -> str:
    return (
        "import sys\n\n"
        f"sys.path.insert(0, {str(ROOT)!r})  # this PruneScope checkout\n"
        "from core import api\n\n"
        f"STORE = {str(store_root)!r}  # the results store the page read"
    )


def _notebook(title: str, intro: str, store_root: str | Path, cells: list[str]) -> str:
    """The notebook's JSON text: title and account, setup, then ``cells`` (code)."""
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# {title}\n\n{intro}"),
            new_code_cell(_setup(store_root)),
            *(new_code_cell(code) for code in cells),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nbformat.writes(nb)


def compare_notebook(
    store_root: str | Path, run_ids: list[str], text: str, dec: Decoding | None = None
) -> str:
    """The Compare page's figures for ``run_ids`` on ``text`` with decoding ``dec``."""
    dec = dec or Decoding()
    intro = (
        "Stored runs beside their dense model on one text, as PruneScope's Compare page shows "
        "them: each run's model is rebuilt from what it stored, both continue the text with "
        "the same decoding, and the figures show the per-token NLL difference and where, layer "
        "by layer, each run parts from the dense model (logit lens KL, output error)."
    )
    data = (
        f"TEXT = {text!r}\n"
        f"RUNS = {list(run_ids)!r}\n"
        "results = api.compare_runs(\n"
        f"    RUNS, TEXT, store=STORE, max_new_tokens={dec.max_new_tokens}, "
        f"temperature={dec.temperature!r},\n"
        f"    top_p={dec.top_p!r}, seed={dec.seed},\n"
        ")\n"
        "for name, r in results.items():\n"
        "    print(f'{name}: {r.pruned.text!r} (dense: {r.dense.text!r}), '\n"
        "          f'mean NLL change {r.mean_nll_diff:+.4f} nats')"
    )
    tokens = (
        "from core.figures.compare import token_nll_map\n\n"
        "first = next(iter(results.values()))\n"
        "token_fig = token_nll_map(first.tokens, {n: r.nll_diff for n, r in results.items()})\n"
        "token_fig"
    )
    layers = (
        "from core.figures.compare import layer_curves, layer_frame\n\n"
        "layer_fig = layer_curves(layer_frame(results))\n"
        "layer_fig"
    )
    return _notebook("Dense and pruned, side by side", intro, store_root, [data, tokens, layers])


def sweep_notebook(store_root: str | Path, run_id: str, basis: str = "s_eff") -> str:
    """The Representation dimension page's SliceGPT sweep figures for ``run_id``, its laws
    fitted against ``basis`` ('s_eff', the primary, or the nominal 's')."""
    intro = (
        "A stored SliceGPT sweep against Paper A's relation ln PPL₀/ln PPL = 1 − s, as "
        "PruneScope's Representation dimension page shows it: perplexity against the kept "
        "width d′ beside PPL₀^(d/d′), (A1)'s joint test and local first order, and the "
        "candidate laws that describe the curve (95% intervals over calibration seeds and "
        "evaluation windows)."
    )
    data = (
        f"view = api.sweep_view({run_id!r}, basis={basis!r}, store=STORE)\n"
        "print(view.sentence)\n"
        "view.sweep"
    )
    dprime = (
        "from core.figures import ppl_vs_dprime\n\n"
        "dprime_fig = ppl_vs_dprime(view.sweep, view.ppl0, view.d)\n"
        "dprime_fig"
    )
    laws = (
        "from core.figures.laws import laws_chart\n\n"
        "laws_fig = laws_chart(view.laws, view.measured, view.ppl0)\n"
        "laws_fig"
    )
    return _notebook("A SliceGPT sweep and Paper A's laws", intro, store_root, [data, dprime, laws])


def grid_notebook(store_root: str | Path, job_id: str) -> str:
    """The Sweeps page's curves of grid sweep ``job_id``."""
    intro = (
        "A grid sweep (methods × sparsities × patterns × allocations × calibration seeds) as "
        "PruneScope's Sweeps page draws it: perplexity against sparsity per method, with the "
        "seeds' spread, from the runs it stored."
    )
    data = f"table = api.sweep_grid({job_id!r}, store=STORE)\ntable"
    curves = (
        "from core.figures.sweeps import sweep_curves\n\n"
        "curves_fig = sweep_curves(table)\n"
        "curves_fig"
    )
    return _notebook("A grid sweep", intro, store_root, [data, curves])
