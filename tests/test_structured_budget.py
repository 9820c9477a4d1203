"""A parameter budget mapped to each structured method's knob: the pure functions on a
hand-sized decoder, and the counts they use against the parameters real (tiny) models hold."""

from __future__ import annotations

import pytest
import torch

from core.errors import ConfigError
from core.methods import make_method
from core.methods.base import ApplyPlan
from core.methods.slicegpt import slice_model
from core.methods.slicegpt.budget import removed_at, slicing_for_width, width_for_budget
from core.methods.slicegpt.rotation import sliced_width
from core.methods.structure.budget import DecoderCounts, config_counts, measure_counts
from core.methods.structure.flap import flap_knob, flap_target
from core.methods.structure.shortgpt import layers_to_remove, shortgpt_knob
from core.methods.structure.wanda_sp import uniform_counts, wanda_sp_knob
from core.models.load import load_model, tiny_config
from core.settings.patterns import parse_budget
from tests.family_helpers import ids, randomized

# A hand-sized decoder: 10 layers of 1000 parameters; 4 KV groups of 100 and 50 MLP channels
# of 10 (900 in structures, 100 in norms); d = 16 with heads of 4.
HAND = DecoderCounts(
    n_layers=10,
    hidden=16,
    head_dim=4,
    layer=1000,
    n_groups=4,
    group=100,
    n_channels=50,
    channel=10,
    writer_bias=32,
    slice_in=40,
    slice_out=10,
    slice_const=8,
)


def test_budget_flag_reads_params_and_refuses_anything_else() -> None:
    assert parse_budget("params=0.25") == 0.25
    assert parse_budget(None) is None and parse_budget("") is None
    for bad in ("0.25", "latency=0.2", "params=x", "params=1.2", "params=0"):
        with pytest.raises(ConfigError):
            parse_budget(bad)


def test_shortgpt_removes_the_nearest_whole_number_of_layers() -> None:
    assert shortgpt_knob(HAND, 0.25).what == "2 of 10 layers"  # 2.5 layers: a tie, fewer
    assert shortgpt_knob(HAND, 0.26).sparsity == pytest.approx(0.3)  # 2.6 -> 3
    assert shortgpt_knob(HAND, 0.34).removed == pytest.approx(0.3)  # 3.4 -> 3
    for s, n in ((0.3, 3), (1 / 3, 3), (0.1, 1)):  # the knob back to a count, float-safe
        assert layers_to_remove(s, 10) == n
    with pytest.raises(ConfigError, match="1 to 9 whole layers"):
        shortgpt_knob(HAND, 0.04)  # 0.4 layers rounds to none


def test_wanda_sp_ratio_is_the_one_nearest_the_budget() -> None:
    # at r: ⌊4r⌋ groups of 100 and ⌊50r⌋ channels of 10 per layer of 1000
    assert uniform_counts(0.5, 4, 50) == (2, 25)
    assert uniform_counts(0.99, 4, 50) == (3, 49)  # one of each is always kept
    knob = wanda_sp_knob(HAND, 0.25)
    # r = 0.25: 1 group + 12 channels = 220 of 1000; r = 0.26: 1 + 13 = 230; ... the nearest
    # to 250 is r = 0.3 (1 group, 15 channels: 250 exactly)
    assert knob.sparsity == pytest.approx(0.3) and knob.removed == pytest.approx(0.25)
    assert knob.what == "1 of 4 KV groups and 15 of 50 MLP channels per layer"
    # no ratio on a fine grid comes nearer than the knob's, for any budget
    for budget in (0.05, 0.37, 0.61):
        grid = [uniform_counts(i / 1000, 4, 50) for i in range(1000)]
        brute = min(abs((g * 100 + c * 10) / 1000 - budget) for g, c in grid)
        assert abs(wanda_sp_knob(HAND, budget).removed - budget) == pytest.approx(brute)


def test_flap_target_counts_the_biases_it_adds() -> None:
    assert flap_target(HAND, 0.25, bias=False) == 2500
    assert flap_target(HAND, 0.25, bias=True) == 2500 + 10 * 32
    assert flap_knob(HAND, 0.25).sparsity == 0.25
    with pytest.raises(ConfigError, match="keep every layer"):
        flap_knob(HAND, 0.77)  # a group and a channel kept: 7900 of 10000, less the biases


def test_slicegpt_width_is_the_nearest_multiple() -> None:
    # a sliced layer of widths (w, w, w_out) holds 40w + 10w_out + w² + w·w_out + 8
    assert HAND.sliced_layer(8, 16) == 40 * 8 + 10 * 16 + 64 + 128 + 8
    # nine layers of (8, 8, 8): 536 each; the last writes d = 16: 680
    assert removed_at(HAND, 8) == pytest.approx(1 - (9 * 536 + 680) / 10000)
    knob = width_for_budget(HAND, 0.5, round_to=4)
    best = min((4, 8, 12, 16), key=lambda w: (abs(removed_at(HAND, w) - 0.5), -w))
    assert knob.what == f"d′ = {best} of 16"
    for d, w in ((576, 440), (576, 432), (64, 48), (2048, 1536), (960, 720)):
        assert sliced_width(d, slicing_for_width(d, w), 8) == w


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-opt", "tiny-qwen2"])
def test_counts_from_the_config_are_the_models_own(name: str) -> None:
    """The meta-device counts equal the loaded model's, and removing structures removes
    exactly what they say."""
    lm = load_model(name)
    counts = config_counts(tiny_config(name))
    assert counts == measure_counts(lm.adapter)
    assert counts.decoder == sum(p.numel() for p in lm.adapter.layers.parameters())
    for method, budget in (("wanda-sp", 0.3), ("shortgpt", 0.5)):
        lm = load_model(name)
        m = make_method(method)
        knob = m.budget_knob(counts, budget)
        rep = m.apply(
            lm, ids(2, 16), ApplyPlan(knob.sparsity, (), "unstructured", torch.device("cpu"))
        )
        assert rep.params_removed == pytest.approx(knob.removed, abs=1e-12)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-opt"])
def test_slicegpt_counts_match_a_sliced_model(name: str) -> None:
    model, ad = randomized(name)
    counts = measure_counts(ad)
    rep = slice_model(model, ids(2, 16), 0.25)
    w = rep.d_sliced
    assert rep.n_layer_params_dense == counts.decoder
    assert 1 - rep.n_layer_params_sliced / rep.n_layer_params_dense == pytest.approx(
        removed_at(counts, w), abs=1e-12
    )
