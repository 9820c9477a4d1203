"""Grid sweeps of any method: grid resolution and validation, the sweep table, heartbeat
liveness and run-folder import in the store, executors' bad input, an in-process sweep."""

import json
import math
import os
import socket
import sqlite3
import time

import pytest
from sweep_helpers import start_killer

from core.cli.main import build_parser, field_values, main
from core.cli.sweep_command import sweep_kind
from core.errors import ConfigError, StoreError, SweepError
from core.names import GRID_SWEEP, RELATION_SWEEP
from core.requests.request import plan_request
from core.runs import plan_prune, plan_slice
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
)
from core.store.heartbeat import STALE_S, Heartbeat, run_alive
from core.store.run_store import RunStore
from core.sweeps import ray_cluster
from core.sweeps.executors import LocalExecutor, make_executor
from core.sweeps.grid import GridJob, GridSpec, resolve_grid
from core.sweeps.orchestrate import run_sweep_grid, sweep_table, table_records
from core.sweeps.workers import pack_runs, unpack_runs

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)


def spec(**kw) -> GridSpec:
    base = {
        "model": MODEL,
        "methods": ("magnitude",),
        "sparsities": (0.5,),
        "calib": CALIB,
        "eval": EVAL,
    }
    return GridSpec(**{**base, **kw})


# ---- grid ----------------------------------------------------------------------------------------
def test_grid_has_the_ids_of_single_runs_dense_first_each_once():
    s = spec(methods=("wanda", "slicegpt"), sparsities=(0.25, 0.5, 0.25), seeds=(0, 1))
    configs = resolve_grid(s)
    assert configs[0].kind == "eval" and configs[0].run_id == RunConfig("eval", MODEL, EVAL).run_id
    expect = {
        plan_prune(
            MODEL, PruneConfig("wanda", x), CALIB.__class__(CALIB.data, 4, 64, seed), EVAL
        ).cfg.run_id
        for x in (0.25, 0.5)
        for seed in (0, 1)
    }
    expect |= {
        plan_slice(
            MODEL, PruneConfig("slicegpt", x), CalibConfig(CALIB.data, 4, 64, seed), EVAL
        ).cfg.run_id
        for x in (0.25, 0.5)
        for seed in (0, 1)
    }
    assert {c.run_id for c in configs[1:]} == expect and len(configs) == 1 + 8


def test_nm_points_collapse_to_their_own_sparsity():
    configs = resolve_grid(
        spec(
            methods=("sparsegpt",),
            sparsities=(0.3, 0.6),
            patterns=("unstructured", "2:4"),
            allocations=("uniform", "owl"),
        )
    )
    nm = [c.prune for c in configs if c.prune is not None and c.prune.pattern == "2:4"]
    assert [(p.sparsity, p.allocation) for p in nm] == [(0.5, "uniform"), (0.5, "owl")]
    assert len(configs) == 1 + 4 + 2


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"methods": ()}, "grid is empty"),
        ({"sparsities": ()}, "grid is empty"),
        ({"sparsities": (0.5, 1.0)}, "sparsity=1.0"),
        ({"methods": ("slicegpt",), "patterns": ("2:4",)}, "method=slicegpt .*N:M"),
        ({"methods": ("sparsegpt",), "patterns": ("3:7",)}, "pattern=3:7 .*divisible by 7"),
        ({"methods": ("slicegpt",), "sparsities": (0.5, 0.99)}, "sparsity=0.99 .*rounds down"),
        ({"methods": ("magnitude", "nosuch")}, "method=nosuch"),
        ({"options": ("percdamp=0.1",)}, "method=magnitude .*option"),
        (
            {"eval": EvalConfig(DataSpec("pydoc", "test"), seqlen=4096)},
            "exceeds the model's context",
        ),
    ],
)
def test_invalid_grid_names_the_point(kw, message):
    with pytest.raises(ConfigError, match=message):
        resolve_grid(spec(**kw))


# ---- table ---------------------------------------------------------------------------------------
def _run(method, s, seed, ppl, acc=None, kind="prune"):
    prune = PruneConfig(method, s) if kind != "eval" else None
    cfg = RunConfig(
        kind, MODEL, EVAL, CalibConfig(CALIB.data, 4, 64, seed) if prune else None, prune
    )
    return {"config": cfg.to_dict(), "metrics": {"ppl": ppl, "mean_acc": acc}}


def test_table_mean_and_spread_over_seeds():
    runs = [
        _run("wanda", 0.5, 0, 10.0, 0.6),
        _run("wanda", 0.5, 1, 14.0, 0.4),
        _run("wanda", 0.3, 0, 9.0),
        _run("dense", 0.0, 0, 8.0, kind="eval"),
    ]
    df = sweep_table(runs)
    assert df["method"].tolist() == ["dense", "wanda", "wanda"]
    two = df[(df.method == "wanda") & (df.sparsity == 0.5)].iloc[0]
    assert two.n_seeds == 2 and two.ppl_mean == 12.0 and two.ppl_std == pytest.approx(2**0.5 * 2)
    assert (two.ppl_min, two.ppl_max) == (10.0, 14.0) and two.acc_mean == pytest.approx(0.5)
    one = df[(df.method == "wanda") & (df.sparsity == 0.3)].iloc[0]
    assert one.n_seeds == 1 and math.isnan(one.ppl_std)  # no spread claimed from one seed
    assert table_records(df)[1]["ppl_std"] is None


# ---- store: heartbeat and import -----------------------------------------------------------------
def test_liveness_is_the_heartbeat_not_another_hosts_pid():
    now = time.time()
    here = socket.gethostname()
    assert run_alive(12345, "another-host", now - 5, now)  # positive control: fresh elsewhere
    assert not run_alive(12345, "another-host", now - STALE_S - 1, now)  # stale elsewhere
    assert not run_alive(2**22 + 12345, here, now - 5, now)  # fresh but its pid died here
    assert not run_alive(12345, "another-host", None, now)  # legacy row of another host


def test_reconcile_spares_other_hosts_live_runs(store):
    a, b = (RunConfig("eval", MODEL, EvalConfig(seqlen=n)) for n in (64, 128))
    for cfg in (a, b):
        store.begin(cfg)
    beat = time.time()
    store._query("UPDATE runs SET host='node-2', pid=1, heartbeat=? WHERE id=?", (beat, a.run_id))
    store._query(
        "UPDATE runs SET host='node-2', pid=1, heartbeat=? WHERE id=?",
        (beat - STALE_S - 5, b.run_id),
    )
    assert RunStore(store.root).reconcile() == []  # b was already reconciled on open
    assert store.get(a.run_id).status == "running" and store.get(b.run_id).status == "interrupted"
    assert store.running_elsewhere(a.run_id)


def test_heartbeat_thread_beats():
    beats = []
    hb = Heartbeat(lambda: beats.append(1), interval=0.02)
    time.sleep(0.2)
    hb.stop()
    n = len(beats)
    time.sleep(0.1)
    assert n >= 2 and len(beats) == n


def test_import_run_folder_once(store, tmp_path):
    other = RunStore(tmp_path / "worker")
    cfg = RunConfig("eval", MODEL, EVAL)
    with other.begin(cfg) as w:
        w.write_table("t", [{"x": 1}])
        w.commit({"ppl": 3.0})
    blob = pack_runs(other, [cfg.run_id])
    assert unpack_runs(blob, store) == [cfg.run_id]
    assert unpack_runs(blob, store) == []  # already there: nothing duplicated
    rec = store.get(cfg.run_id)
    assert rec.status == "done" and rec.summary == {"ppl": 3.0}
    assert store.load(cfg.run_id).table("t")["x"].tolist() == [1]
    bad = tmp_path / "0123456789abcdef"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(cfg.to_dict()))
    (bad / "metrics.json").write_text("{}")
    with pytest.raises(StoreError, match="hashes to"):
        store.import_run(bad)


# ---- bad input: one clear error before any work, nothing stored ----------------------------------
def _n_runs(root) -> int:
    db = root / "index.sqlite"
    return (
        sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] if db.exists() else 0
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--method", "wanda", "--executor", "gpus", "--gpus", "3"], "GPU"),
        (
            ["--method", "wanda", "--executor", "ray", "--ray-address", "127.0.0.1:9"],
            "cannot reach",
        ),
        (["--method", "wanda", "--sparsities", ""], "grid is empty"),
        (["--method", "wanda,sparsegpt", "--patterns", "2:4,3:7"], "grid point .*3:7"),
    ],
)
def test_bad_sweep_input_fails_before_work(store_root, capsys, tiny_flags, flags, message):
    assert main(["sweep", *tiny_flags, *flags]) == 2
    assert pytest.importorskip("re").search(message, capsys.readouterr().err)
    assert _n_runs(store_root) == 0


# ---- in-process sweep through the CLI ------------------------------------------------------------
def test_cli_sweep_of_two_methods_and_resume(store_root, capsys, tiny_flags):
    flags = ["sweep", *tiny_flags, "--method", "magnitude,wanda", "--sparsities", "0.25,0.5"]
    assert main([*flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["computed"] == 5 and out["cached"] == 0 and len(out["table"]) == 5
    rows = {(r["method"], r["sparsity"]): r for r in out["table"]}
    dense = rows[("dense", 0.0)]["ppl_mean"]
    assert rows[("magnitude", 0.5)]["ppl_mean"] != dense
    assert main(flags) == 0  # everything stored: reused, the same table printed
    text = capsys.readouterr().out
    assert "5 runs (0 computed, 5 reused)" in text and "wanda" in text


def test_failed_point_is_reported_and_the_rest_stored(store, monkeypatch):
    import core.sweeps.executors as ex

    real = ex.run_config

    def flaky(cfg, st, on_progress=None):
        if cfg.prune is not None and cfg.prune.sparsity == 0.5:
            raise ConfigError("boom")
        return real(cfg, st, on_progress)

    monkeypatch.setattr(ex, "run_config", flaky)
    with pytest.raises(SweepError, match=r"1 of 3 runs failed.*boom"):
        run_sweep_grid(spec(sparsities=(0.25, 0.5)), store, LocalExecutor())
    assert len(store.list(status="done")) == 2


@pytest.mark.slow
def test_pool_of_two_matches_in_process_and_survives_a_killed_worker(store, tmp_path):
    """The local pool: its store equals the in-process one; a worker SIGKILLed mid-run breaks
    the pool, which is rebuilt and the unfinished runs resubmitted (nothing lost or doubled)."""
    s = spec(methods=("magnitude", "wanda"), sparsities=(0.3, 0.6))
    reference = run_sweep_grid(s, RunStore(tmp_path / "ref"), LocalExecutor())
    scratch = tmp_path / "scratch"
    killer, killed, stop = start_killer(scratch)
    try:
        out = run_sweep_grid(s, store, LocalExecutor(2, scratch=str(scratch)))
    finally:
        stop.set()
        killer.join()
    assert killed and out["computed"] == 5
    assert out["table"] == reference["table"]
    assert sorted(p.name for p in (store.root / "runs").iterdir()) == sorted(out["run_ids"])
    assert {r.status for r in store.list()} == {"done"}


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_local_sweep_checks_the_device_here(store_root, capsys, tiny_flags):
    assert main(["sweep", *tiny_flags, "--method", "wanda", "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err and _n_runs(store_root) == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_private_ray_cluster_shares_the_cores_as_the_local_pool_does(workers):
    """--executor ray --ray-address local --workers N: a cluster of this machine's cores,
    each task holding cores // N of them (Ray sets its OMP_NUM_THREADS to that), so one
    worker runs with every core's threads, as LocalExecutor(1) does."""
    cores = os.cpu_count() or 1
    ex = make_executor("ray", workers, ray_address="local")
    assert ex.address == "local" and ex.num_cpus == cores
    assert ex.cpus_per_task == max(1, cores // workers)
    remote = make_executor("ray", workers, ray_address="10.0.0.1:6379")
    assert remote.address == "10.0.0.1:6379" and remote.num_cpus is None


# ---- which Ray cluster (Ray's own convention; no cluster is started here) ----------------------
@pytest.fixture
def no_cluster(monkeypatch):
    """A machine with no RAY_ADDRESS and no `ray start` head."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_cluster, "head_address", lambda: None)


def _listening() -> tuple[socket.socket, str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, f"127.0.0.1:{server.getsockname()[1]}"


def test_no_address_and_no_cluster_starts_a_private_one_and_says_so(no_cluster):
    target, where = ray_cluster.choose_cluster(None)
    assert target is None and "private local Ray cluster" in where and "RAY_ADDRESS" in where
    ex = make_executor("ray", 2)  # the CLI's default: no --ray-address
    assert ex.address is None and not ex.private  # decided when checked, not when built


def test_no_address_follows_ray_address_then_a_local_head(no_cluster, monkeypatch):
    server, address = _listening()
    try:
        monkeypatch.setattr(ray_cluster, "head_address", lambda: address)
        assert ray_cluster.choose_cluster(None)[0] == address  # the head `ray start` runs
        monkeypatch.setenv("RAY_ADDRESS", address)
        target, where = ray_cluster.choose_cluster(None)
        assert target == address and "RAY_ADDRESS" in where
    finally:
        server.close()


def test_a_head_that_does_not_answer_is_not_a_cluster(no_cluster, monkeypatch):
    server, address = _listening()
    server.close()  # the record of a head that has stopped
    monkeypatch.setattr(ray_cluster, "head_address", lambda: address)
    target, where = ray_cluster.choose_cluster(None)
    assert target is None and "does not answer" in where


def test_an_address_asked_for_that_does_not_answer_is_an_error(no_cluster, monkeypatch):
    with pytest.raises(ConfigError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:9"):
        ray_cluster.choose_cluster("127.0.0.1:9")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"127\.0\.0\.1:9 \(from \$RAY_ADDRESS\)"):
        ray_cluster.choose_cluster(None)
    assert ray_cluster.choose_cluster("local")[0] is None
    assert ray_cluster.choose_cluster("auto")[0] == "auto"  # Ray's own: an error if none runs


# ---- `sweep` means one of two things, chosen at the CLI only ------------------------------------
@pytest.mark.parametrize(
    "flags, kind",
    [
        ([], RELATION_SWEEP),  # the default method, slicegpt alone
        (["--method", "slicegpt", "--seeds", "0,1"], RELATION_SWEEP),
        (["--method", "wanda"], GRID_SWEEP),
        (["--method", "slicegpt,wanda"], GRID_SWEEP),
        (["--grid"], GRID_SWEEP),  # slicegpt alone, asked for as a grid
        (["--allocations", "uniform,owl"], GRID_SWEEP),
        (["--option", "slicegpt.ridge=0.1"], GRID_SWEEP),
        (["--executor", "ray"], GRID_SWEEP),
    ],
)
def test_sweep_kind_rule(flags, kind):
    args = build_parser().parse_args(["sweep", *flags])
    assert sweep_kind(args, field_values(args)) == kind


def test_the_relation_sweep_planner_refuses_a_grid():
    """Below the CLI nothing guesses: planning the relation sweep of another method is an
    error, not a silent grid."""
    with pytest.raises(ConfigError, match="slicegpt"):
        plan_request(RELATION_SWEEP, {"method": "wanda", "sparsities": "0.5"})


# ---- a grid job receives its resolved grid as JSON ----------------------------------------------
def test_grid_job_json_round_trip_keeps_every_run_id():
    configs = resolve_grid(spec(methods=("wanda", "slicegpt"), sparsities=(0.25, 0.5)))
    job = GridJob(tuple(configs))
    again = GridJob.from_json(job.to_json())
    assert [c.run_id for c in again.configs] == [c.run_id for c in configs]
    with pytest.raises(ConfigError, match="not a grid job"):
        GridJob.from_json(json.dumps(configs[1].to_dict()))  # a single run's config
    with pytest.raises(ConfigError):
        GridJob(())


def test_run_config_runs_a_grid_job_as_the_sweep_command_would(store_root, capsys, tmp_path):
    """`run --config GRID.json` (how the app's grid jobs launch) stores exactly the planned
    run ids and prints the sweep's table; a second run reuses them all."""
    configs = resolve_grid(spec(sparsities=(0.5,)))
    path = tmp_path / "grid.json"
    path.write_text(GridJob(tuple(configs)).to_json())
    argv = ["run", "--config", str(path), "--store", str(store_root), "--quiet"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_ids"] == [c.run_id for c in configs] and out["computed"] == 2
    assert {r.id for r in RunStore(store_root).list(status="done")} == set(out["run_ids"])
    assert main(argv) == 0
    assert "2 runs (0 computed, 2 reused)" in capsys.readouterr().out
    path.write_text('{"kind": "grid-sweep", "configs": [{"kind": "eval"}]}')
    assert main(argv) == 2 and "not a run configuration" in capsys.readouterr().err
