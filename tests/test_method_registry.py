"""A new pruning method is its module and its registry line (``core.names.METHODS``): with
nothing else changed it is a CLI choice with its ``--option`` keys, the app's form fields,
an estimate from its own cost terms, a line of ``python -m core methods`` and a run. A method
without cost terms fails here, and the estimate refuses it instead of costing it silently."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest

import core.methods
import core.runs.prune
from core import names
from core.cli.main import build_parser, field_values, main
from core.errors import ConfigError
from core.methods import available_methods, get_method, make_method
from core.methods.base import Method
from core.methods.linear import LinearwiseMethod
from core.methods.options import EXPERT, option_fields, typed_options
from core.methods.work import LayerWork, MissingCostTerms, WorkShape
from core.planning.cost import method_flops, model_shape, prune_phase_flops
from core.planning.speed import Speed
from core.requests import request as requests
from core.requests.commands import command_fields
from core.runs import RunOptions, execute
from core.runs.estimate import estimate_seconds
from core.settings.config import ModelSpec
from core.settings.field import FLAG, FLOAT
from core.store.run_store import RunStore

# The whole of a new method: an options dataclass declared with ``option`` (words, ranges,
# an expert's flag), its cost terms and its weight rule.
TOY_MODULE = '''
from dataclasses import dataclass

from core.methods import register
from core.methods.linear import LinearwiseMethod, PrunedWeight, WeightJob
from core.methods.masks import score_mask
from core.settings.field import option


@dataclass(frozen=True)
class ToyOptions:
    power: float = option(2.0, "Score exponent", "prune the lowest |W|^power", (0.5, 4.0))
    flip: bool = option(False, "Prune the largest", "a negative control", expert=True)


@register
class ToyPower(LinearwiseMethod):
    """|W|^power pruning, a test's method."""

    name = "toy-power"
    options_cls = ToyOptions
    needs_gram = False

    def linear_products(self, out, inp, tokens, shared):
        return 3.0 * out * inp  # |W|^p, its sort and the mask

    def prune_weight(self, job: WeightJob) -> PrunedWeight:
        scores = job.W.abs() ** self.options.power
        mask = score_mask(-scores if self.options.flip else scores, job.sparsity, "row", job.nm)
        return PrunedWeight(job.W.masked_fill(mask, 0.0), mask)
'''
TINY = {
    "model": "tiny-llama",
    "device": "cpu",
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 2,
    "seqlen": 32,
    "max_windows": 2,
    "measure": "lean",
}
SPEED = Speed("cpu", 1e10)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy module on the path and its one registry line; both undone afterwards."""
    (tmp_path / "toy_power_method.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(core.methods, "_REGISTRY", dict(core.methods._REGISTRY))
    monkeypatch.setitem(names.METHODS, "toy-power", "toy_power_method")
    yield "toy-power"
    sys.modules.pop("toy_power_method", None)


def test_the_registry_is_the_one_list_of_methods() -> None:
    assert available_methods() == list(names.method_names())
    for command in ("prune", "sweep"):
        (field,) = [f for f in command_fields(command) if f.name == "method"]
        assert field.choices == names.method_names()


def test_a_new_method_appears_everywhere(toy, capsys) -> None:
    # the CLI: a --method choice, its options parsed once at the edge by their kinds
    with pytest.raises(SystemExit):
        main(["prune", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert f"wanda-sp, {toy})" in helptext  # --method: the registered names
    assert f"{toy}: power, flip" in helptext  # --option: its keys
    argv = ["prune", *[f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]]
    args = build_parser().parse_args([*argv, "--method", toy, "--option", "power=3"])
    cfg = requests.plan_request("prune", field_values(args))
    assert cfg.prune.method == toy
    assert dict(cfg.prune.options) == {"power": 3.0, "flip": False}
    with pytest.raises(ConfigError, match="no option pwr; its options: power, flip"):
        requests.plan_request("prune", {**TINY, "method": toy, "option": ["pwr=3"]})
    with pytest.raises(ConfigError, match="power of toy-power takes a number"):
        requests.plan_request("prune", {**TINY, "method": toy, "option": ["power=high"]})
    # the app's form: its fields and the typed options it sends give the CLI's run id
    fields = {f.name: f for f in option_fields(toy)}
    assert (fields["power"].kind, fields["power"].range) == (FLOAT, (0.5, 4.0))
    assert (fields["flip"].kind, fields["flip"].group) == (FLAG, EXPERT)
    form = typed_options(toy, {"power": 3.0, "flip": False})
    assert requests.plan_request("prune", {**TINY, "method": toy, "option": form}) == cfg
    assert toy in next(f for f in command_fields("sweep") if f.name == "method").choices
    # the estimate: the method's own terms, 3·out·in per targeted linear
    shape = model_shape(cfg.model)
    per_layer = sum(3.0 * o * i for o, i in shape.linears().values())
    assert method_flops(cfg, shape) == shape.geo.n_layers * per_layer
    seconds = estimate_seconds(cfg, speed=SPEED)
    assert math.isfinite(seconds) and seconds > 0
    # python -m core methods
    assert main(["methods", "--json"]) == 0
    listed = {m["method"]: m for m in json.loads(capsys.readouterr().out)["methods"]}
    assert listed[toy]["options"] == {"power": 2.0, "flip": False}
    assert listed[toy]["doc"] == "|W|^power pruning, a test's method."


def test_a_new_method_runs(toy, tmp_path, monkeypatch) -> None:
    """It runs, and the run prunes with the method object its plan built."""
    used, apply = [], core.runs.prune.apply_prune
    monkeypatch.setattr(
        core.runs.prune,
        "apply_prune",
        lambda *a, **kw: used.append(kw["method"]) or apply(*a, **kw),
    )
    store = RunStore(tmp_path / "store")
    plan = requests.plan_command("prune", {**TINY, "method": toy, "sparsity": 0.5})
    out = execute(plan, store, None, RunOptions())
    assert out["run_id"] == plan.cfg.run_id
    assert len(used) == 1 and used[0] is plan.method
    assert out["metrics"]["achieved_sparsity"] == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("method", available_methods())
def test_every_method_declares_its_cost_terms(method: str) -> None:
    """Positive control: each registered method's own terms, on every linear of a layer."""
    shape = model_shape(ModelSpec("tiny-llama"))
    roles = tuple(shape.linears())
    work = make_method(method).layer_work(WorkShape(shape.geo, shape.linears(), roles, 8, 128))
    assert isinstance(work, LayerWork)
    assert math.isfinite(work.products) and work.products > 0
    assert get_method(method).cost_overhead > 0


def test_a_method_without_cost_terms_is_refused(toy, monkeypatch) -> None:
    """Negative control: without its terms the estimate raises, it costs nothing silently."""
    cfg = requests.plan_request("prune", {**TINY, "method": toy})
    cls = get_method(toy)
    monkeypatch.delattr(cls, "linear_products")  # back to LinearwiseMethod's: none
    with pytest.raises(MissingCostTerms, match="toy-power"):
        estimate_seconds(cfg, speed=SPEED)
    with pytest.raises(MissingCostTerms):
        prune_phase_flops(cfg, model_shape(cfg.model))
    assert LinearwiseMethod.layer_work is not Method.layer_work  # the linear methods' sum
    with pytest.raises(MissingCostTerms):
        Method(None).layer_work(None)
