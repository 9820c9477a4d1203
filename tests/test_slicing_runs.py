"""SliceGPT runs, sweeps and the effective-dimension report through the pipeline and CLI."""

import dataclasses
import json

import pytest

from core.analysis import protocol
from core.analysis.uncertainty import Interval
from core.analysis.verdicts import FIRST_ORDER, first_order
from core.cli.main import build_parser, field_values, main
from core.errors import ConfigError
from core.requests.request import plan_request
from core.runs import effdim_report, run_prune, run_relation_sweep, run_slice
from core.runs.plan import plan_eval, relation_sweep_points
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=42)


def test_slice_run_is_smaller_and_stored(store):
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.25), CALIB, EVAL, store)
    m = res["metrics"]
    assert m["d"] == 64 and m["d_sliced"] == 48 and m["s_eff"] == 0.25
    assert m["n_layer_params_sliced"] < m["n_layer_params_dense"]
    assert m["latency_ms_dense"] > 0 and m["latency_ms"] > 0
    run = store.load(res["run_id"])
    assert run.record.kind == "slice" and "boundaries" in run.tables()
    assert run.table("effdim")["width"].max() <= 64


def test_slice_metrics_say_what_they_count(store):
    calib = CalibConfig(DataSpec("pydoc", "train"), nsamples=2, seqlen=64, seed=42)
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.25), calib, EVAL, store)
    m = res["metrics"]
    assert m["n_tokens"] == m["n_windows"] * 64 == 256  # evaluation tokens
    assert m["calib_tokens"] == 2 * 64  # the PCAs' calibration tokens
    assert m["latency"] == pytest.approx(m["latency_ms"] / m["latency_ms_dense"])
    # The tiny Llama ties its embeddings: slicing unties the head, so parameters can grow.
    assert m["kept_params"] == pytest.approx(m["n_params_sliced"] / m["n_params_dense"], rel=0.01)
    windows = store.load(res["run_id"]).table("eval_windows")
    assert len(windows) == 4 and windows["nll"].mean() == pytest.approx(m["nll"])


def test_slice_at_zero_keeps_perplexity(store):
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.0), CALIB, EVAL, store)
    assert res["metrics"]["ppl"] == pytest.approx(res["metrics"]["dense_ppl"], rel=1e-4)


def test_prune_dispatches_slicegpt(store):
    res = run_prune(MODEL, PruneConfig("slicegpt", 0.5), CALIB, EVAL, store)
    assert store.get(res["run_id"]).kind == "slice" and res["metrics"]["d_sliced"] == 32


def test_sweep_relation_and_effdim(store):
    res = run_relation_sweep(MODEL, (0.0, 0.25, 0.5), CALIB, EVAL, store)
    sweep = store.load(res["run_id"]).table("sweep")
    assert sweep["d_prime"].tolist() == [64, 48, 32]
    assert sweep["predicted_ppl"].iloc[0] == pytest.approx(res["metrics"]["ppl0"])
    assert {"a", "b", "r2", "ppl0"} <= set(res["metrics"])
    run_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL, store)
    groups = effdim_report(store)["groups"]
    assert len(groups) == 1 and {r["method"] for r in groups[0]["rows"]} == {"slicegpt", "wanda"}


@pytest.mark.parametrize(
    "s, message", [(1.0, "sparsity"), (-0.1, "sparsity"), (0.99, "rounds down to 0")]
)
def test_bad_slicing(store, s, message):
    with pytest.raises(ConfigError, match=message):
        run_slice(MODEL, PruneConfig("slicegpt", s), CALIB, EVAL, store)


def test_slicegpt_rejects_nm(store):
    with pytest.raises(ConfigError):
        run_prune(MODEL, PruneConfig("slicegpt", 0.5, "2:4"), CALIB, EVAL, store)


def test_cli_slice_sweep_effdim(capsys, store_root, tiny_flags):
    common = tiny_flags
    assert main(["slice", "--sparsity", "0.25", *common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["d_sliced"] == 48
    assert main(["sweep", "--sparsities", "0,0.125,0.25,0.5", *common]) == 0
    out = capsys.readouterr().out
    # the report leads with the joint test and the local first order, on the achieved s_eff
    assert out.index("joint test of kappa = kappa2 = 1") < out.index("laws, describing the curve")
    assert "not the primary protocol (a sensitivity analysis)" in out
    assert "sensitivity, against the nominal s" in out
    assert main(["sweep", "--sparsities", "0,0.125,0.25,0.5", *common, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]  # the stored sweep, reused
    assert {"joint_w", "joint_p", "joint", "kappa_local_lo", "kappa_local_hi"} <= set(m)
    assert m["local_smax"] == protocol.LOCAL_SMAX and m["local_points"] == 1  # s = 0.125 only
    assert [r["s_max"] for r in m["kappa_range"]] == list(protocol.FIT_RANGES)
    assert [p["n_seeds"] for p in m["points"]] == [1, 1, 1, 1]  # one seed: --seed alone
    assert main(["effdim", "--store", str(store_root)]) == 0
    assert "predicted" in capsys.readouterr().out
    assert main(["sweep", "--sparsities", "0,x", *common]) == 2
    assert "--sparsities" in capsys.readouterr().err


def test_sweep_over_seeds_has_intervals_and_a_verdict(store):
    res = run_relation_sweep(MODEL, (0.0, 0.25, 0.5), CALIB, EVAL, store, seeds=(0, 1))
    m = res["metrics"]
    assert m["n_seeds"] == 2 and m["n_windows"] == 4
    for sfx in ("", "_nominal"):  # the primary basis s_eff, then the nominal sensitivity
        assert m["a_lo" + sfx] <= m["a" + sfx] <= m["a_hi" + sfx]
        assert m["first_order" + sfx] in FIRST_ORDER
        assert m["sentence" + sfx].startswith("(A1)")
        assert m["joint_points" + sfx] == 2  # s > 0 only: the s = 0 point is not scored
    assert m["basis"] == "s_eff" and m["basis_nominal"] == "s"
    assert {r["law"] for r in m["laws"]} == {"a1", "line", "linear", "curved"}
    assert m["protocol"]["n_windows"] == 4 and m["protocol"]["n_seeds"] == 2
    assert m["protocol"]["name"] == "none"
    assert [p["n_seeds"] for p in m["points"]] == [2, 2, 2]
    table = store.load(res["run_id"]).table("sweep")
    assert (table["ppl_lo"] <= table["ppl"]).all() and (table["ppl"] <= table["ppl_hi"]).all()
    assert all(len(ids.split(",")) == 2 for ids in table["run_ids"])
    # The seeds are ordinary slice runs: the same (s, seed) planned alone has the same id.
    one = run_slice(
        MODEL, PruneConfig("slicegpt", 0.25), dataclasses.replace(CALIB, seed=1), EVAL, store
    )
    assert one["cached"] and one["run_id"] in table["run_ids"].iloc[1]


def test_a_sweep_states_the_verdict_its_own_intervals_give(store):
    """A random tiny model predicts near uniformly, so slicing hardly moves its perplexity:
    κ ≈ 0, far from (A1)'s 1. Sliced at s ≤ 0.15 (round_to=1: every point its own d′) the
    sweep must store what its intervals give — (A1) rejected, the first order departing —
    not a default, on both bases."""
    grid = (0.05, 0.1, 0.15, 0.5)
    res = run_relation_sweep(
        MODEL, grid, CALIB, EVAL, store, options=(("round_to", 1),), seeds=(0, 1)
    )
    m = res["metrics"]
    for sfx in ("", "_nominal"):
        kappa = Interval(
            m["kappa_local" + sfx], m["kappa_local_lo" + sfx], m["kappa_local_hi" + sfx]
        )
        assert kappa.hi < 0.9 and m["local_points" + sfx] == 3
        assert m["first_order" + sfx] == first_order(kappa) == "departs"
        assert m["joint" + sfx] == "rejected" and m["joint_p" + sfx] < 0.05


# The CLI line every point of the primary protocol's background sweeps was run with.
SLICE_LINE = (
    "slice --model {model} --sparsity {s} --seed {seed} --calib wikitext2 --calib-sampler "
    "window --nsamples {CALIB_NSAMPLES} --calib-seqlen {CALIB_SEQLEN} --eval wikitext2 --split "
    "test --seqlen {EVAL_SEQLEN} --max-windows {EVAL_WINDOWS} --measure lean --data-dir {data} "
    "--quiet --json"
)


@pytest.fixture
def tiny_protocol(monkeypatch):
    """The primary protocol with lengths the tiny Llama's context holds (its values are read
    when a sweep is planned, so this is the planning path the real models take)."""
    small = {"EVAL_SEQLEN": 64, "EVAL_WINDOWS": 4, "CALIB_SEQLEN": 32, "CALIB_NSAMPLES": 4}
    for name, value in small.items():
        monkeypatch.setattr(protocol, name, value)
    return small


def test_primary_protocol_plans_the_slice_runs_the_cli_makes(tiny_protocol, shared_data):
    """sweep --method slicegpt --protocol primary plans exactly the protocol's points (its
    grid without s = 0, MIN_SEEDS seeds for a model it does not name), each with the run id
    the background sweeps' `slice` line gives for the same (s, seed); s = 0 is the dense eval
    run every slice run makes."""
    data = str(shared_data)
    line = ["sweep", "--method", "slicegpt", "--protocol", "primary", "--model", "tiny-llama"]
    args = build_parser().parse_args([*line, "--device", "cpu", "--data-dir", data])
    cfg = plan_request("sweep", field_values(args))
    assert cfg.extra_value("protocol") == "primary" and cfg.measure == "lean"
    points = relation_sweep_points(cfg)
    assert [s for s, _ in points] == list(protocol.GRID) and 0.0 not in cfg.extra_value(
        "sparsities"
    )
    seeds = tuple(range(protocol.MIN_SEEDS))
    for s, configs in points:
        assert tuple(c.calib.seed for c in configs) == seeds
        for c in configs:
            flags = SLICE_LINE.format(
                model="tiny-llama", s=s, seed=c.calib.seed, data=data, **tiny_protocol
            ).split()
            one = build_parser().parse_args([*flags, "--device", "cpu"])
            planned = plan_request("slice", field_values(one))
            assert planned.run_id == c.run_id, (s, c.calib.seed)
    dense = plan_eval(cfg.model, cfg.eval).cfg
    assert dense.eval.seqlen == 64 and dense.eval.max_windows == 4 and dense.calib is None


def test_primary_protocol_values_and_refusals(shared_data):
    from core.requests.protocol_fields import primary_values, protocol_seeds

    values = primary_values("smollm2-135m")
    assert values["seeds"] == "0,1,2,3,4" and protocol_seeds("gemma3-270m") == (0, 1, 2)
    assert (values["seqlen"], values["max_windows"], values["nsamples"]) == (2048, 16, 32)
    assert values["calib_seqlen"] == 512 and values["measure"] == "lean"
    assert values["sparsities"].split(",")[0] == "0.025" and "0," not in values["sparsities"]
    base = {"model": "tiny-llama", "device": "cpu", "protocol": "primary"}
    with pytest.raises(ConfigError, match="drop --seqlen 128"):
        plan_request("sweep", {**base, "seqlen": 128})
    with pytest.raises(ConfigError, match="--tasks"):
        plan_request("sweep", {**base, "tasks": "piqa"})
    from core.requests.request import grid_spec

    with pytest.raises(ConfigError, match="relation sweep"):
        grid_spec({**base, "method": "wanda"})
