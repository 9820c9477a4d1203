"""Where a grid sweep's runs execute: this process, a local process pool, one worker per
GPU, or a Ray cluster (core.sweeps.ray_cluster), behind one interface (``Executor``) that the
CLI and the app both call. What a worker does with one configuration is core.sweeps.workers.

The local pool and the GPU pool restart a broken pool and resubmit what did not finish;
Ray schedules its own retries.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol

import torch

from core.errors import ConfigError, PruneScopeError
from core.settings.config import RunConfig
from core.store.run_store import RunStore
from core.sweeps.ray_cluster import RayExecutor
from core.sweeps.workers import (
    MAX_RETRIES,
    OnDone,
    pack_runs,
    report_done,
    run_config,
    run_isolated,
    unpack_runs,
)

log = logging.getLogger(__name__)

EXECUTORS = ("local", "gpus", "ray")


# ---- executors -----------------------------------------------------------------------------------
class Executor(Protocol):
    name: str
    where: str  # in words, for the CLI and the result: which processes, which cluster

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

    @property
    def where(self) -> str:
        n = self.workers
        return "this process" if n == 1 else f"{n} worker processes on this machine"

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
                report_done(on_done, cfg, lambda c=cfg: run_config(c, store))
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

    @property
    def where(self) -> str:
        gpus = "every visible GPU" if self.gpus is None else f"GPU {self.gpus}"
        return f"one worker process per GPU ({gpus})"

    def _worker_envs(self) -> list[dict[str, str]]:
        return [{"CUDA_VISIBLE_DEVICES": str(g)} for g in self.gpus]

    def run(self, configs, store, seeds, on_done) -> None:
        run_pool(
            configs, store, pack_runs(store, seeds), self._worker_envs(), self.scratch, on_done
        )


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
                report_done(on_done, cfg, lambda b=blob: unpack_runs(b, store))


def make_executor(
    name: str,
    workers: int = 1,
    gpus: Sequence[int] | None = None,
    ray_address: str | None = None,
    scratch: str | None = None,
) -> Executor:
    """The executor the CLI's --executor/--workers/--gpus/--ray-address name (ray_address
    None: the cluster Ray's convention picks, core.sweeps.ray_cluster.choose_cluster)."""
    if name == "local":
        return LocalExecutor(workers, scratch)
    if name == "gpus":
        return GpuPoolExecutor(gpus, scratch)
    if name == "ray":
        return RayExecutor(ray_address, workers, scratch=scratch)
    raise ConfigError(f"unknown executor {name!r}; use {', '.join(EXECUTORS)}")
