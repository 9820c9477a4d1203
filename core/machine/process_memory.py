"""Process memory: what a pruning phase may use, what it did use, and keeping the two close.

The budget of a pruning phase is the process once the model is loaded *with its weights
resident* (interpreter, libraries, tokenizer, weight bytes) plus the calibration activations
(inputs and outputs of one decoder layer) plus the analysis buffers a run keeps on purpose
(the attention probes' layer inputs and dense W_Q/W_K). The peak is read from the kernel's
high-water mark (VmHWM), restarted just before the phase.

Two glibc details decide whether the peak stays near that budget on CPU:

- Safetensors weights are memory-mapped: they count towards RSS only once touched, so the
  loaded-model baseline is taken after ``touch_weights``.
- glibc serves large blocks from the heap once its dynamic mmap threshold has grown, and
  freed heap memory fragments: RSS then creeps up layer after layer. The layer-wise runner
  calls ``trim_heap`` after each layer, which hands the freed pages back; ``release_freed``
  also collects garbage, for what tokenisation and set-up freed. (Forcing every block over
  1 MiB into its own mapping keeps RSS ~40 MB lower still, but the page faults of those
  fresh mappings made Wanda's pruning pass 40% slower on 2 CPU cores.)
- A streamed run holds far less than its weights, so the heap's holes weigh more there:
  glibc's *dynamic* mmap threshold rises to the size of each freed mapped block (up to
  32 MiB), after which a layer's 4-14 MiB weights and transients come from the heap and
  leave holes that only the next ``trim_heap`` returns; on the real-proportions model
  (bench/big_model.py --real) that was ~240 MiB above the live bytes in one layer.
  ``map_large_blocks`` (called when a streamed model is opened) fixes the threshold at
  4 MiB: larger blocks get their own mapping and go back to the OS when freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from pathlib import Path

import torch
from torch import nn


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        lib.malloc_trim  # noqa: B018  (glibc only: musl lacks it)
        return lib
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def trim_heap() -> bool:
    """Return the freed pages of the heap to the OS (glibc malloc_trim; a few ms). True when
    something was released; False as well off glibc, where it does nothing."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
STREAM_MMAP_THRESHOLD = 4 * 2**20


def map_large_blocks(threshold: int = STREAM_MMAP_THRESHOLD) -> bool:
    """Serve every heap block of at least ``threshold`` bytes from its own mapping, returned
    to the OS as soon as it is freed (glibc ``mallopt(M_MMAP_THRESHOLD)``; this also ends the
    threshold's dynamic rise, for the rest of the process). True when set; False off glibc."""
    return bool(_LIBC is not None and _LIBC.mallopt(M_MMAP_THRESHOLD, int(threshold)))


def release_freed() -> None:
    """Collect garbage, then return the freed heap pages to the OS."""
    gc.collect()
    trim_heap()


@torch.no_grad()
def touch_weights(model: nn.Module) -> None:
    """Read one value per 4 KiB page of every CPU parameter, so memory-mapped weights are
    resident and counted in RSS before a baseline is taken."""
    for p in model.parameters():
        if p.device.type == "cpu" and p.numel():
            flat = p.detach().reshape(-1)
            flat[:: max(1, 4096 // p.element_size())].sum()


def proc_status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (VmRSS, VmHWM, RssAnon ...) in MiB; None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> None:
    """Restart the peak-RSS high-water mark (Linux), to measure one phase's peak."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """Peak resident set size since start or the last ``reset_peak_rss``."""
    hwm = proc_status_mb("VmHWM")
    if hwm is not None:
        return hwm
    import resource  # Unix only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def tensor_mb(*tensors: torch.Tensor | None) -> float:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None) / 2**20


def weight_mb(model: nn.Module) -> float:
    return tensor_mb(*model.parameters())


def phase_report(
    peak_mb: float,
    loaded_mb: float | None,
    weights_mb: float,
    calib_mb: float,
    analysis_mb: float = 0.0,
    units_mb: float = 0.0,
) -> dict[str, float]:
    """The pruning phase's peak beside its budget; ``over_budget_mb`` is the margin used.
    units_mb: what a streamed run holds of its weights on purpose (twice its largest unit:
    the one in use and the one being read or written), 0 in memory (the weights are
    already in ``loaded_mb`` there)."""
    budget = (loaded_mb or 0.0) + calib_mb + analysis_mb + units_mb
    out = {
        "prune_peak_rss_mb": peak_mb,
        "loaded_rss_mb": loaded_mb or 0.0,
        "weight_mb": weights_mb,
        "calib_buffers_mb": calib_mb,
        "analysis_buffers_mb": analysis_mb,
        "memory_budget_mb": budget,
        "over_budget_mb": peak_mb - budget,
    }
    if units_mb:
        out["streamed_units_mb"] = units_mb
    return out


# ---- free memory: what a run may still take before the kernel (or a limit) stops it ----------
CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number (2^63 rounded to pages)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return None if text in ("", "max") else int(text)


def _stat(path: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def _cgroup_free(root: Path = CGROUP_ROOT, proc: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes this process's memory cgroup still allows: its limit (the tightest of its
    ancestors') minus its usage, reclaimable page cache not counted as used (the file pages
    a run reads are dropped before the OOM killer is called). None when no limit is set."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    free: list[int] = []
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        rel = rel.lstrip("/")
        if "memory" in controllers.split(","):  # v1: the kernel sums the hierarchy for us
            base = next((b for b in (root / "memory" / rel, root / "memory") if b.is_dir()), None)
            stat = _stat(base / "memory.stat") if base else {}
            limit = stat.get("hierarchical_memory_limit", _NO_LIMIT)
            usage = _read_int(base / "memory.usage_in_bytes") if base else None
            if limit < _NO_LIMIT and usage is not None:
                free.append(limit - usage + stat.get("total_inactive_file", 0))
        elif controllers == "" and (root / "cgroup.controllers").is_file():  # v2: walk up
            group = root / rel
            while True:
                limit = _read_int(group / "memory.max")
                usage = _read_int(group / "memory.current")
                if limit is not None and usage is not None:
                    inactive = _stat(group / "memory.stat").get("inactive_file", 0)
                    free.append(limit - usage + inactive)
                if group == root or root not in group.parents:
                    break
                group = group.parent
    return max(0, min(free)) if free else None


def _address_space_free() -> int | None:
    """Bytes of address space left under RLIMIT_AS (``ulimit -v`` / ``prlimit --as``)."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    size = proc_status_mb("VmSize")
    return None if size is None else max(0, soft - int(size * 2**20))


def free_ram_bytes() -> int:
    """Memory this process may still allocate: the least of the kernel's MemAvailable, what
    its memory cgroup still allows (a container's or ``systemd-run -p MemoryMax``'s limit)
    and the address space left under RLIMIT_AS. Off Linux: the physical memory."""
    figures = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    figures.append(int(line.split()[1]) * 1024)
    except OSError:
        figures.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    figures += [f for f in (_cgroup_free(), _address_space_free()) if f is not None]
    return min(figures)
