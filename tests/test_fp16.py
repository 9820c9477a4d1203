"""float16 as a dtype choice beside bfloat16/float32 (issue #16): weights and activations in
half precision, statistics still float32 (Gram sums float64), results close to float32."""

import pytest
import torch

from core.adapters import ROLES, ModelAdapter
from core.evaluation.perplexity import evaluate_perplexity
from core.machine.device import resolve_dtype
from core.models.load import LoadedModel, build_tiny_model
from core.pruning.apply import apply_prune
from core.pruning.layerwise import run_layerwise
from core.settings.config import PruneConfig

CPU = torch.device("cpu")


def _ids(n, L=32, seed=0):
    return torch.randint(0, 256, (n, L), generator=torch.Generator().manual_seed(seed))


def _lm(dtype):
    model = build_tiny_model("tiny-llama", dtype=dtype).eval()
    return LoadedModel(model, None, ModelAdapter.from_model(model), "tiny-llama", "tiny")


def test_fp16_names_resolve():
    assert resolve_dtype("fp16", CPU) is resolve_dtype("float16", CPU) is torch.float16


def test_statistics_stay_float32_for_a_float16_model():
    lm = _lm(torch.float16)
    seen = {}

    def grab(ctx):
        seen[ctx.index] = (ctx.stats["q"].gram.dtype, ctx.linears["q"].weight.dtype)
        return []

    run_layerwise(lm.adapter, _ids(4), grab, ROLES)
    assert set(seen.values()) == {(torch.float32, torch.float16)}


@pytest.mark.parametrize(
    "method,sparsity", [("wanda", 0.5), ("sparsegpt", 0.5), ("slicegpt", 0.25)]
)
def test_float16_pruning_is_close_to_float32(method, sparsity):
    win = _ids(6, seed=1)
    ppl = {}
    for dtype in (torch.float32, torch.float16):
        lm = _lm(dtype)
        apply_prune(lm, PruneConfig(method, sparsity), _ids(4), CPU)
        assert {p.dtype for p in lm.model.parameters()} == {dtype}
        ppl[dtype] = evaluate_perplexity(lm.model, win, 4).ppl
    assert ppl[torch.float16] == pytest.approx(ppl[torch.float32], rel=0.01)
