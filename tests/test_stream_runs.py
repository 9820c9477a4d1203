"""Streamed runs from the CLI (``--stream``, issue #16): the same masks, tables and
perplexity as the in-memory run of the same folder, refusals before any work, and nothing
half-written when a streamed run fails."""

import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from core.cli.main import main
from core.models.load import build_tiny_model, byte_tokenizer
from core.settings.config import ModelSpec, RunConfig
from core.store.run_store import RunStore

COMPARED = ("ppl", "nll", "dense_ppl", "n_tokens", "kept_params")
SPARSITY = ("achieved_sparsity", "decoder_sparsity")


def _save_tiny(folder, name="tiny-llama"):
    build_tiny_model(name).eval().save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _save_tiny(tmp_path_factory.mktemp("streamruns") / "tiny")


def _flags(model, store_root, *extra):
    return [
        *("--model", str(model), "--device", "cpu", "--dtype", "float32"),
        *("--calib", "pydoc", "--nsamples", "4", "--seqlen", "32"),
        *("--eval", "pydoc", "--max-windows", "4"),
        *("--store", str(store_root), "--quiet", "--json"),
        *extra,
    ]


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _tensors(folder):
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _table(store_root, run_id, name):
    return RunStore(store_root).load(run_id).table(name)


@pytest.mark.parametrize("method", ["wanda", "sparsegpt"])
def test_streamed_prune_gives_the_in_memory_run(capsys, tmp_path, folder, method):
    store_root = tmp_path / "store"
    runs = {}
    for mode, extra in (("memory", []), ("stream", ["--stream"])):
        argv = ["prune", "--method", method, "--sparsity", "0.5", "--save", str(tmp_path / mode)]
        code, out, err = _run(capsys, *argv, *_flags(folder, store_root, *extra))
        assert code == 0, err
        runs[mode] = json.loads(out)
    mem, st = runs["memory"], runs["stream"]
    assert st["run_id"] != mem["run_id"] and st["config"]["model"]["stream"] is True
    assert "stream" not in mem["config"]["model"]  # ids of in-memory runs unchanged
    # Perplexities to float tolerance (the streamed walk against the whole-model forward: see
    # NLL_REL in tests/test_stream.py); sparsities, masks and weights exactly (the same runner
    # code on the same float32 weights, one layer at a time).
    for key in COMPARED:
        assert st["metrics"][key] == pytest.approx(mem["metrics"][key], rel=1e-6), key
    for key in SPARSITY:
        assert st["metrics"][key] == mem["metrics"][key], key
    # the same weights, hence masks, whether saved whole or written shard by shard
    a, b = _tensors(tmp_path / "memory"), _tensors(tmp_path / "stream")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    for table in ("layers", "allocation", "eval_windows"):
        ta = _table(store_root, mem["run_id"], table).drop(columns="seconds", errors="ignore")
        tb = _table(store_root, st["run_id"], table).drop(columns="seconds", errors="ignore")
        pd.testing.assert_frame_equal(ta, tb, check_exact=False, rtol=1e-6)
    # the dense baseline was streamed too (its own run) and agrees
    dense = RunStore(store_root).load(st["metrics"]["dense_run"])
    assert dense.config["model"]["stream"] is True
    assert st["metrics"]["streamed"] is True


def test_streamed_slice_and_eval_give_the_in_memory_numbers(capsys, tmp_path, folder):
    store_root = tmp_path / "store"
    runs = {}
    for mode, extra in (("memory", []), ("stream", ["--stream"])):
        argv = ["slice", "--sparsity", "0.25", *_flags(folder, store_root, *extra)]
        code, out, err = _run(capsys, *argv)
        assert code == 0, err
        runs[mode] = json.loads(out)
    mem, st = runs["memory"]["metrics"], runs["stream"]["metrics"]
    assert st["model"]["hidden_size_sliced"] == mem["model"]["hidden_size_sliced"]
    # SliceGPT's rotations differ from in memory by float rounding (tests/test_stream.py)
    for key in ("ppl", "dense_ppl", "kept_params"):
        assert st[key] == pytest.approx(mem[key], rel=1e-6), key
    evals = {}
    for mode, extra in (("memory", []), ("stream", ["--stream"])):
        argv = ["eval", "--model", str(folder), "--device", "cpu", "--dtype", "float32"]
        argv += ["--dataset", "pydoc", "--seqlen", "32", "--max-windows", "4"]
        code, out, err = _run(capsys, *argv, "--store", str(store_root), "--json", *extra)
        assert code == 0, err
        evals[mode] = json.loads(out)["metrics"]
    assert evals["stream"]["ppl"] == pytest.approx(evals["memory"]["ppl"], rel=1e-6)


@pytest.mark.parametrize(
    "model, extra, message",
    [
        ("tiny-llama", [], "built in memory"),
        (None, ["--tasks", "piqa"], "zero-shot"),
        ("opt", ["--method", "slicegpt"], "LayerNorm"),
    ],
)
def test_streaming_refusals_come_before_any_work(capsys, tmp_path, folder, model, extra, message):
    if model == "opt":
        model = _save_tiny(tmp_path / "opt", "tiny-opt")
    store_root = tmp_path / "store"
    argv = ["prune", *_flags(model or folder, store_root, "--stream", *extra)]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and message in err, err
    assert RunStore(store_root).list() == []


def test_a_streamed_run_that_fails_leaves_nothing_half_written(
    capsys, tmp_path, folder, monkeypatch
):
    """An OOM-like error while layer 2 is pruned: the run is marked failed, no run folder,
    no model in the store, no --save folder."""
    from core.methods import wanda

    real = wanda.Wanda.prune_layer

    def failing(self, ctx):
        if ctx.index == 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        return real(self, ctx)

    monkeypatch.setattr(wanda.Wanda, "prune_layer", failing)
    store_root = tmp_path / "store"
    save = tmp_path / "saved"
    argv = ["prune", "--save", str(save), *_flags(folder, store_root, "--stream")]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "out of memory" in err.lower(), err
    recs = RunStore(store_root).list(kind="prune")
    assert [r.status for r in recs] == ["failed"]
    assert not save.exists() and not list(tmp_path.glob(".saved*"))
    assert not (store_root / "runs" / recs[0].id).exists()
    assert list((store_root / "tmp").iterdir()) == []


def test_stream_enters_the_run_id_only_when_on():
    off = RunConfig("eval", ModelSpec("m"))
    on = RunConfig("eval", ModelSpec("m", stream=True))
    assert "stream" not in off.to_dict()["model"] and on.to_dict()["model"]["stream"] is True
    assert RunConfig.from_dict(on.to_dict()) == on and RunConfig.from_dict(off.to_dict()) == off
    assert on.run_id != off.run_id
