"""Models larger than RAM: weights streamed from safetensors one module at a time.

- ``weights``: ``LazyWeights`` (read named tensors on demand), ``ShardWriter`` (write shards);
- ``residency``: the meta-device ``skeleton`` and ``StreamedOffload``;
- ``pipeline``: prune, slice and evaluate a model folder layer by layer.

Kept free of imports so ``core.stream.weights`` can be used by modules ``pipeline`` needs.
"""
