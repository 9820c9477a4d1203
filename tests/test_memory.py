"""core.machine.process_memory: the pruning phase's budget arithmetic and the glibc helpers (no-ops
elsewhere)."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from core.machine import process_memory as memory


def test_phase_report_budget_and_margin() -> None:
    rep = memory.phase_report(1400.0, 1000.0, 500.0, 72.0, 180.0)
    assert rep["memory_budget_mb"] == pytest.approx(1252.0)
    assert rep["over_budget_mb"] == pytest.approx(148.0)
    assert rep["weight_mb"] == 500.0 and rep["analysis_buffers_mb"] == 180.0


def test_tensor_and_weight_sizes() -> None:
    lin = torch.nn.Linear(256, 512, bias=False)
    assert memory.weight_mb(lin) == pytest.approx(256 * 512 * 4 / 2**20)
    assert memory.tensor_mb(torch.zeros(1024, 256, dtype=torch.bfloat16), None) == 0.5


def test_helpers_run_and_peak_is_measured() -> None:
    memory.touch_weights(torch.nn.Linear(64, 64))
    memory.release_freed()
    memory.reset_peak_rss()
    assert memory.peak_rss_mb() > 0
    if sys.platform.startswith("linux"):
        assert memory.proc_status_mb("VmRSS") > 0
    assert memory.proc_status_mb("NoSuchField") is None


LINUX_GLIBC = sys.platform.startswith("linux") and memory._LIBC is not None


@pytest.mark.skipif(not LINUX_GLIBC, reason="VmHWM and malloc_trim are Linux/glibc's")
def test_reset_peak_rss_restarts_the_high_water_mark() -> None:
    big = torch.ones(200 * 2**20 // 4)  # 200 MiB, touched
    del big
    memory.release_freed()
    rss = memory.proc_status_mb("VmRSS")
    assert memory.peak_rss_mb() > rss + 150  # the freed tensor is still the peak
    memory.reset_peak_rss()
    assert memory.peak_rss_mb() < rss + 50  # a phase measured from here does not see it


@pytest.mark.skipif(not LINUX_GLIBC, reason="VmHWM and malloc_trim are Linux/glibc's")
def test_trim_heap_gives_freed_heap_pages_back() -> None:
    # ~170 MiB of heap blocks under the mmap threshold, the last one kept: free() alone cannot
    # shrink the heap past it, malloc_trim returns the pages in between.
    blocks = [bytes(bytearray(60_000)) for _ in range(3000)]
    last = blocks[-1]
    del blocks
    gc.collect()
    before = memory.proc_status_mb("VmRSS")
    assert memory.trim_heap() is True
    assert memory.proc_status_mb("VmRSS") < before - 100
    assert len(last) == 60_000
