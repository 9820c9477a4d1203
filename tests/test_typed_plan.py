"""Values typed once at the edge and resolved once by the plan: a method option is parsed by
its kind from the CLI or taken as the form's dataclass, the same choice gives the same run
id either way, planning builds the method once and the run executes the Plan it made
(roles of the model's family, the method object), handed over as an argument. Run
ids of configs with options are pinned from before this change."""

from __future__ import annotations

import json

import pytest

import core.runs.plan as plan_mod
from core.errors import ConfigError
from core.methods.attention_gd import AttentionGDOptions
from core.methods.options import typed_options
from core.names import family_roles
from core.planning.cost import method_flops, model_shape
from core.requests import request as requests
from core.runs.plan import plan_config
from core.settings.config import ModelSpec, PruneConfig, RunConfig

BASE = {
    "model": "smollm2-135m",
    "device": "cpu",
    "calib": "pydoc",
    "eval": "pydoc",
    "nsamples": 8,
    "calib_seqlen": 128,
    "seqlen": 128,
    "max_windows": 8,
}

# Run ids planned before options were typed at the edge (parsed with json.loads then).
# attention-gd's two were re-pinned when its options gained optimizer/refine/swap_evals and its
# defaults moved to Adam + swap search (issue 32), and again when they gained relax and
# anneal_weight (issue 45): a run id covers every option's value.
GD = ["lam=0.5", "rope=false", "init=ones"]
SPARSEGPT, NM = ["percdamp=0.02", "blocksize=64"], "2:4"
GD_OTHERS = ["others=sparsegpt", "steps=7", "checks=full"]
PINNED = [
    ("prune", {"method": "sparsegpt", "option": SPARSEGPT}, "8f190a6dadc97009"),
    ("prune", {"method": "magnitude", "option": ["scope=row"], "pattern": NM}, "82d054927dfc05d9"),
    ("prune", {"method": "attention-gd", "targets": "qk", "option": GD}, "6d8140d75e81986e"),
    ("prune", {"method": "wanda", "allocation": "owl", "sparsity": 0.6}, "1e7115958d3f15f7"),
    ("slice", {"sparsity": 0.3, "option": ["round_to=16", "slice_head=true"]}, "669f96bc6a752d66"),
    ("prune", {"method": "sparsegpt", "targets": "q,v,down"}, "3a204ee38acfb16a"),
    ("prune", {"method": "attention-gd", "option": GD_OTHERS}, "8c03654cb93f709a"),
]  # fmt: skip


@pytest.mark.parametrize("command, values, run_id", PINNED)
def test_run_ids_with_options_are_unchanged(command, values, run_id) -> None:
    assert requests.plan_request(command, {**BASE, **values}).run_id == run_id


def test_an_option_is_parsed_by_its_kind_and_the_form_gives_the_cli_s_id() -> None:
    given = {**BASE, "method": "attention-gd", "targets": "qk"}
    cli = requests.plan_request("prune", {**given, "option": ["lam=1", "rope=false"]})
    form = typed_options("attention-gd", {"lam": 1.0, "rope": False})
    assert isinstance(form, AttentionGDOptions)
    assert requests.plan_request("prune", {**given, "option": form}).run_id == cli.run_id
    assert dict(cli.prune.options)["lam"] == 1.0 and dict(cli.prune.options)["rope"] is False
    other = requests.plan_request("prune", {**given, "option": ["lam=2", "rope=false"]})
    assert other.run_id != cli.run_id  # negative control: another value, another run
    with pytest.raises(ConfigError, match="rope of attention-gd is true or false"):
        typed_options("attention-gd", ["rope=maybe"])
    with pytest.raises(ConfigError, match="steps of attention-gd takes an integer"):
        typed_options("attention-gd", ["steps=2.5"])
    assert typed_options("attention-gd", ["eta=none"]).eta is None


def test_a_plan_builds_its_method_once_and_a_job_file_is_planned_once(monkeypatch) -> None:
    built = []
    real = plan_mod.make_method
    monkeypatch.setattr(plan_mod, "make_method", lambda *a: built.append(a) or real(*a))
    planned = requests.plan_command("prune", {**BASE, "method": "wanda", "targets": "mlp"})
    assert len(built) == 1  # the plan's one method, handed to its checks
    assert planned.roles == ("gate", "up", "down") and planned.method.name == "wanda"
    assert requests.plan_request("prune", {**BASE, "method": "wanda", "targets": "mlp"}) == (
        planned.cfg
    )
    # a config read from a file (a background job) is planned once, from the file alone
    built.clear()
    again = plan_config(RunConfig.from_dict(json.loads(json.dumps(planned.cfg.to_dict()))))
    assert again.cfg == planned.cfg and again.roles == planned.roles and len(built) == 1
    assert again.method is not planned.method and again.method.options == planned.method.options


def test_roles_per_family_have_one_rule() -> None:
    opt = model_shape(ModelSpec("tiny-opt"))
    assert "gate" not in opt.linears()  # OPT's MLP is fc1/fc2: no gate is costed
    have, family = opt.geo.traits.roles, opt.geo.family
    assert family_roles("mlp", have, family) == ("up", "down")
    with pytest.raises(ConfigError, match="no gate projection"):
        family_roles("gate,up", have, family)
    with pytest.raises(ConfigError, match="no gate projection"):
        requests.plan_request("prune", {**BASE, "model": "tiny-opt", "targets": "gate"})
    cfg = requests.plan_request("prune", {**BASE, "model": "tiny-opt", "method": "sparsegpt"})
    per_role = {
        r: requests.plan_request(
            "prune", {**BASE, "model": "tiny-opt", "method": "sparsegpt", "targets": r}
        )
        for r in ("attention", "mlp")
    }
    assert method_flops(cfg, opt) == pytest.approx(
        sum(method_flops(c, opt) for c in per_role.values()), rel=1e-12
    )


def test_the_sparsity_range_is_one_rule() -> None:
    for bad in (1.0, -0.1, float("nan"), True):
        with pytest.raises(ConfigError, match="sparsity must be"):
            PruneConfig("wanda", bad)
    assert PruneConfig("wanda", 0.0).sparsity == 0.0  # positive control
