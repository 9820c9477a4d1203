"""Where a sweep's runs execute: this process, a local process pool, one worker per GPU, or a
Ray cluster, behind one interface (``Executor``) that the CLI and the app both call.

Every worker but the in-process one writes into a results store of its own (a temporary
folder on its host) and hands back its finished run folders packed as one tar archive; the
driver imports each into the main store atomically by run id (``RunStore.import_run``), so no
two hosts ever write one SQLite file. Dense baselines are computed first and shipped to the
workers the same way, so no worker recomputes them.

Ray is used as the scheduler (tasks with ``max_retries``: a worker process that dies is
rerun elsewhere); the local pool and the GPU pool restart a broken pool and resubmit what
did not finish. ``ray`` is imported only by ``RayExecutor``.
"""

from __future__ import annotations

import io
import json
import logging
import multiprocessing as mp
import os
import shutil
import socket
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Protocol

import torch

from core.errors import ConfigError, PruneScopeError, StoreError
from core.names import EVAL, PRUNE, SLICE, ZEROSHOT
from core.progress import ProgressFn
from core.runs import execute
from core.settings.config import RunConfig
from core.store.run_store import RunStore

log = logging.getLogger(__name__)

EXECUTORS = ("local", "gpus", "ray")
GRID_KINDS = (EVAL, PRUNE, SLICE, ZEROSHOT)  # what a grid point or its baseline can be
MAX_RETRIES = 2  # reruns of a configuration whose worker process died
OnDone = Callable[[RunConfig, str | None], None]  # (config, error or None) per finished config


# ---- one configuration --------------------------------------------------------------------------
def run_config(
    cfg: RunConfig, store: RunStore, on_progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Run one resolved config (kind eval | prune | slice | dense zeroshot) into ``store``
    through the one dispatcher (core.runs.execute), reusing a stored result. Returns
    {run_id, config, metrics, cached}."""
    if cfg.kind not in GRID_KINDS or cfg.extra_value("source_run") is not None:
        raise ConfigError(f"a sweep cannot run a {cfg.kind!r} configuration")
    res = execute(cfg, store, on_progress)
    if res["run_id"] != cfg.run_id:  # e.g. a worker resolving a path differently
        raise StoreError(
            f"config {cfg.run_id} ran as {res['run_id']}: the worker resolved it "
            "differently (data folder, device)"
        )
    return res


# ---- run folders travel as tar archives ----------------------------------------------------------
def pack_runs(store: RunStore, run_ids: Iterable[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for run_id in run_ids:
            tar.add(store.run_dir(run_id), arcname=run_id)
    return buf.getvalue()


def unpack_runs(blob: bytes, store: RunStore) -> list[str]:
    """Import every run folder of an archive into ``store``; returns the newly added ids."""
    added = []
    with tempfile.TemporaryDirectory(dir=store.root / "tmp", prefix="unpack-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        for folder in sorted(Path(tmp).iterdir()):
            if store.import_run(folder):
                added.append(folder.name)
    return added


def run_isolated(cfg_json: str, seeds: bytes, scratch: str | None = None) -> bytes:
    """Worker entry point: run one config (as JSON) in a store of its own under ``scratch``,
    seeded with the baselines' run folders; return the run folders it produced, packed."""
    cfg = RunConfig.from_dict(json.loads(cfg_json))
    if scratch:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    root = tempfile.mkdtemp(prefix="prunescope-worker-", dir=scratch)
    try:
        store = RunStore(root)
        seeded = set(unpack_runs(seeds, store)) if seeds else set()
        run_config(cfg, store)
        produced = [r.id for r in store.list(status="done") if r.id not in seeded]
        return pack_runs(store, produced)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- executors ------------------------------------------------------------------------------------
class Executor(Protocol):
    name: str

    def check(self) -> None:
        """Raise ConfigError when the executor cannot run here (before any work)."""

    @property
    def device(self) -> str | None:
        """'cpu' or 'cuda': where remote workers run ('auto' devices resolve to it); None:
        on this machine (devices resolve, and are checked, here)."""

    def run(
        self, configs: Sequence[RunConfig], store: RunStore, seeds: Sequence[str], on_done: OnDone
    ) -> None:
        """Run every config into ``store`` (workers seeded with the ``seeds`` run ids)."""


class LocalExecutor:
    """This process (workers=1) or a pool of ``workers`` processes on this machine."""

    name = "local"

    def __init__(self, workers: int = 1, scratch: str | None = None, device: str | None = None):
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        self.workers, self.scratch, self._device = workers, scratch, device

    def check(self) -> None:
        pass

    @property
    def device(self) -> str | None:
        return self._device

    def _worker_envs(self) -> list[dict[str, str]]:
        threads = max(1, (os.cpu_count() or 1) // self.workers)  # no oversubscribed cores
        return [{"OMP_NUM_THREADS": str(threads)} for _ in range(self.workers)]

    def run(self, configs, store, seeds, on_done) -> None:
        if self.workers == 1 or len(configs) == 1:  # one at a time: no pool to start up
            for cfg in configs:
                _call(on_done, cfg, lambda c=cfg: run_config(c, store))
            return
        run_pool(
            configs, store, pack_runs(store, seeds), self._worker_envs(), self.scratch, on_done
        )


class GpuPoolExecutor(LocalExecutor):
    """One worker process per GPU (``CUDA_VISIBLE_DEVICES`` set to that GPU alone)."""

    name = "gpus"

    def __init__(self, gpus: Sequence[int] | None = None, scratch: str | None = None):
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ConfigError(f"--gpus names a GPU twice: {list(gpus)}")
        self.gpus = tuple(gpus) if gpus is not None else None
        super().__init__(max(1, len(gpus or ())), scratch, "cuda")

    def check(self) -> None:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError("--executor gpus needs CUDA GPUs; this machine has none visible")
        if self.gpus is None:
            self.gpus = tuple(range(n))
            self.workers = n
        missing = [g for g in self.gpus if not 0 <= g < n]
        if missing:
            raise ConfigError(
                f"--gpus names GPU {missing[0]}, but this machine has {n} visible "
                f"GPU(s): {', '.join(map(str, range(n)))}"
            )

    def _worker_envs(self) -> list[dict[str, str]]:
        return [{"CUDA_VISIBLE_DEVICES": str(g)} for g in self.gpus]

    def run(self, configs, store, seeds, on_done) -> None:
        run_pool(
            configs, store, pack_runs(store, seeds), self._worker_envs(), self.scratch, on_done
        )


def _call(on_done: OnDone, cfg: RunConfig, fn: Callable[[], Any]) -> None:
    try:
        fn()
    except PruneScopeError as exc:
        on_done(cfg, str(exc))
        return
    on_done(cfg, None)


def _init_worker(envs: list[dict[str, str]], counter) -> None:
    """Give each pool process its own environment (a GPU, a thread count), before torch
    initialises CUDA or its thread pool."""
    with counter.get_lock():
        i, counter.value = counter.value, counter.value + 1
    os.environ.update(envs[i % len(envs)])
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def run_pool(configs, store, seeds: bytes, envs: list[dict[str, str]], scratch, on_done) -> None:
    """A spawned process pool with one environment per process; a pool broken by a dying
    process is rebuilt and what did not finish is resubmitted (MAX_RETRIES per config)."""
    ctx = mp.get_context("spawn")
    attempts: Counter[str] = Counter()
    pending = list(configs)
    while pending:
        counter = ctx.Value("i", 0)
        with ProcessPoolExecutor(len(envs), ctx, _init_worker, (envs, counter)) as pool:
            futures = {
                pool.submit(run_isolated, c.canonical_json(), seeds, scratch): c for c in pending
            }
            pending = []
            for fut in as_completed(futures):
                cfg = futures[fut]
                try:
                    blob = fut.result()
                except BrokenProcessPool:
                    attempts[cfg.run_id] += 1
                    if attempts[cfg.run_id] > MAX_RETRIES:
                        on_done(cfg, f"its worker process died {attempts[cfg.run_id]} times")
                    else:
                        log.warning("worker died running %s; resubmitting", cfg.run_id)
                        pending.append(cfg)
                    continue
                except PruneScopeError as exc:  # the run itself failed: reported, not retried
                    on_done(cfg, str(exc))
                    continue
                _call(on_done, cfg, lambda b=blob: unpack_runs(b, store))


class RayExecutor:
    """Each configuration is a Ray task (num_gpus=1 on a cluster with GPUs, else
    ``cpus_per_task`` CPUs), retried ``max_retries`` times if its worker process dies.

    address: 'auto' (the cluster this machine belongs to), 'HOST:PORT' or 'ray://HOST:PORT'
    of an existing cluster, or None to start a private local one with ``num_cpus`` CPUs.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = "auto",
        cpus_per_task: int = 1,
        max_retries: int = MAX_RETRIES,
        num_cpus: int | None = None,
        scratch: str | None = None,
    ) -> None:
        self.address, self.cpus_per_task, self.max_retries = address, cpus_per_task, max_retries
        self.num_cpus, self.scratch, self._gpus = num_cpus, scratch, 0.0

    def check(self) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("--executor ray needs Ray: pip install 'ray>=2.40'") from exc
        if self.address not in (None, "auto"):
            _check_reachable(self.address)
        if not ray.is_initialized():
            kw = (
                {"address": self.address}
                if self.address
                else {
                    "num_cpus": self.num_cpus,  # a private cluster: its workers import this core
                    "runtime_env": {"env_vars": {"PYTHONPATH": _code_path()}},
                }
            )
            try:
                ray.init(
                    **kw,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ConfigError(
                    f"cannot connect to the Ray cluster at {self.address!r}: "
                    f"{str(exc).splitlines()[0]}"
                ) from exc
        self._gpus = float(ray.cluster_resources().get("GPU", 0.0))

    @property
    def device(self) -> str:
        return "cuda" if self._gpus > 0 else "cpu"

    def run(self, configs, store, seeds, on_done) -> None:
        import ray

        resources = {"num_gpus": 1} if self._gpus > 0 else {"num_cpus": self.cpus_per_task}
        task = ray.remote(run_isolated).options(
            max_retries=self.max_retries, retry_exceptions=False, **resources
        )
        seeds_ref = ray.put(pack_runs(store, seeds))
        refs = {task.remote(c.canonical_json(), seeds_ref, self.scratch): c for c in configs}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            cfg = refs[ready[0]]
            try:
                blob = ray.get(ready[0])
            except ray.exceptions.RayTaskError as exc:  # the run itself failed: not retried
                cause = exc.cause if isinstance(exc.cause, Exception) else exc
                if not isinstance(cause, PruneScopeError):
                    raise cause from None
                on_done(cfg, str(cause))
                continue
            except ray.exceptions.WorkerCrashedError as exc:  # retries exhausted
                on_done(cfg, f"its Ray worker died {self.max_retries + 1} times: {exc}")
                continue
            _call(on_done, cfg, lambda b=blob: unpack_runs(b, store))


def _code_path() -> str:
    here = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connect to the cluster's address, so a wrong one fails in seconds, clearly."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(
            f"--ray-address expects auto, HOST:PORT or ray://HOST:PORT, got {address!r}"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address}: {exc} (is `ray start "
            "--head` running there, and is the port open?)"
        ) from exc


def make_executor(
    name: str,
    workers: int = 1,
    gpus: Sequence[int] | None = None,
    ray_address: str | None = "auto",
    scratch: str | None = None,
) -> Executor:
    """The executor the CLI's --executor/--workers/--gpus/--ray-address name."""
    if name == "local":
        return LocalExecutor(workers, scratch)
    if name == "gpus":
        return GpuPoolExecutor(gpus, scratch)
    if name == "ray":
        if ray_address not in (None, "local"):
            return RayExecutor(ray_address, scratch=scratch)
        # a private cluster of this machine's cores; like the local pool, N workers each get
        # cores // N of them (Ray sets a task's OMP_NUM_THREADS to its num_cpus)
        cores = os.cpu_count() or 1
        return RayExecutor(
            None, cpus_per_task=max(1, cores // workers), num_cpus=cores, scratch=scratch
        )
    raise ConfigError(f"unknown executor {name!r}; use {', '.join(EXECUTORS)}")
