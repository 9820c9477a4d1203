"""Paper B: pruning Q/K by gradient descent on the attention-matrix error (papers.md §3, §7).

One concept per module: ``objective`` (loss + closed-form gradient), ``optimiser`` (M₀, λ
schedule, step rule, stopping), ``steppers`` (Adam, L-BFGS), ``relax`` (relaxations that keep
the budget), ``swaps`` (the swap search), ``saliency`` (OBD on the objective), ``diagnostics``
(assumption checks that can fail) and ``group_view`` (a group as they see it), ``bound`` (the
analytical Lipschitz bound), ``controls`` / ``synthetic_layer`` / ``power`` / ``verdict_notes``
(the checks' controls and stated power), ``attribution`` / ``headroom`` (the headroom
table's rules and stored analysis), ``options`` and ``method`` (the registered
``attention-gd``). The rules that judge it from stored readings are analysis:
``core.analysis.gd_choice`` (which reading is the default) and ``core.analysis.gd_ablation``
(which component earns the gain).
Importing this package registers the method (the registry loads it by module name).
"""

from core.methods.attention_gd.bound import lipschitz_upper_bound, spectral_norms
from core.methods.attention_gd.diagnostics import (
    RULE,
    VERDICTS,
    AutogradObjective,
    check_assumptions,
    descend,
)
from core.methods.attention_gd.group_view import GroupObjective
from core.methods.attention_gd.method import AttentionGD, binarize, head_extras, mask_scores
from core.methods.attention_gd.objective import (
    GroupProblem,
    HeadExtras,
    LossGrad,
    to_heads,
    to_linear,
)
from core.methods.attention_gd.optimiser import (
    GroupResult,
    effective_lam,
    gd_prune_group,
    initial_mask,
)
from core.methods.attention_gd.options import (
    BINARIZE_RULES,
    INITS,
    LAM_SCHEDULES,
    AttentionGDOptions,
)

__all__ = [
    "BINARIZE_RULES",
    "INITS",
    "LAM_SCHEDULES",
    "RULE",
    "VERDICTS",
    "AttentionGD",
    "AttentionGDOptions",
    "AutogradObjective",
    "GroupObjective",
    "GroupProblem",
    "GroupResult",
    "HeadExtras",
    "LossGrad",
    "binarize",
    "check_assumptions",
    "descend",
    "effective_lam",
    "gd_prune_group",
    "head_extras",
    "initial_mask",
    "lipschitz_upper_bound",
    "mask_scores",
    "spectral_norms",
    "to_heads",
    "to_linear",
]
