"""Shards written without a second copy (core.models.weights): tensors from their own memory,
tensors kept from the source copied file to file, never read into memory."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.models import weights
from core.models.weights import INDEX_FILE, LazyWeights, ShardWriter, Span, read_header, write_shard


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(50, 8, generator=g),
        "layers.0.w": torch.randn(8, 8, generator=g),
        "layers.0.norm": torch.ones(8, dtype=torch.bfloat16),
        "layers.1.w": torch.randn(8, 8, generator=g),
        "head.weight": torch.randn(50, 8, generator=g),
        "flags": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 3),
    }


def test_write_shard_round_trips_every_dtype_and_span(tmp_path) -> None:
    ts = _tensors()
    save_file(ts, tmp_path / "src.safetensors")
    assert write_shard(tmp_path / "a.safetensors", ts) == sum(
        t.numel() * t.element_size() for t in ts.values()
    )
    header, base = read_header(tmp_path / "src.safetensors")
    spans = {
        k: Span(
            tmp_path / "src.safetensors",
            base + header[k]["data_offsets"][0],
            header[k]["data_offsets"][1] - header[k]["data_offsets"][0],
            header[k]["dtype"],
            tuple(header[k]["shape"]),
        )
        for k in ts
    }
    write_shard(tmp_path / "b.safetensors", {"extra": torch.arange(4), **spans})
    for name in ("a", "b"):
        got = load_file(tmp_path / f"{name}.safetensors")
        for k, v in ts.items():
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), (name, k)


def test_unreplaced_tensors_of_a_mixed_shard_are_copied_not_read(tmp_path, monkeypatch) -> None:
    """The embedding shares a file with layer 0 (as save_pretrained packs shards): only the
    layer is replaced; the embedding must reach the output without being read."""
    ts = _tensors()
    src = tmp_path / "src"
    src.mkdir()
    first = {k: ts[k] for k in ("embed.weight", "layers.0.w", "layers.0.norm")}
    second = {k: v for k, v in ts.items() if k not in first}
    save_file(first, src / "model-00001-of-00002.safetensors")
    save_file(second, src / "model-00002-of-00002.safetensors")
    files = {k: "model-00001-of-00002.safetensors" for k in first}
    files |= {k: "model-00002-of-00002.safetensors" for k in second}
    (src / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": files}))
    writer = ShardWriter(tmp_path / "out", shard_bytes=2**20)
    changed = {"layers.0.w": ts["layers.0.w"] * 0, "layers.0.norm": ts["layers.0.norm"]}
    writer.add("layers.0", changed)

    def no_reads(*_a, **_k):
        raise AssertionError("a kept tensor was read into memory")

    monkeypatch.setattr(weights, "read_tensors", no_reads)
    out = writer.finish(LazyWeights(src))
    monkeypatch.undo()
    got = LazyWeights(out).read(list(ts))
    for k, v in ts.items():
        assert torch.equal(got[k], changed.get(k, v)), k
    assert LazyWeights(out).nbytes() == LazyWeights(src).nbytes()


def test_a_truncated_source_is_an_error(tmp_path) -> None:
    from core.errors import ModelLoadError

    ts = _tensors()
    save_file(ts, tmp_path / "src.safetensors")
    header, base = read_header(tmp_path / "src.safetensors")
    start, end = header["head.weight"]["data_offsets"]
    span = Span(tmp_path / "src.safetensors", base + start, end - start + 10**6, "F32", (1,))
    with pytest.raises(ModelLoadError, match="ends inside a tensor"):
        write_shard(tmp_path / "x.safetensors", {"bad": span})
