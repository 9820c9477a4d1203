"""Models side by side on one text (core.evaluation.side_by_side): the sides computed at once
are the ones computed one after the other, tokens reach the caller on its own thread, and a
failure on either side stops both."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

from core.evaluation.compare import layer_divergence, lens_of, trace
from core.evaluation.generate import Decoding, generate
from core.evaluation.side_by_side import side, sides

TEXT = "The cat sat on the mat because it was warm."
DEC = Decoding(6)


@pytest.fixture
def pair(tiny):
    """The tiny model and a copy with half of every layer's q_proj zeroed."""
    pruned = copy.deepcopy(tiny)
    for layer in pruned.adapter.layers:
        w = pruned.adapter.linears(layer, ("q",))["q"].weight
        w.data[:, : w.shape[1] // 2] = 0
    return tiny, pruned


def ids_of(lm) -> list[int]:
    return lm.tokenizer(TEXT)["input_ids"]


def test_a_side_runs_the_prompt_once_and_traces_it(tiny) -> None:
    ids = ids_of(tiny)
    s = side(tiny, ids, DEC)
    alone = trace(tiny, torch.tensor(ids))  # the prompt alone, no cache
    assert len(s.trace.states) == tiny.adapter.n_layers
    for a, b in zip(s.trace.states, alone.states, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s.trace.logits, alone.logits, rtol=1e-5, atol=1e-5)
    assert s.new_ids == generate(tiny, ids, DEC)
    assert s.nll.shape == (len(ids) - 1,)


def test_sides_at_once_equal_sides_one_after_the_other(pair) -> None:
    dense, pruned = pair
    ids = ids_of(dense)
    seen: list[tuple[str, int, int]] = []
    caller, threads = threading.get_ident(), torch.get_num_threads()
    got = sides(
        {"dense": dense, "pruned": pruned},
        ids,
        DEC,
        lambda who, tok: seen.append((who, tok, threading.get_ident())),
    )
    for name, lm in (("dense", dense), ("pruned", pruned)):
        alone = side(lm, ids, DEC)
        assert got[name].new_ids == alone.new_ids
        torch.testing.assert_close(
            torch.from_numpy(got[name].nll), torch.from_numpy(alone.nll), rtol=1e-5, atol=1e-5
        )
        # every token was handed over, in the order it was chosen, on the caller's thread
        assert [t for w, t, _ in seen if w == name] == alone.new_ids
    assert {thread for *_, thread in seen} == {caller}
    assert abs(got["dense"].nll - got["pruned"].nll).max() > 1e-3  # two different models
    assert torch.get_num_threads() == threads  # the workers set their own thread counts only


def test_a_failing_side_is_raised_in_the_caller(pair) -> None:
    dense, pruned = pair
    broken = copy.deepcopy(pruned)
    broken.adapter.layers[0].register_forward_hook(lambda *_: (_ for _ in ()).throw(KeyError))
    with pytest.raises(KeyError):
        sides({"dense": dense, "broken": broken}, ids_of(dense), DEC)


def test_a_caller_that_fails_on_a_token_stops_both(pair) -> None:
    dense, pruned = pair

    def refuse(who: str, tok: int) -> None:
        raise RuntimeError("the page asked to rerun")

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="rerun"):
        sides({"dense": dense, "pruned": pruned}, ids_of(dense), Decoding(64), refuse)
    assert threading.active_count() == before  # both workers finished (abandoned)


def test_the_lens_read_in_each_thread_is_the_one_read_after(pair) -> None:
    dense, pruned = pair
    got = sides({"dense": dense, "pruned": pruned}, ids_of(dense), DEC, lens={"dense", "pruned"})
    d, p = got["dense"], got["pruned"]
    for s, lm in ((d, dense), (p, pruned)):
        assert len(s.lens) == lm.adapter.n_layers
        for a, b in zip(s.lens, lens_of(lm, s.trace), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    after = layer_divergence(dense, d.trace, pruned, p.trace)
    within = layer_divergence(dense, d.trace, pruned, p.trace, None, d.lens, p.lens)
    assert within.dense_top == after.dense_top and within.pruned_top == after.pruned_top
    for x, y in ((within.kl, after.kl), (within.rel_error, after.rel_error)):
        torch.testing.assert_close(torch.tensor(x), torch.tensor(y), rtol=1e-4, atol=1e-6)
    assert max(after.kl) > 0
