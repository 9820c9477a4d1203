import math

import torch

from core.data import eval_windows
from core.evaluation.perplexity import evaluate_perplexity, window_nll


class FixedLM(torch.nn.Module):
    """Logits that do not depend on the input: every position predicts the same distribution."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits, requires_grad=False)

    def forward(self, input_ids, use_cache=False):
        B, L = input_ids.shape
        return type("Out", (), {"logits": self.logits.expand(B, L, -1)})()


def test_window_nll_matches_hand_computation():
    # vocab 3, p = softmax([0, ln 2, ln 3]) = [1/6, 2/6, 3/6]
    lm = FixedLM(torch.tensor([0.0, math.log(2), math.log(3)]))
    ids = torch.tensor([[0, 1, 2, 2], [2, 0, 0, 1]])
    # window 1 targets 1,2,2 -> -(ln 2/6 + 2 ln 3/6)/3 ; window 2 targets 0,0,1
    w1 = -(math.log(2 / 6) + 2 * math.log(3 / 6)) / 3
    w2 = -(2 * math.log(1 / 6) + math.log(2 / 6)) / 3
    nll = window_nll(lm(ids).logits, ids)
    assert torch.allclose(nll.double(), torch.tensor([w1, w2], dtype=torch.float64), atol=1e-6)
    res = evaluate_perplexity(lm, ids, batch_size=1)
    assert math.isclose(res.ppl, math.exp((w1 + w2) / 2), rel_tol=1e-6)
    assert res.n_windows == 2 and res.n_tokens == 8 and res.seqlen == 4


def test_perplexity_independent_of_batch_size(tiny):
    windows = torch.randint(0, 256, (5, 32), generator=torch.Generator().manual_seed(0))
    a = evaluate_perplexity(tiny.model, windows, batch_size=1)
    b = evaluate_perplexity(tiny.model, windows, batch_size=4)
    assert math.isclose(a.ppl, b.ppl, rel_tol=1e-5)
    assert a.tokens_per_s > 0


def test_eval_windows_drop_remainder(tiny):
    from core.data import Corpus

    corpus = Corpus("x", "test", ("a" * 100, "b" * 50), "\n\n", "mem", False)
    w = eval_windows(tiny.tokenizer, corpus, 30)  # 152 byte tokens -> 5 windows, 2 dropped
    assert w.shape == (5, 30)
    assert eval_windows(tiny.tokenizer, corpus, 30, max_windows=2).shape == (2, 30)


def test_chunked_scoring_matches_full_logits(tiny, monkeypatch):
    import core.evaluation.perplexity as perplexity

    windows = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = window_nll(tiny.model(input_ids=windows).logits, windows)
    monkeypatch.setattr(perplexity, "LOGIT_CHUNK", 7)  # chunks that straddle windows
    with torch.no_grad():
        chunked = perplexity._window_nll_chunked(tiny.adapter, windows)
    assert torch.allclose(full, chunked, atol=1e-5)


def test_window_nlls_are_recorded_in_order_and_average_to_the_nll(tiny):
    windows = torch.randint(0, 256, (5, 24), generator=torch.Generator().manual_seed(3))
    res = evaluate_perplexity(tiny.model, windows, batch_size=2)
    assert len(res.window_nll) == 5
    assert math.isclose(sum(res.window_nll) / 5, res.nll, rel_tol=1e-12)
    with torch.no_grad():
        first = window_nll(tiny.model(input_ids=windows[:1]).logits, windows[:1])
    assert math.isclose(res.window_nll[0], float(first), rel_tol=1e-5)
    assert "window_nll" not in res.to_dict()
    assert res.window_rows()[4] == {"window": 4, "nll": res.window_nll[4]}
