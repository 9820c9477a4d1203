"""Randomly initialised Llama-shaped models written straight to safetensors, one unit
(embeddings, each decoder layer, final norm + head) per shard, so a model larger than RAM
can be made without ever holding it: for benchmarks and device checks of the streamed path.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch
from accelerate import init_empty_weights
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig

from core.models.weights import INDEX_FILE


def llama_config(
    layers: int, hidden: int, intermediate: int, vocab: int = 32000, kv_heads: int | None = None
) -> LlamaConfig:
    """An untied Llama config with 64-wide heads (``kv_heads``: GQA; default MHA)."""
    heads = hidden // 64
    return LlamaConfig(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        architectures=["LlamaForCausalLM"],
    )


def _unit(name: str) -> str:
    parts = name.split(".")
    if "layers" in parts:
        return ".".join(parts[: parts.index("layers") + 2])
    return "embed" if "embed" in name else "head"


def _pack(
    units: list[list[str]], shapes: dict[str, tuple], itemsize: int, shard_bytes: int | None
) -> list[list[str]]:
    """Tensor names per shard: one unit each (None), or units in order while they fit."""
    if shard_bytes is None:
        return units
    shards: list[list[str]] = [[]]
    size = 0
    for names in units:
        n = sum(math.prod(shapes[k]) for k in names) * itemsize
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].extend(names)
        size += n
    return shards


def write_random_model(
    folder: str | Path,
    config: LlamaConfig,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    shard_bytes: int | None = None,
) -> int:
    """Write a seeded random model (linears and embeddings N(0, 0.02²), norms 1) to
    ``folder`` (replaced). shard_bytes None: one unit per shard; otherwise units are packed
    in order into shards of at most ``shard_bytes`` (a larger unit alone), as
    ``save_pretrained(max_shard_size=...)`` writes real models. At most one shard is held.
    Returns the weight bytes."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with init_empty_weights():
        skeleton = AutoModelForCausalLM.from_config(config)
    shapes = {n: tuple(p.shape) for n, p in skeleton.named_parameters()}
    units: dict[str, list[str]] = {}
    for name in shapes:
        units.setdefault(_unit(name), []).append(name)
    shards = _pack(list(units.values()), shapes, dtype.itemsize, shard_bytes)
    gen = torch.Generator().manual_seed(seed)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        tensors = {}
        for n in names:
            if len(shapes[n]) == 1:
                tensors[n] = torch.ones(shapes[n], dtype=dtype)
            else:
                tensors[n] = (torch.randn(shapes[n], generator=gen) * 0.02).to(dtype)
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, folder / file, metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map.update(dict.fromkeys(names, file))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    config.save_pretrained(folder)
    return total
