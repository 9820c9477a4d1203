"""What produced a run: library versions, device, host and the project's commit (env.json)."""

from __future__ import annotations

import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
import transformers

from core.machine.device import describe_device


def environment_record(device: torch.device | str | None = None) -> dict[str, Any]:
    """What produced a run: versions, device, host, project commit."""
    rec: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_threads": torch.get_num_threads(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if device is not None:
        rec["device"] = describe_device(torch.device(device))
    try:
        here = Path(__file__).resolve().parent
        rec["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=here,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        rec["git_commit"] = None
    return rec
