"""SliceGPT: delete rows and columns by projecting the residual stream onto its top PCA subspace.

Ashkboos et al., ICLR'24 (arXiv 2401.15024; papers.md §6). One module per step:

- ``folding``: fold each RMSNorm's γ into the linears that read it (computational invariance);
- ``rotation``: the sliced width d′, the PCA basis of a residual boundary, W·Q·D products;
- ``modules``: ``FoldedRMSNorm``, ``SlicedDecoderLayer``, ``SliceSpec`` (the widths);
- ``procedure``: ``slice_model``, the whole procedure, with its options and report;
- ``io``: ``save_sliced`` / ``load_sliced``;
- ``method``: the registered ``SliceGPT`` method.
"""

from core.methods.slicegpt.folding import (
    center_embeddings,
    center_stream,
    fold_norms,
    untie_head,
)
from core.methods.slicegpt.io import apply_structure, load_sliced, save_sliced
from core.methods.slicegpt.method import SliceGPT
from core.methods.slicegpt.modules import (
    FORMAT_VERSION,
    SLICING_FILE,
    WEIGHTS_FILE,
    FoldedRMSNorm,
    SlicedDecoderLayer,
    SliceSpec,
    as_adapter,
    check_sliceable,
    family_refusal,
    is_sliced,
    set_embedding,
    set_linear,
)
from core.methods.slicegpt.procedure import ORIENTATIONS, SliceOptions, SliceReport, slice_model
from core.methods.slicegpt.rotation import (
    accumulate_gram,
    pca_basis,
    randomize_kept,
    rotate_embeddings,
    rotate_inputs,
    rotate_outputs,
    sliced_width,
)

__all__ = [
    "FORMAT_VERSION",
    "ORIENTATIONS",
    "SLICING_FILE",
    "WEIGHTS_FILE",
    "FoldedRMSNorm",
    "SliceGPT",
    "SliceOptions",
    "SliceReport",
    "SliceSpec",
    "SlicedDecoderLayer",
    "accumulate_gram",
    "apply_structure",
    "as_adapter",
    "center_embeddings",
    "center_stream",
    "check_sliceable",
    "family_refusal",
    "fold_norms",
    "is_sliced",
    "load_sliced",
    "pca_basis",
    "randomize_kept",
    "rotate_embeddings",
    "rotate_inputs",
    "rotate_outputs",
    "save_sliced",
    "set_embedding",
    "set_linear",
    "slice_model",
    "sliced_width",
    "untie_head",
]
