"""The Python API as the docs print it: docs/notebook.md's code blocks and the README's "From
Python" section run top to bottom on tiny-llama, with no store argument, and give what they
say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
README_LINES = 15


def blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def section(text: str, title: str) -> str:
    """The text under ``## title`` up to the next ``## `` header, without blank edges."""
    start = text.index(f"## {title}\n") + len(f"## {title}\n")
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else None].strip("\n")


def run(code: str) -> dict:
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, "<docs>", "exec"), namespace)
    return namespace


def test_notebook_walkthrough_runs_as_printed(store_root, capsys):
    text = (ROOT / "docs" / "notebook.md").read_text()
    code = "\n".join(blocks(text))
    assert "store=" not in code and "RunStore" not in code  # no store argument anywhere
    ns = run(code)
    printed = capsys.readouterr().out
    dense, after, report = ns["dense"], ns["after"], ns["report"]
    # an in-memory model pruned, its perplexity before and after
    assert report.method == "wanda" and report.achieved_sparsity == pytest.approx(0.5)
    assert after.ppl != dense.ppl and after.n_windows == dense.n_windows == 8
    assert f"perplexity {dense.ppl:.2f} -> {after.ppl:.2f}" in printed
    assert ns["report_24"].layers["achieved_sparsity"].tolist() == pytest.approx([0.5] * 28)
    assert "refused:" in printed and "divisible by 7" in printed
    # compared on a text
    cmp = ns["cmp"]
    assert len(cmp.layers.kl) == 4 and cmp.dense.text and cmp.pruned.text is not None
    assert len(ns["fig"].data) == 2 * 1 and ns["fig_tokens"].data
    # a runs frame and a law fit on it
    frame = ns["frame"]
    assert frame["method"].tolist() == ["dense", *["magnitude"] * 5]
    assert frame["sparsity"].tolist()[1:] == [0.1, 0.2, 0.3, 0.4, 0.5]
    fit = ns["fit"]
    # a random model's perplexity hardly moves with s: κ ≈ 0, far from (A1)'s 1
    assert fit.verdict["joint"] == "rejected"
    assert abs(fit.laws.set_index("law").at["linear", "kappa"]) < 0.1
    assert fit.sentence in printed and len(fit.laws) == 4
    # the default store ($PRUNESCOPE_HOME, the test's own): nothing was stored
    assert len(ns["stored"]) == 0 and (store_root / "runs").is_dir()


def test_readme_from_python_section_runs_as_printed(store_root, capsys):
    text = (ROOT / "README.md").read_text()
    part = section(text, "From Python")
    assert len(part.splitlines()) <= README_LINES, part
    (code,) = blocks(part + "\n")
    ns = run(code)
    printed = capsys.readouterr().out.splitlines()
    dense_ppl, pruned_ppl = (float(x) for x in printed[0].split(" -> "))
    assert dense_ppl != pruned_ppl
    assert ns["report"].achieved_sparsity == pytest.approx(0.5)
    assert float(printed[-1].split(" ", 1)[0]) == pytest.approx(ns["cmp"].mean_nll_diff)
