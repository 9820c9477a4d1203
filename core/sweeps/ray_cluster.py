"""The Ray executor of grid sweeps: each configuration is a Ray task, retried when its worker
process dies, on the cluster Ray itself would pick.

Which cluster follows ``ray.init()``'s own convention, so a user's habit carries over:

1. an address given (``--ray-address HOST:PORT | ray://HOST:PORT``): that cluster, checked
   with a TCP connect first so a wrong one fails in seconds; ``auto``: the cluster this
   machine belongs to, an error when none runs; ``local``: a private one;
2. none given: ``RAY_ADDRESS`` when set, else the head ``ray start`` last started on this
   machine when it answers, else a private local cluster of this machine's cores, and the
   executor says so (``where``; the CLI prints it).

``ray`` is imported only here, when the executor is checked or run.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from core.errors import ConfigError, PruneScopeError
from core.sweeps.workers import MAX_RETRIES, pack_runs, report_done, run_isolated, unpack_runs

log = logging.getLogger(__name__)

AUTO, LOCAL = "auto", "local"  # --ray-address words: the running cluster / a private one
ENV = "RAY_ADDRESS"


def head_address() -> str | None:
    """The address of the cluster ``ray start --head`` last started on this machine (Ray's
    own record of it), None when there is none or Ray cannot tell."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:
        return None
    try:
        return read_ray_address() or None
    except OSError:
        return None


def reachable(address: str, timeout_s: float = 5.0) -> str | None:
    """None when a TCP connect to the cluster's address succeeds, else why it failed."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(
            f"--ray-address expects auto, local, HOST:PORT or ray://HOST:PORT, got {address!r}"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return str(exc)
    return None


def _check_reachable(address: str, origin: str = "") -> None:
    why = reachable(address)
    if why is not None:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address}{origin}: {why} (is `ray start "
            "--head` running there, and is the port open?)"
        )


def choose_cluster(address: str | None) -> tuple[str | None, str]:
    """(the address to connect to, or None for a private local cluster; a sentence saying
    which and why) for ``--ray-address address`` (None: not given), as ``ray.init()`` would
    choose. Raises ConfigError for an address given that does not answer."""
    if address == LOCAL:
        return None, "a private local Ray cluster (--ray-address local)"
    if address == AUTO:
        return AUTO, "the Ray cluster running on this machine (--ray-address auto)"
    if address is not None:
        _check_reachable(address)
        return address, f"the Ray cluster at {address}"
    env = os.environ.get(ENV, "").strip()
    if env:
        if env in (AUTO, LOCAL):
            return choose_cluster(env)
        _check_reachable(env, f" (from ${ENV})")
        return env, f"the Ray cluster at {env} (from ${ENV})"
    head = head_address()
    if head is not None and reachable(head) is None:
        return head, f"the Ray cluster running on this machine at {head}"
    stale = f"; the head last started at {head} does not answer" if head else ""
    why = f"no ${ENV} and no Ray cluster running on this machine{stale}"
    return None, f"a private local Ray cluster ({why})"


class RayExecutor:
    """Each configuration is a Ray task (num_gpus=1 on a cluster with GPUs, else
    ``cpus_per_task`` CPUs), retried ``max_retries`` times if its worker process dies.

    address: None (Ray's convention: ``choose_cluster``), 'auto', 'local', 'HOST:PORT' or
    'ray://HOST:PORT'. A private cluster gets ``cores`` CPUs (default: this machine's) and
    ``workers`` tasks at a time share them (each cores // workers, as the local pool does:
    Ray sets a task's OMP_NUM_THREADS to its num_cpus); a running cluster's tasks take one
    CPU each.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int = 1,
        max_retries: int = MAX_RETRIES,
        scratch: str | None = None,
        cores: int | None = None,
    ) -> None:
        if workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {workers}")
        self.address, self.workers, self.max_retries = address, workers, max_retries
        self.cores = cores or os.cpu_count() or 1  # a private cluster's CPUs
        self.scratch, self._gpus, self._connected = scratch, 0.0, False
        self.where = "a Ray cluster (not connected yet)"
        self.private = address == LOCAL
        self._size()

    def _size(self) -> None:
        self.num_cpus = self.cores if self.private else None
        self.cpus_per_task = max(1, self.cores // self.workers) if self.private else 1

    def check(self) -> None:
        """Connect (or start the private cluster) before any work; ConfigError when Ray is
        missing or the cluster does not answer."""
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("--executor ray needs Ray: pip install 'ray>=2.40'") from exc
        if ray.is_initialized():
            if not self._connected:
                self.where = "the Ray cluster this process is already connected to"
        else:
            target, self.where = choose_cluster(self.address)
            self.private = target is None
            self._size()
            if self.private:  # its workers import this checkout's core
                kw = {"num_cpus": self.num_cpus, "runtime_env": _code_env()}
            elif target == AUTO or target == head_address():  # on this machine
                kw = {"address": target, "runtime_env": _code_env()}
            else:
                kw = {"address": target}
            log.info("ray executor: %s", self.where)
            try:
                ray.init(
                    **kw,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                hint = " (omit --ray-address to start a private one)" if target == AUTO else ""
                raise ConfigError(
                    f"cannot connect to the Ray cluster at {target!r}: "
                    f"{str(exc).splitlines()[0]}{hint}"
                ) from exc
        self._connected = True
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
            report_done(on_done, cfg, lambda b=blob: unpack_runs(b, store))


def _code_env() -> dict[str, dict[str, str]]:
    """The runtime environment that lets a worker on this machine import this core."""
    here = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}
