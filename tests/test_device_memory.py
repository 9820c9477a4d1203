"""GPU memory accounting and out-of-memory handling (issue #16): an OOM-like failure in the
middle of a layer becomes one clear message naming the flag that helps, the run is marked
failed and nothing is half-written (no run folder, no temporary folder, no --save folder)."""

import pytest
import torch

from core.errors import DeviceMemoryError
from core.machine.gpu_memory import is_out_of_memory, oom_as_error, peak_report
from core.methods import sparsegpt
from core.runs import RunOptions, run_prune
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec, PruneConfig

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=4)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64)


def test_out_of_memory_is_recognised_and_other_errors_pass():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    assert is_out_of_memory(RuntimeError("MPS backend out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))  # negative control
    with pytest.raises(DeviceMemoryError, match="--activations-on-cpu"), oom_as_error("cpu"):
        raise torch.OutOfMemoryError("CUDA out of memory")
    with pytest.raises(ValueError), oom_as_error("cpu"):
        raise ValueError("not memory")


def test_peak_report_is_empty_off_cuda():
    assert peak_report("cpu") == {}


def test_oom_mid_layer_marks_the_run_failed_and_writes_nothing(store, tmp_path, monkeypatch):
    real = sparsegpt.SparseGPT.prune_layer
    seen = []

    def failing(self, ctx):
        seen.append(ctx.index)
        if ctx.index == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, ctx)

    monkeypatch.setattr(sparsegpt.SparseGPT, "prune_layer", failing)
    (tmp_path / "out").mkdir()
    save = tmp_path / "out" / "saved"
    with pytest.raises(DeviceMemoryError, match="--activations-on-cpu") as err:
        run_prune(
            MODEL,
            PruneConfig("sparsegpt", 0.5),
            CALIB,
            EVAL,
            store,
            opts=RunOptions(save_dir=str(save)),
        )
    assert "--batch-size" in str(err.value)
    assert seen == [0, 1, 2]
    runs = {r.kind: r for r in store.list()}
    assert runs["prune"].status == "failed"
    assert "DeviceMemoryError" in runs["prune"].error and "out of memory" in runs["prune"].error
    assert runs["eval"].status == "done"  # the dense baseline finished before and stays
    assert not store.run_dir(runs["prune"].id).exists()
    assert list((store.root / "tmp").iterdir()) == []
    assert list((tmp_path / "out").iterdir()) == []  # no --save folder, no partial one
    # the store is usable: the same run succeeds once the failure is gone
    monkeypatch.setattr(sparsegpt.SparseGPT, "prune_layer", real)
    res = run_prune(
        MODEL,
        PruneConfig("sparsegpt", 0.5),
        CALIB,
        EVAL,
        store,
        opts=RunOptions(save_dir=str(save)),
    )
    assert store.get(res["run_id"]).status == "done" and (save / "config.json").is_file()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_run_records_peak_gpu_memory(store):
    spec = ModelSpec("tiny-llama", "cuda", "float32")
    res = run_prune(spec, PruneConfig("wanda", 0.5), CALIB, EVAL, store)
    m = res["metrics"]
    assert 0 < m["gpu_peak_allocated_mb"] <= m["gpu_peak_reserved_mb"] < m["gpu_total_mb"]
