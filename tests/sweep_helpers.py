"""What the sweep tests share: kill a worker process mid-run, as a crash would."""

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path


def kill_first_running(scratch: Path, killed: list, stop: threading.Event) -> None:
    """SIGKILL the process of the first prune run seen 'running' in a worker's own store
    (scratch/<worker store>/index.sqlite); append (run id, pid) to ``killed``."""
    while not stop.is_set() and not killed:
        for db in scratch.glob("*/index.sqlite"):
            try:
                rows = (
                    sqlite3.connect(db, timeout=0.1)
                    .execute("SELECT id, pid FROM runs WHERE status='running' AND kind='prune'")
                    .fetchall()
                )
            except sqlite3.Error:
                continue
            for run_id, pid in rows:
                if pid and pid != os.getpid():
                    os.kill(pid, signal.SIGKILL)
                    killed.append((run_id, pid))
                    return
        time.sleep(0.1)


def start_killer(scratch: Path) -> tuple[threading.Thread, list, threading.Event]:
    killed: list = []
    stop = threading.Event()
    thread = threading.Thread(target=kill_first_running, args=(scratch, killed, stop))
    thread.start()
    return thread, killed, stop
