"""core.machine.process_memory: the pruning phase's budget arithmetic and the glibc helpers (no-ops
elsewhere)."""

from __future__ import annotations

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
    assert isinstance(memory.trim_heap(), bool)
    if sys.platform.startswith("linux"):
        assert memory.proc_status_mb("VmRSS") > 0
    assert memory.proc_status_mb("NoSuchField") is None
