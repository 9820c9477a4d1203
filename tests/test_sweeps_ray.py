"""Sweeps through a real Ray cluster (a private 2-CPU one started on this machine): the store
ends identical to the same sweep run in-process, and a worker process killed mid-sweep is
retried with nothing lost or duplicated."""

import json
import os
import subprocess
import sys

import pytest
from sweep_helpers import start_killer

from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec
from core.store.run_store import RunStore
from core.sweeps.executors import LocalExecutor, RayExecutor
from core.sweeps.grid import GridSpec
from core.sweeps.orchestrate import run_sweep_grid
from core.sweeps.ray_cluster import head_address

pytestmark = [pytest.mark.ray, pytest.mark.long]
ray = pytest.importorskip("ray")

# 2 configurations (a method without calibration, one with OBS updates) and their dense
# baseline, on a tiny model: each run is a process of its own, so each costs a start-up.
SPEC = GridSpec(
    ModelSpec("tiny-llama", "cpu", "float32"),
    ("magnitude", "sparsegpt"),
    (0.5,),
    CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64),
    EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4),
)
# Metrics that depend only on the computation (not on timing or memory of the host).
EXACT = (
    "ppl",
    "nll",
    "dense_ppl",
    "dense_run",
    "n_windows",
    "n_tokens",
    "achieved_sparsity",
    "decoder_sparsity",
    "effdim_mean_pca99",
)


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("local"))
    out = run_sweep_grid(SPEC, store, LocalExecutor())
    assert out["computed"] == 3
    return store


@pytest.fixture(scope="module")
def cluster():
    executor = RayExecutor(address="local", workers=2, cores=2)
    executor.check()  # starts the private cluster
    yield executor
    ray.shutdown()


def test_cli_without_an_address_starts_a_private_cluster_and_says_so(tmp_path) -> None:
    """No RAY_ADDRESS, no head on this machine: `sweep --executor ray` starts a private
    cluster, says so, and runs the grid (a process of its own, as a user's command)."""
    if head_address() is not None:
        pytest.skip("a `ray start` head runs on this machine")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = ["sweep", "--model", "tiny-llama", "--device", "cpu", "--method", "wanda"]
    argv += ["--sparsities", "0.5", "--calib", "pydoc", "--eval", "pydoc", "--nsamples", "2"]
    argv += ["--seqlen", "32", "--max-windows", "2", "--executor", "ray"]
    argv += ["--store", str(tmp_path / "store"), "--json", "--quiet"]
    out = subprocess.run(
        [sys.executable, "-m", "core", *argv], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "private local Ray cluster" in out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["computed"] == 2 and "private local Ray cluster" in result["where"]


def _snapshot(store: RunStore) -> dict[str, tuple[str, dict]]:
    out = {}
    for rec in store.list():
        m = store.load(rec.id).metrics if rec.status == "done" else {}
        out[rec.id] = (rec.status, {k: m.get(k) for k in EXACT})
    return out


def _assert_same(store: RunStore, reference: RunStore) -> None:
    assert _snapshot(store) == _snapshot(reference)
    folders = sorted(p.name for p in (store.root / "runs").iterdir())
    assert folders == sorted(r.id for r in store.list())  # one folder per row, no stray copies


def test_ray_sweep_matches_local(cluster, local_store, tmp_path):
    store = RunStore(tmp_path / "ray")
    out = run_sweep_grid(SPEC, store, cluster)
    assert out["executor"] == "ray" and out["computed"] == 3
    _assert_same(store, local_store)
    again = run_sweep_grid(SPEC, store, cluster)  # deduplicated by run id: nothing rerun
    assert again["computed"] == 0 and again["table"] == out["table"]


def test_killed_worker_is_retried_nothing_lost_or_duplicated(cluster, local_store, tmp_path):
    scratch = tmp_path / "scratch"
    cluster.scratch = str(scratch)
    killer, killed, stop = start_killer(scratch)
    try:
        store = RunStore(tmp_path / "ray")
        out = run_sweep_grid(SPEC, store, cluster)
    finally:
        stop.set()
        killer.join()
        cluster.scratch = None
    assert killed, "no worker was seen running, so none was killed"
    assert out["computed"] == 3
    _assert_same(store, local_store)  # the killed run was recomputed, once
