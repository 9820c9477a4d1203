"""Liveness of a running job across hosts: a heartbeat the running process refreshes.

A row 'running' in the index is alive while its heartbeat is fresher than ``STALE_S``. The
pid is only a shortcut on the host that wrote it (a dead pid there is dead at once); another
host's pid says nothing, so a store shared by several machines never marks their live runs
'interrupted'. Rows written before heartbeats existed (heartbeat NULL) fall back to the pid.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0  # how often a running job refreshes its heartbeat
# A run is presumed dead after this long without a beat: 12 missed beats, so a loaded machine
# (a long GIL-holding step, a slow shared disk) is not declared dead by a late beat or two.
STALE_S = 120.0


def pid_alive(pid: int | None, host: str | None) -> bool:
    """Whether process ``pid`` on ``host`` (this machine only) still runs: it exists and is
    not a zombie (ended, not yet waited for by its parent; Linux's /proc tells)."""
    if not pid or host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)  # signal 0: nothing is sent, the pid is only checked
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # field 3 of /proc/<pid>/stat, after the parenthesised name, is the state
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def run_alive(
    pid: int | None,
    host: str | None,
    heartbeat: float | None,
    now: float | None = None,
    stale_s: float = STALE_S,
) -> bool:
    """Liveness of a 'running' row: fresh heartbeat, unless its pid is known dead here."""
    if host == socket.gethostname() and not pid_alive(pid, host):
        return False
    if heartbeat is None:
        return pid_alive(pid, host)
    return (time.time() if now is None else now) - heartbeat < stale_s


class Heartbeat:
    """A daemon thread calling ``beat()`` every ``interval`` seconds until ``stop()``."""

    def __init__(self, beat: Callable[[], None], interval: float = HEARTBEAT_S) -> None:
        self._beat, self._interval = beat, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception as exc:  # a missed beat is harmless; the next one retries
                log.debug("heartbeat failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
