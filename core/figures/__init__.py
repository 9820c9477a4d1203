"""Pure figure builders: pandas / numpy in, ``plotly.graph_objects.Figure`` out.

No Streamlit and no torch here, so the app, the CLI and notebooks draw the same charts
(``fig.write_html(...)`` needs no browser). Every builder takes plain columns and states them.
One module per subject: ``style`` (colours, layout), ``runs`` (perplexity vs sparsity, per-layer
charts), ``repdim`` (Paper A), ``attention`` (masks and attention heatmaps), ``gd`` (Paper B's
trajectories), ``recovery`` (a recovery fine-tune's curve, perplexity before and after).

    fig = ppl_vs_sparsity(df)            # df: method, sparsity, ppl[, series, dense_ppl]
    dens, (br, bc) = block_average(mask, max_cells=128 * 128)
"""

from core.figures.attention import (
    attention_heatmaps,
    block_average,
    head_error_bars,
    mask_heatmap,
)
from core.figures.gd import TRAJECTORY_PANELS, gd_trajectories
from core.figures.recovery import before_after, recovery_curve
from core.figures.repdim import (
    accuracy_vs_dprime,
    analytic_ppl,
    budget_chart,
    dimension_or_params_chart,
    effdim_layers,
    effdim_scatter,
    fitted_ppl,
    ppl_vs_dprime,
    ratio_vs_keep,
)
from core.figures.runs import (
    MAX_BAR_LAYERS,
    compare_frame,
    layer_error_chart,
    layer_sparsity_chart,
    ppl_vs_sparsity,
)
from core.figures.style import (
    ANALYTIC,
    ATTN_SCALE,
    DIFF_SCALE,
    FIT,
    LOG_AXIS,
    MASK_SCALE,
    METHOD_COLORS,
    color_of,
    curve,
    empty_figure,
    series_colors,
)
from core.names import DIM_KEY, is_dim_key, series_name

__all__ = [
    "ANALYTIC",
    "ATTN_SCALE",
    "DIFF_SCALE",
    "DIM_KEY",
    "FIT",
    "LOG_AXIS",
    "MASK_SCALE",
    "MAX_BAR_LAYERS",
    "METHOD_COLORS",
    "TRAJECTORY_PANELS",
    "accuracy_vs_dprime",
    "analytic_ppl",
    "attention_heatmaps",
    "before_after",
    "block_average",
    "budget_chart",
    "color_of",
    "compare_frame",
    "curve",
    "dimension_or_params_chart",
    "effdim_layers",
    "effdim_scatter",
    "empty_figure",
    "fitted_ppl",
    "gd_trajectories",
    "head_error_bars",
    "is_dim_key",
    "layer_error_chart",
    "layer_sparsity_chart",
    "mask_heatmap",
    "ppl_vs_dprime",
    "ppl_vs_sparsity",
    "ratio_vs_keep",
    "recovery_curve",
    "series_colors",
    "series_name",
]
