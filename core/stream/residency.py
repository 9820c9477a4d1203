"""The streamed residency: a model skeleton on the meta device whose modules are read from
safetensors when fetched and written out (when changed) and dropped when released.

``skeleton`` builds the model from its config with every parameter on the meta device
(buffers such as RoPE's inverse frequencies are computed for real: they are not in the
weight files). ``StreamedOffload.fetch`` materialises one module's parameters on the compute
device from ``LazyWeights``, in the skeleton's dtype; ``release`` hands a changed module's
state to a ``ShardWriter`` and turns its parameters back into meta tensors, so the process
holds at most the modules currently fetched (one decoder layer in every walk).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from accelerate import init_empty_weights
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from core.adapters import adapter_for
from core.machine.process_memory import trim_heap
from core.methods.slicegpt import SLICING_FILE, SliceSpec, apply_structure
from core.models.offload import Offload
from core.models.weights import LazyWeights, ShardWriter


def skeleton(
    folder: str | Path, dtype: torch.dtype = torch.float32, attn_implementation: str | None = None
) -> nn.Module:
    """The causal LM of a safetensors folder with its parameters on the meta device.

    A SliceGPT folder (with ``slicing.json``) gets its sliced shapes. attn_implementation:
    as for ``from_pretrained`` (None: transformers picks, usually sdpa; "eager" reproduces
    a model built with eager attention bit for bit)."""
    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder)
    sliced = (folder / SLICING_FILE).is_file()
    if sliced:
        config.tie_word_embeddings = False
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation=attn_implementation
        )
    if sliced:
        spec = SliceSpec.from_json(json.loads((folder / SLICING_FILE).read_text()))
        apply_structure(model, spec)
    return model.eval()


def largest_unit_bytes(model: nn.Module) -> int:
    """Bytes of the largest module a streamed walk holds at once: the input embeddings,
    one decoder layer, or the LM head (the skeleton's dtype; a tied head counts as its own
    unit, as it is read again for the head)."""
    adapter = adapter_for(model)
    units = [model.get_input_embeddings(), *adapter.layers, model.get_output_embeddings()]
    return max(
        sum(p.numel() * p.element_size() for p in unit.parameters())
        for unit in units
        if unit is not None
    )


def materialised(model: nn.Module) -> int:
    """Parameters of ``model`` that hold real storage (not on the meta device)."""
    return sum(p.numel() for p in model.parameters() if p.device.type != "meta")


class StreamedOffload(Offload):
    """Fetch reads a module's tensors from ``source``; release writes it to ``writer`` when
    it changed (and a writer is given), then returns it to the meta device."""

    streamed = True

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | str,
        source: LazyWeights,
        writer: ShardWriter | None = None,
    ) -> None:
        super().__init__(model, device)
        self.source, self.writer = source, writer
        self.peak_materialised = 0  # most parameters ever materialised at once
        # a tied parameter has several names; read it under the one the files hold
        names: dict[int, list[str]] = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(n)
        self.alias = {
            n: next((m for m in group if m in source), n) for group in names.values() for n in group
        }
        # a tied head whose skeleton was not tied (transformers ties at load time)
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        if getattr(model.config, "tie_word_embeddings", False) and None not in (head, embed):
            head_key, embed_key = f"{self.name(head)}.weight", f"{self.name(embed)}.weight"
            if head_key not in source and embed_key in source:
                self.alias[head_key] = embed_key

    def _bring(self, module: nn.Module, name: str) -> None:
        wanted: list[tuple[nn.Module, str, str, bool]] = []
        for sub_name, sub in module.named_modules():
            prefix = ".".join(x for x in (name, sub_name) if x)
            for attr, p in sub._parameters.items():
                if p is not None and p.device.type == "meta":
                    wanted.append((sub, attr, f"{prefix}.{attr}" if prefix else attr, True))
            for attr, b in sub._buffers.items():
                if b is not None and b.device.type == "meta":
                    wanted.append((sub, attr, f"{prefix}.{attr}" if prefix else attr, False))
        keys = [self.alias.get(key, key) for _, _, key, _ in wanted]
        missing = [k for k in keys if k not in self.source]
        if missing:
            raise KeyError(f"{self.source.folder} lacks {missing[:3]} for module {name!r}")
        tensors = self.source.read(keys)
        for (sub, attr, _, is_param), key in zip(wanted, keys, strict=True):
            old = sub._parameters[attr] if is_param else sub._buffers[attr]
            t = tensors.pop(key).to(self.device, old.dtype)
            if tuple(t.shape) != tuple(old.shape):
                raise ValueError(
                    f"{key}: file has shape {tuple(t.shape)}, model {tuple(old.shape)}"
                )
            if is_param:
                sub._parameters[attr] = nn.Parameter(t, requires_grad=False)
            else:
                sub._buffers[attr] = t
        module.to(self.device)  # buffers computed at build time (RoPE tables)
        self.peak_materialised = max(self.peak_materialised, materialised(self.model))

    def _return(self, module: nn.Module, name: str, changed: bool, home) -> None:
        if changed and self.writer is not None:
            self.writer.add(name, module.state_dict(prefix=f"{name}." if name else ""))
        for sub in module.modules():
            for attr, p in sub._parameters.items():
                if p is not None:
                    sub._parameters[attr] = nn.Parameter(p.to("meta"), requires_grad=False)
            for attr, b in sub._buffers.items():
                if b is not None:
                    persistent = attr not in sub._non_persistent_buffers_set
                    sub._buffers[attr] = b.to("meta" if persistent else "cpu")
        trim_heap()  # hand the freed module back to the OS, so RSS does not creep

    def finish(self) -> None:
        """Nothing to close here: the caller finishes its ``ShardWriter`` (it adds the
        config and tokenizer files)."""
