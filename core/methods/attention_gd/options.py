"""Options of ``attention-gd`` (Paper B's constants are unknown: papers.md §3 [U])."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from core.errors import ConfigError
from core.methods.linear import scope_option
from core.names import SCOPES
from core.settings.field import option

STEP_RULES = ("auto", "backtracking", "fixed")
OPTIMIZERS = ("gd", "adam", "lbfgs")
REFINES = ("none", "swap")
INITS = ("ones", "magnitude", "wanda", "random", "wanda_mask", "obd_mask")
BINARIZE_RULES = ("mask", "mask_times_weight")
LAM_SCHEDULES = ("constant", "anneal")
CHECKS = ("full", "sample", "none")
RELAXES = ("free", "polytope", "anneal", "topk")  # relax.py: the budget-keeping relaxations
OTHERS = ("none", "wanda", "sparsegpt")
CHECK_HESSIAN_AT = 3  # iterates of a judged run where the checks take the Hessian's top eigenvalue
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class AttentionGDOptions:
    """Options of ``attention-gd``.

    lam: relative weight λ_rel ≥ 0 of the ½λ‖M‖² penalty. The data term sums ½‖s − y‖²
        over n_rows = sequences × tokens × heads attention rows, the penalty over n_params
        mask entries, so the λ GD uses is λ = λ_rel · n_rows / n_params: at M = 1 the penalty
        equals λ_rel × (one unit of squared row error per attention row). Commensurate at any
        calibration size and head count (the old absolute λ = 1e-2 was ~10⁻³ of the data
        term's scale, hence invisible).
    lam_schedule: "constant" or "anneal" (continuation: three stages λ·10, λ, λ/10, each run
        to convergence within steps/3).
    optimizer: "gd" (Paper B's M ← M − η∇L with the ``step`` rule), "adam" (Adam, learning
        rate ``eta`` or 1e-2 = steppers.ADAM_LR, betas 0.9/0.999; no line search) or "lbfgs"
        (L-BFGS, 10 secant pairs, Armijo backtracking from t = 1; its first step is GD's η).
        Every optimiser stops by the same ``tol`` and cap; a run records whether the tolerance
        was reached ("converged") and how many steps it took.
    steps: cap T ≥ 0 on steps (0: no descent, M_T = M₀; with ``refine="swap"`` that is
        Wanda + swap). tol: stop when |L_t − L_{t+1}| ≤ tol·L_t (0 = run T).
    relax: what M descends on (``relax.py``): "free" (any real M; Paper B's relaxation),
        "polytope" (projected onto {0 ≤ M ≤ 1, each row keeps k} after every step),
        "anneal" (that projection plus a binarisation penalty ρ_t·Σ M(1 − M) rising to
        ``anneal_weight`` units of squared row error per attention row at M = ½; the default 1
        is ~10³ times the data term per row at Wanda's mask on smollm2-135m, relative error
        0.087, so the last steps must binarise) or "topk"
        (straight-through top-k: loss and gradient at each row's binary top k; its loss is
        piecewise constant, so it runs the cap, ``tol`` does not stop it). The budget
        readings need row scope and Adam ("polytope" also runs with plain GD); the assumption
        checks judge the free objective and skip them. The default stays "free" until the
        headroom table's rule picks one (docs/design-notes.md).
    step: "auto" (η = 1/L̂, L̂ = power-iteration curvature at M₀ raised by every secant),
        "backtracking" (descent-lemma backtracking from ``eta`` or 1, ×2 each step) or "fixed".
    eta: the fixed or first step (> 0); Adam's learning rate. power_iters: Hessian-vector
        products for "auto".
    init: M₀ = "ones" (Paper B's literal start: data term 0, step 1 only shrinks M),
        "magnitude" (|W| / row max), "wanda" (|W|·‖X_j‖ / row max), "random" (U(0, 1),
        seeded) or "wanda_mask" (Wanda's binary keep mask at the target: L(M₀) is Wanda's
        attention error and GD refines it): the scaled inits carry a baseline's ranking so
        binarising M₀ by M is that baseline's mask, and GD's moves are measurable against it;
        "obd_mask": the keep mask of the objective's own second-order saliency per row
        (Optimal Brain Damage on the attention error: saliency.py), per GQA group.
    refine: "swap" runs ``swaps.swap_search`` on each group's binarised objective from the
        binarised M_T (at most ``swap_evals`` loss evaluations per group; every row keeps its
        count, the loss never rises), "none" writes bin(M_T) as it is.
    binarize: keep the top entries by "mask" (M) or "mask_times_weight" (|M∘W|).
    scope: comparison group of the binarisation, "row" (output row) or "matrix".
    rope / causal / clip: RoPE before the product, causal softmax, project M onto [0, 1].
    max_seq: calibration sequences used (the first ones; the paper used 8). max_len: tokens
        per sequence used (the first ones), so the CLI's 512-token default windows cost what
        the app's 256 do (a step is O(L²)).
    checks: "full" runs the assumption checks (diagnostics.check_assumptions) on every GQA
        group; "sample" on one group per layer, group = layer index mod KV heads (fixed in
        advance, rotating so every group position is judged across the model) — the checks
        cost about twice the GD itself, so "sample" keeps a run near the GD's own cost;
        "none" skips them (the sweep). check_points: off-trajectory points per group.
    dtype: GD precision. others: how V/O/MLP are pruned in the same run. seed: for "random".

    Defaults: the reading with the lowest calibration attention error among those that move
    the mask in ``bench/attention_gd_headroom.py`` (docs/design-notes.md): Wanda's keep mask,
    150 Adam steps (tol 1e-5), then the swap search (20 evaluations per group), 8 sequences ×
    64 tokens (the table's smallest calibration size; a step costs O(tokens²): one loss and
    gradient of a group took 0.008 s on 8 × 64 tokens, 0.55 s on 8 × 320). On smollm2-135m at
    50 % it changes 2.8 % of the keep decisions (97.2 % of Wanda's kept entries shared) and
    lowers the calibration attention error from Wanda's 0.087 to 0.049, held-out 0.086 → 0.079.
    Paper B's literal reading is optimizer="gd", init="ones", refine="none"; Wanda's mask that
    does not move (init="wanda_mask", refine="none", optimizer="gd") is a baseline. λ_rel = 1e-3
    keeps the penalty below typical row errors.
    """

    lam: float = option(
        1e-3, "Mask penalty λ", "relative weight of ½λ‖M‖² (per attention row)", (0.0, 10.0)
    )
    lam_schedule: str = option(
        "constant", "λ schedule", "'anneal': λ·10, λ, λ/10", LAM_SCHEDULES, expert=True
    )
    optimizer: str = option(
        "adam", "Optimiser", "'gd' (Paper B), 'adam' or 'lbfgs'", OPTIMIZERS, expert=True
    )
    steps: int = option(150, "Gradient steps (at most)", "cap on steps per group", (0, 5000))
    tol: float = option(
        1e-5,
        "Stop when the loss changes less than",
        "relative, 0 = run every step",
        (0.0, 1.0),
        expert=True,
    )
    step: str = option("auto", "Step size rule", "'auto': 1/curvature", STEP_RULES, expert=True)
    eta: float | None = option(
        None, "Fixed or first step", "empty: from the curvature", (0.0, 1e6), expert=True
    )
    power_iters: int = option(
        3, "Curvature probes", "Hessian-vector products", (1, 100), expert=True
    )
    relax: str = option(
        "free", "Relaxation", "'free', or one that keeps each row's budget", RELAXES, expert=True
    )
    anneal_weight: float = option(
        1.0,
        "Binarisation penalty at the cap",
        "relax='anneal': per attention row at M = ½",
        (0.0, 100.0),
        expert=True,
    )
    init: str = option(
        "wanda_mask", "Starting mask", "the mask GD refines ('wanda_mask': Wanda's)", INITS
    )
    refine: str = option(
        "swap", "Refine the binary mask", "'swap': swap search on the objective", REFINES
    )
    swap_evals: int = option(20, "Swap-search evaluations", "per GQA group", (1, 1000), expert=True)
    binarize: str = option("mask", "Keep entries by", "M or |M∘W|", BINARIZE_RULES, expert=True)
    scope: str = scope_option("row", expert=True)
    rope: bool = option(
        True, "Rotary positions before the product", "as the model computes it", expert=True
    )
    causal: bool = option(True, "Causal softmax", "as the model computes it", expert=True)
    clip: bool = option(False, "Keep M in [0, 1]", "project after each step", expert=True)
    max_seq: int = option(8, "Calibration sequences used", "the first ones (paper: 8)", (1, 1024))
    max_len: int = option(64, "Tokens per sequence used", "a step costs O(tokens²)", (2, 8192))
    checks: str = option(
        "sample",
        "Assumption checks",
        "smoothness and PL judged on one GQA group per layer ('sample'), every group "
        "('full', about twice the time) or none",
        CHECKS,
    )
    check_points: int = option(
        4, "Check points per group", "off-path points", (1, 100), expert=True
    )
    dtype: str = option(
        "float32", "Precision of the descent", "float32 or float64", tuple(DTYPES), expert=True
    )
    others: str = option("none", "Prune V, O and the MLP with", "'none' keeps them dense", OTHERS)
    seed: int = option(
        0, "Seed of a random start", "used with the 'random' start", (0, 2**31 - 1), expert=True
    )

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"attention-gd: {msg}")

        check(math.isfinite(self.lam) and self.lam >= 0, f"lam must be >= 0, got {self.lam}")
        check(
            self.eta is None or (math.isfinite(self.eta) and self.eta > 0),
            f"eta must be > 0, got {self.eta}",
        )
        check(
            self.optimizer in OPTIMIZERS,
            f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}",
        )
        check(not (self.clip and self.optimizer == "lbfgs"), "clip does not apply to lbfgs")
        check(self.steps >= 0, f"steps must be >= 0, got {self.steps}")
        check(self.relax in RELAXES, f"relax must be one of {RELAXES}, got {self.relax!r}")
        check(
            math.isfinite(self.anneal_weight) and self.anneal_weight >= 0,
            f"anneal_weight must be >= 0, got {self.anneal_weight}",
        )
        if self.relax != "free":
            check(self.scope == "row", f"relax={self.relax!r} keeps a row budget: scope='row'")
            allowed = ("adam", "gd") if self.relax == "polytope" else ("adam",)
            check(
                self.optimizer in allowed,
                f"relax={self.relax!r} runs with optimizer in {allowed}, got {self.optimizer!r}",
            )
        check(math.isfinite(self.tol) and self.tol >= 0, f"tol must be >= 0, got {self.tol}")
        check(self.step in STEP_RULES, f"step must be one of {STEP_RULES}, got {self.step!r}")
        check(self.step != "fixed" or self.eta is not None, "step='fixed' needs eta")
        check(self.power_iters >= 1, f"power_iters must be >= 1, got {self.power_iters}")
        check(self.init in INITS, f"init must be one of {INITS}, got {self.init!r}")
        check(
            self.binarize in BINARIZE_RULES,
            f"binarize must be one of {BINARIZE_RULES}, got {self.binarize!r}",
        )
        check(
            self.lam_schedule in LAM_SCHEDULES,
            f"lam_schedule must be one of {LAM_SCHEDULES}, got {self.lam_schedule!r}",
        )
        check(self.checks in CHECKS, f"checks must be one of {CHECKS}, got {self.checks!r}")
        check(self.refine in REFINES, f"refine must be one of {REFINES}, got {self.refine!r}")
        check(self.swap_evals >= 1, f"swap_evals must be >= 1, got {self.swap_evals}")
        check(self.check_points >= 1, f"check_points must be >= 1, got {self.check_points}")
        check(self.scope in SCOPES, f"scope must be one of {SCOPES}, got {self.scope!r}")
        check(self.max_seq >= 1, f"max_seq must be >= 1, got {self.max_seq}")
        check(self.max_len >= 2, f"max_len must be >= 2, got {self.max_len}")
        check(self.dtype in DTYPES, f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        check(self.others in OTHERS, f"others must be one of {OTHERS}, got {self.others!r}")
