"""Figure builders: pure pandas/numpy in, plotly figures out; block averaging is exact."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core import figures


def traces(fig, kind: str | None = None) -> list:
    return [t for t in fig.data if kind is None or t.type == kind]


# ---- block_average -------------------------------------------------------------------------------
def test_block_average_small_is_unchanged() -> None:
    m = np.eye(4)
    dens, tile = figures.block_average(m, max_cells=16)
    assert tile == (1, 1)
    np.testing.assert_array_equal(dens, m)


def test_block_average_exact_tiles() -> None:
    m = np.zeros((4, 4))
    m[:2, :2] = 1
    m[2:, 2:] = [[1, 0], [0, 0]]
    dens, tile = figures.block_average(m, max_cells=4)
    assert tile == (2, 2)
    np.testing.assert_allclose(dens, [[1.0, 0.0], [0.0, 0.25]])


def test_block_average_partial_edge_tiles_average_what_they_cover() -> None:
    m = np.arange(25, dtype=float).reshape(5, 5)
    dens, (br, bc) = figures.block_average(m, max_cells=4)
    assert dens.shape == (2, 2) and br == bc == 3
    assert dens[0, 0] == pytest.approx(m[:3, :3].mean())
    assert dens[1, 1] == pytest.approx(m[3:, 3:].mean())  # a 2×2 edge tile


def test_block_average_large_mask_bounded_and_density_kept() -> None:
    rng = np.random.default_rng(0)
    mask = rng.random((4096, 1433)) < 0.3
    dens, (br, bc) = figures.block_average(mask, max_cells=128 * 128)
    assert dens.size <= 128 * 128
    assert dens.min() >= 0 and dens.max() <= 1
    # tiles are equal except at the edges: the tile-weighted mean is the mask's mean
    rows = np.diff(np.append(np.arange(0, 4096, br), 4096))
    cols = np.diff(np.append(np.arange(0, 1433, bc), 1433))
    weights = np.outer(rows, cols)
    assert (dens * weights).sum() / weights.sum() == pytest.approx(mask.mean())


@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros((2, 2, 2))])
def test_block_average_rejects_non_2d(bad) -> None:
    with pytest.raises(ValueError):
        figures.block_average(bad)


def test_mask_heatmap_is_bounded_and_titled() -> None:
    mask = np.ones((300, 500), dtype=bool)
    mask[:, :250] = False
    fig = figures.mask_heatmap(mask, "W_Q", max_cells=1000)
    z = np.asarray(fig.data[0].z)
    assert z.size <= 1000
    assert "50.0% kept" in fig.layout.title.text and "tiles" in fig.layout.title.text


# ---- perplexity charts ---------------------------------------------------------------------------
def test_ppl_vs_sparsity_one_line_per_series_and_dense_level() -> None:
    df = pd.DataFrame(
        {
            "method": ["wanda", "wanda", "magnitude"],
            "sparsity": [0.5, 0.3, 0.5],
            "ppl": [30.0, 22.0, 80.0],
            "dense_ppl": [20.0, 20.0, 20.0],
        }
    )
    fig = figures.ppl_vs_sparsity(df)
    names = [t.name for t in fig.data]
    assert {"wanda", "magnitude"} <= set(names)
    assert any(n.startswith("dense") for n in names)
    wanda = next(t for t in fig.data if t.name == "wanda")
    assert list(wanda.x) == [0.3, 0.5]  # sorted by sparsity
    assert fig.layout.yaxis.type == "log"


def test_empty_inputs_give_a_message_not_an_error() -> None:
    for fig in (
        figures.ppl_vs_sparsity(pd.DataFrame()),
        figures.layer_error_chart(pd.DataFrame()),
        figures.effdim_scatter(pd.DataFrame()),
        figures.gd_trajectories(pd.DataFrame()),
        figures.head_error_bars(pd.DataFrame()),
    ):
        assert fig.layout.annotations and not fig.data


def test_layer_charts_one_trace_per_role_bars_or_lines() -> None:
    layers = pd.DataFrame(
        {
            "layer": [0, 0, 1, 1],
            "role": ["q", "k", "q", "k"],
            "achieved_sparsity": [0.5, 0.5, 0.5, 0.5],
            "target_sparsity": [0.5] * 4,
            "rel_error": [0.1, 0.2, 0.15, 0.25],
        }
    )
    fig = figures.layer_sparsity_chart(layers)
    assert [t.name for t in traces(fig, "bar")] == ["q", "k"]
    err = figures.layer_error_chart(layers, log_y=True)
    assert err.layout.yaxis.type == "log"
    assert list(traces(err, "bar")[1].y) == [0.2, 0.25]
    many = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(30), 2),
            "role": ["q", "down"] * 30,
            "rel_error": np.linspace(0, 1, 60),
        }
    )
    lines = figures.layer_error_chart(many)
    assert [t.name for t in traces(lines, "scatter")] == ["q", "down"] and not traces(lines, "bar")


def test_analytic_and_fitted_relations() -> None:
    assert figures.analytic_ppl(20.0, 576, np.array([576]))[0] == pytest.approx(20.0)
    assert figures.analytic_ppl(20.0, 576, np.array([288]))[0] == pytest.approx(400.0)
    grid = np.array([200.0, 400.0, 576.0])
    np.testing.assert_allclose(
        figures.fitted_ppl(20.0, 576, grid, 1.0, 0.0), figures.analytic_ppl(20.0, 576, grid)
    )
    assert np.isnan(figures.fitted_ppl(20.0, 576, np.array([100.0]), -1.0, 0.0)[0])


def test_ppl_vs_dprime_draws_analytic_fit_measured_dense() -> None:
    sweep = pd.DataFrame({"d_prime": [512, 400, 288], "ppl": [25.0, 60.0, 350.0]})
    fig = figures.ppl_vs_dprime(sweep, ppl0=20.0, d=576, a=0.9, b=0.05)
    names = [t.name for t in fig.data]
    assert names[0].startswith("analytic") and fig.data[0].line.dash == "dash"
    assert any(n.startswith("fit") for n in names)
    assert any("measured" in n for n in names) and any(n.startswith("dense") for n in names)
    assert fig.layout.yaxis.type == "log"
    no_fit = figures.ppl_vs_dprime(sweep, 20.0, 576)
    assert not any(t.name.startswith("fit") for t in no_fit.data)


def test_ratio_vs_keep_identity_and_points() -> None:
    sweep = pd.DataFrame({"s_eff": [0.25, 0.5], "ppl": [20.0**1.5, 400.0]})
    fig = figures.ratio_vs_keep(sweep, 20.0)
    measured = next(t for t in fig.data if t.name == "measured")
    np.testing.assert_allclose(measured.x, [0.75, 0.5])
    np.testing.assert_allclose(measured.y, [1 / 1.5, 0.5])


def test_effdim_scatter_groups_methods_and_drops_missing() -> None:
    pts = pd.DataFrame(
        {
            "method": ["wanda", "slicegpt", "slicegpt", "magnitude"],
            "eff_dim": [300.0, 200.0, 400.0, np.nan],
            "ppl": [30.0, 80.0, 25.0, 50.0],
            "sparsity": [0.5, 0.5, 0.25, 0.5],
        }
    )
    fig = figures.effdim_scatter(pts)
    assert sorted(t.name for t in fig.data) == ["slicegpt", "wanda"]
    sliced = next(t for t in fig.data if t.name == "slicegpt")
    assert sliced.marker.symbol == "diamond" and list(sliced.x) == [200.0, 400.0]


# ---- attention and GD ----------------------------------------------------------------------------
def test_attention_heatmaps_three_panels_token_axes_causal_blank() -> None:
    L = 5
    dense = np.tril(np.ones((L, L)))
    dense /= dense.sum(1, keepdims=True)
    pruned = dense.copy()
    pruned[4] = [0.5, 0.5, 0, 0, 0]
    tokens = ["a", "b", "a", "c", "d"]
    fig = figures.attention_heatmaps(dense, pruned, tokens, "head 0")
    maps = traces(fig, "heatmap")
    assert len(maps) == 3
    assert list(fig.layout.xaxis.ticktext) == tokens  # repeated tokens stay apart
    assert np.isnan(np.asarray(maps[0].z, dtype=float)[0, 1])  # above the diagonal
    diff = np.asarray(maps[2].z, dtype=float)
    assert diff[4, 0] == pytest.approx(0.5 - 0.2)
    assert maps[2].zmin == -maps[2].zmax  # symmetric diverging scale
    # float32 on the wire: half the bytes per new prompt, the blanks still blank
    assert all(m.z.dtype == np.float32 for m in maps) and np.isnan(maps[0].z[0, 1])
    assert fig.to_plotly_json()["data"][0]["z"]["dtype"] == "f4"


def test_attention_heatmaps_margins_fit_the_labels_without_automargin() -> None:
    """No automargin (a second draw per new prompt); the margins grow with the longest token."""
    L = 4
    dense = np.tril(np.ones((L, L))) / np.arange(1, L + 1)[:, None]
    short = figures.attention_heatmaps(dense, dense, ["a", "b", "c", "d"])
    long = figures.attention_heatmaps(dense, dense, ["a", "·internationalization", "c", "d"])
    for fig in (short, long):
        axes = [fig.layout[k] for k in fig.layout.to_plotly_json() if k[1:5] == "axis"]
        assert len(axes) == 6 and all(ax.automargin is False for ax in axes)
    assert long.layout.margin.b > short.layout.margin.b
    assert long.layout.margin.l > short.layout.margin.l
    # 21 characters at ~7 px: the horizontal query labels need ~150 px, the -60° keys ~130
    assert long.layout.margin.l >= 150 and long.layout.margin.b >= 125


def test_head_error_bars_grouped_by_series() -> None:
    errs = pd.DataFrame(
        {
            "series": ["wanda s=0.5", "wanda s=0.5", "magnitude s=0.5"] * 1,
            "head": [0, 1, 0],
            "fro_rel": [0.1, 0.2, 0.3],
        }
    )
    fig = figures.head_error_bars(errs)
    assert sorted(t.name for t in fig.data) == ["magnitude s=0.5", "wanda s=0.5"]
    assert fig.layout.barmode == "group"


def test_gd_trajectories_panels_and_theory_lines() -> None:
    steps = np.arange(5)
    traj = pd.DataFrame(
        {
            "step": np.tile(steps, 2),
            "block": ["q head 0"] * 5 + ["k"] * 5,
            "loss": np.r_[2.0**-steps, 3.0**-steps],
            "grad_norm": 1.0,
            "lipschitz_est": 2.0,
            "pl_ratio": [0.5, 0.4, 0.0, np.nan, 0.3] * 2,
        }
    )
    theory = {"lipschitz_est": {"upper bound": 10.0, "bad": float("nan")}, "pl_ratio": {"μ̂": 0.3}}
    fig = figures.gd_trajectories(traj, theory)
    lines = [t for t in fig.data if t.name and "=" in t.name]
    assert sorted(t.name.split(" =")[0] for t in lines) == ["upper bound", "μ̂"]
    data_traces = [t for t in fig.data if t not in lines]
    assert len(data_traces) == 2 * 4  # two blocks × four panels
    pl = next(t for t in data_traces if t.yaxis == "y4")
    assert np.isnan(pl.y[2])  # zero dropped on a log axis
    assert all(fig.layout[f"yaxis{i}"].type == "log" for i in ("", "2", "3", "4"))


# ---- frames --------------------------------------------------------------------------------------
def test_compare_frame_keeps_finished_prunes_and_names_series() -> None:
    runs = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "kind": ["prune", "prune", "eval", "prune"],
            "status": ["done", "done", "done", "failed"],
            "model": ["m", "m", "m", "m"],
            "method": ["wanda", "wanda", None, "wanda"],
            "sparsity": [0.5, 0.5, None, 0.5],
            "pattern": ["unstructured", "2:4", None, "unstructured"],
            "ppl": [30.0, 40.0, 20.0, None],
            "achieved_sparsity": [0.49, None, None, None],
            "dense_ppl": [20.0, 20.0, None, None],
            "targets": ["all", "qk", None, "all"],
        }
    )
    out = figures.compare_frame(runs)
    assert list(out["run_id"]) == ["a", "b"]
    assert list(out["series"]) == ["wanda", "wanda 2:4 [qk]"]
    assert list(out["sparsity"]) == [0.49, 0.5]


def test_series_colors_keep_method_colours_and_stay_distinct() -> None:
    colors = figures.series_colors(["wanda", "wanda 2:4", "magnitude", "mystery"])
    assert colors["wanda"] == figures.METHOD_COLORS["wanda"]
    assert colors["magnitude"] == figures.METHOD_COLORS["magnitude"]
    assert len(set(colors.values())) == 4


def test_core_never_imports_streamlit_and_figures_not_torch() -> None:
    package = Path(figures.__file__).parent
    for path in package.parent.rglob("*.py"):
        imported = imported_modules(path)
        assert "streamlit" not in imported, path
    for path in package.glob("*.py"):
        assert "torch" not in imported_modules(path), path


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_effdim_layers_and_dimension_key_names() -> None:
    assert figures.is_dim_key("eff_dim_pca99") and figures.is_dim_key("mean_erank")
    assert figures.is_dim_key("effdim_final_erank_sv")
    assert figures.is_dim_key("pca90") and not figures.is_dim_key("ppl")
    effdim = pd.DataFrame(
        {
            "layer": [0, 1],
            "width": [64, 64],
            "pca99": [40, 42],
            "erank": [20.0, 21.0],
            "seconds": [0.1, 0.1],
        }
    )
    fig = figures.effdim_layers(effdim)
    assert [t.name for t in fig.data] == ["pca99", "erank", "width"]


def test_accuracy_vs_dprime_one_line_per_task_and_fit_curves() -> None:
    acc = pd.DataFrame(
        {
            "s": [0.0, 0.25, 0.0, 0.25],
            "d_prime": [64, 48, 64, 48],
            "task": ["piqa", "piqa", "boolq", "boolq"],
            "label": ["PIQA", "PIQA", "BoolQ", "BoolQ"],
            "acc": [0.7, 0.6, 0.6, 0.62],
            "acc_stderr": [0.03] * 4,
        }
    )
    fits = pd.DataFrame(
        {
            "task": ["piqa", "boolq", "mean"],
            "kappa": [0.6, np.nan, 0.1],
            "intercept": [-0.6, np.nan, -0.1],
        }
    )
    fig = figures.accuracy_vs_dprime(acc, fits)
    named = [t.name for t in fig.data if t.showlegend is not False]
    assert named == ["PIQA", "BoolQ"]
    curves = [t for t in fig.data if t.showlegend is False]
    assert len(curves) == 1  # boolq's fit is NaN: no curve
    assert curves[0].y[-1] == pytest.approx(0.7)  # the fitted curve passes acc_dense at d′ = d
    assert figures.accuracy_vs_dprime(acc.iloc[:0]).layout.annotations


def test_budget_chart_one_line_per_series_with_error_bars() -> None:
    pts = pd.DataFrame(
        {
            "series": ["wanda", "wanda", "slicegpt"],
            "kept_params": [0.9, 0.7, 0.8],
            "ppl": [20.0, 40.0, 50.0],
            "ppl_lo": [19.0, 38.0, 45.0],
            "ppl_hi": [21.0, 43.0, 56.0],
        }
    )
    fig = figures.budget_chart(pts)
    assert [t.name for t in fig.data] == ["slicegpt", "wanda"]
    assert list(fig.data[1].error_y.array) == [3.0, 1.0]  # sorted by kept fraction
    assert "no runs" in figures.budget_chart(pts.iloc[0:0]).layout.annotations[0].text


def test_kappa_range_chart_one_series_per_basis_primary_first_with_the_band() -> None:
    from core.figures.laws import kappa_range_chart

    rows = pd.DataFrame(
        [
            {"basis": b, "s_max": s, "n_points": n, "kappa": k, "kappa_lo": k - 0.1,
             "kappa_hi": k + 0.1}
            for b, shift in (("s", 0.02), ("s_eff", 0.0))
            for s, n, k in ((0.1, 1, np.nan), (0.15, 2, 1.05 + shift), (0.3, 4, 1.2 + shift))
        ]
    )  # fmt: skip
    fig = kappa_range_chart(rows)
    assert [t.name for t in fig.data] == ["achieved s_eff (primary)", "nominal s (sensitivity)"]
    primary = fig.data[0]
    assert list(primary.x) == [0.15, 0.3] and list(primary.y) == [1.05, 1.2]  # NaN κ left out
    assert list(primary.error_y.array) == pytest.approx([0.1, 0.1])
    band = fig.layout.shapes[0]
    assert (band.y0, band.y1) == pytest.approx((0.9, 1.1))
    empty = kappa_range_chart(rows.assign(kappa=np.nan))
    assert not empty.data and "cannot be fitted" in empty.layout.annotations[0].text


def test_difference_frame_says_which_differences_exclude_zero() -> None:
    from core.figures.laws import difference_frame

    rows = pd.DataFrame(
        [{"kind": "loo", "law": "a1", "other": "curved", "difference": -0.02,
          "difference_lo": -0.03, "difference_hi": -0.01, "excludes_zero": True},
         {"kind": "extrap", "law": "line", "other": "linear", "difference": 0.01,
          "difference_lo": -0.01, "difference_hi": 0.03, "excludes_zero": False}]
    )  # fmt: skip
    frame = difference_frame(rows)
    assert list(frame["law − other"]) == ["a1 − curved", "line − linear"]
    assert list(frame["score"]) == ["leave-one-s-out", "extrapolated"]
    assert list(frame["difference [95%]"]) == ["-2.0% [-3.0%, -1.0%]", "+1.0% [-1.0%, +3.0%]"]
    assert list(frame["excludes 0"]) == ["yes", "no"]
