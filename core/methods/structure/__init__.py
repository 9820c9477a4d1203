"""Structured pruning that leaves a smaller dense model: whole decoder layers (ShortGPT), KV
groups and MLP channels (FLAP, structured Wanda). One module per step and per method:

- ``budget``: a parameter budget, the counts it is measured in, a method's knob;
- ``edit``: in-place edits (keep KV groups, keep MLP channels, add a writer bias);
- ``stats``: what the methods measure on calibration tokens (writer input moments, Block
  Influence);
- ``spec`` / ``io``: the record of the shapes and the saved folder's reload;
- ``method``: ``StructuredMethod`` and ``StructureReport``;
- ``shortgpt``, ``flap``, ``wanda_sp``: the registered methods (their lines in
  ``core.names.METHODS``).

The package re-exports what runs and loaders use; the methods register when the registry
first imports them.
"""

from core.methods.structure.io import load_structured, save_structured
from core.methods.structure.spec import STRUCTURE_FILE, StructureSpec, is_structured

__all__ = ["STRUCTURE_FILE", "StructureSpec", "is_structured", "load_structured", "save_structured"]
