"""GPU memory of a run: its peak beside the device's capacity, and out-of-memory errors
turned into one message that says which option helps.

``reset_peak(device)`` restarts CUDA's high-water marks before a phase; ``peak_report``
reads them (``torch.cuda.max_memory_allocated`` and ``max_memory_reserved``, MiB) with the
device's total memory, the budget the phase was held to. ``oom_as_error`` converts a CUDA
(or MPS) out-of-memory error raised anywhere inside it into ``DeviceMemoryError``: the run
writer then marks the run failed with that message and drops its half-written folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from core.errors import DeviceMemoryError

# What lowers the device's peak, in the order worth trying (CLI flags; the app's fields
# carry the same names).
OOM_HINTS = (
    "--activations-on-cpu (calibration activations stay on the CPU)",
    "a smaller --batch-size (evaluation windows per forward)",
    "a smaller --nsamples or --calib-seqlen (fewer calibration tokens)",
    "--dtype bfloat16 or float16 (half the weight and activation bytes)",
)


def _is_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def reset_peak(device: torch.device | str) -> None:
    """Restart the CUDA peak-memory counters (no-op elsewhere)."""
    if _is_cuda(device):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_report(device: torch.device | str) -> dict[str, float]:
    """Peak GPU memory since ``reset_peak`` and the device's capacity, MiB ({} off CUDA)."""
    if not _is_cuda(device):
        return {}
    dev = torch.device(device)
    return {
        "gpu_peak_allocated_mb": torch.cuda.max_memory_allocated(dev) / 2**20,
        "gpu_peak_reserved_mb": torch.cuda.max_memory_reserved(dev) / 2**20,
        "gpu_total_mb": torch.cuda.get_device_properties(dev).total_memory / 2**20,
    }


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA/MPS allocation failure (torch.OutOfMemoryError or its older RuntimeError)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def oom_message(exc: BaseException, device: torch.device | str, stage: str) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hints = "; ".join(OOM_HINTS)
    return f"{device} ran out of memory during {stage} ({first}). What helps: {hints}"


@contextmanager
def oom_as_error(device: torch.device | str, stage: str = "the run") -> Iterator[None]:
    """Re-raise an out-of-memory error inside as ``DeviceMemoryError`` with the hints."""
    try:
        yield
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        if _is_cuda(device):
            torch.cuda.empty_cache()
        raise DeviceMemoryError(oom_message(exc, device, stage)) from exc
