"""The pruning methods' names, in the order forms and flags list them, known without
importing the methods: the field definitions (core.fields) and the forms validate a method
name without torch. ``core.methods`` registers the classes; a test checks that its
``available_methods()`` gives exactly these names in this order."""

from __future__ import annotations

METHOD_NAMES: tuple[str, ...] = ("magnitude", "wanda", "sparsegpt", "slicegpt", "attention-gd")
