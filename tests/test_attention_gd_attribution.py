"""The attribution rule of the headroom table (core/methods/attention_gd/attribution.py): each
label is produced by the synthetic control built to produce it and no other label is, over 50
draws each (≥ 90 %); a descent that does not move from Wanda's mask reads "optimiser" when
the search finds headroom; a held-out gain above 0 is not enough to rule out overfitting."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.attention_gd.attribution import (
    LABELS,
    RULE,
    Stages,
    attribute,
    control_stages,
)

DRAWS = 50


@pytest.mark.parametrize("label", LABELS)
def test_each_label_comes_from_its_own_control_and_no_other(label):
    rng = np.random.default_rng(LABELS.index(label))
    got = [attribute(control_stages(label, rng)) for _ in range(DRAWS)]
    rate = got.count(label) / DRAWS
    assert rate >= 0.9, (label, {lab: got.count(lab) for lab in LABELS})


def test_no_control_produces_another_controls_label():
    """Across the five controls, the confusion matrix is (near) diagonal: every off-diagonal
    label appears in at most 10 % of another control's draws."""
    rng = np.random.default_rng(7)
    for label in LABELS:
        got = [attribute(control_stages(label, rng)) for _ in range(DRAWS)]
        for other in LABELS:
            if other != label:
                assert got.count(other) / DRAWS <= 0.1, (label, other)


def test_a_descent_that_does_not_move_is_the_optimiser():
    """From M₀ = Wanda, a descent that stays there (C = G = W) beside a swap search that
    gains 0.036 reads "optimiser" (the old rule could not say so from Wanda's mask)."""
    st = Stages(0.0874, 0.0858, 0.0512, 0.0874, 0.0873, 0.0857)
    assert attribute(st) == "optimiser"


def test_a_small_held_out_gain_can_still_be_overfitting():
    """0.036 in-sample gain of the binarised mask, 0.006 held out (the swap search's numbers
    at 512 tokens): a held-out gain above 0 but below half the in-sample one is overfitting."""
    st = Stages(0.0874, 0.0858, 0.0512, 0.0500, 0.0512, 0.0794)
    assert attribute(st) == "overfitting"
    transfers = Stages(0.0874, 0.0858, 0.0512, 0.0500, 0.0512, 0.0600)
    assert attribute(transfers) == "none"


def test_the_rule_is_written_with_every_label():
    lines = [line.split()[1] for line in RULE.splitlines() if line[:4].strip().endswith(".")]
    assert lines == list(LABELS)  # numbered in the order the rule applies them
