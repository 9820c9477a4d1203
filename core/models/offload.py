"""Where a model's modules live between uses, and how one comes to the compute device.

Every layer-at-a-time walk (calibration capture, the layer-wise runner, SliceGPT, streamed
perplexity, attention probes) brings a module to the compute device with ``fetch`` and puts
it back with ``release``; nothing else moves weights. Two residencies share this protocol:

- ``Offload`` (here): the weights stay in memory where they were loaded (CPU, or the device
  itself); ``fetch`` moves a module to the device, ``release`` moves it back home.
- ``core.stream.StreamedOffload``: the model is a skeleton on the meta device; ``fetch``
  reads the module's tensors from its safetensors files, ``release`` writes a changed
  module to the output shards and returns it to the meta device. At most one module's
  weights exist at a time.
"""

from __future__ import annotations

import torch
from torch import nn


def module_device(module: nn.Module) -> torch.device | None:
    """Device of a module's first parameter, else its first buffer; None if it has neither."""
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return None


def _resolve(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


class Offload:
    """In-memory residency: ``fetch`` moves a module to ``device``, ``release`` moves it home.

    Fetches nest: a module fetched twice is released by the second ``release`` (a caller
    may hold the embeddings while a capture fetches and releases them too); ``changed``
    accumulates. Modules are keyed by their name in the model, so a module replaced at the
    same place (SliceGPT's sliced layer) is released as its predecessor was fetched.
    """

    streamed = False

    def __init__(self, model: nn.Module, device: torch.device | str) -> None:
        self.model = model
        self.device = torch.device(device)
        self._names: dict[int, str] = {}
        self._held: dict[str, list] = {}  # name -> [fetch count, changed, home]

    def name(self, module: nn.Module) -> str:
        """The module's dotted name inside the model ('' for the model itself)."""
        name = self._names.get(id(module))
        # ids of freed modules are reused: trust the cache only if the name still resolves
        if name is None or _resolve(self.model, name) is not module:
            self._names = {id(m): n for n, m in self.model.named_modules()}
            name = self._names.get(id(module))
        if name is None:
            raise ValueError(f"{type(module).__name__} is not part of the model")
        return name

    def fetch(self, module: nn.Module) -> nn.Module:
        """Bring ``module``'s weights to the compute device; returns the module."""
        name = self.name(module)
        if name in self._held:
            self._held[name][0] += 1
        else:
            self._held[name] = [1, False, self._bring(module, name)]
        return module

    def release(self, module: nn.Module, changed: bool = False) -> None:
        """End one use of ``module``; the last one puts it back. ``changed``: its weights
        were edited (the streamed residency then writes them out)."""
        name = self.name(module)
        held = self._held[name]
        held[0] -= 1
        held[1] = held[1] or changed
        if held[0] == 0:
            del self._held[name]
            self._return(module, name, held[1], held[2])

    def resident(self) -> list[str]:
        """Names of the modules fetched and not yet released."""
        return list(self._held)

    def finish(self) -> None:
        """End of a walk that changed the model (the streamed residency closes its output)."""

    # ---- what a residency does -------------------------------------------------------------
    def _bring(self, module: nn.Module, name: str) -> torch.device | None:
        home = module_device(module)
        module.to(self.device)
        return home

    def _return(self, module: nn.Module, name: str, changed: bool, home) -> None:
        if home is not None:
            module.to(home)
