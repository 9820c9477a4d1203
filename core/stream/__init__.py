"""Models larger than RAM: weights streamed from safetensors one module at a time.

- ``residency``: the meta-device ``skeleton`` and ``StreamedOffload``;
- ``pipeline``: prune, slice and evaluate a model folder layer by layer.

The safetensors reads and shard writes they stand on (``LazyWeights``, ``ShardWriter``) are
``core.models.weights``, below the methods that save sliced and structured models with them.
"""
