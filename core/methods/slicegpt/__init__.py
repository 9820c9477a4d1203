"""SliceGPT: delete rows and columns by projecting the residual stream onto its top PCA subspace.

Ashkboos et al., ICLR'24 (arXiv 2401.15024; papers.md §6). One module per step:

- ``folding``: fold each norm's γ (β) into the linears that read it, layer by layer;
- ``rotation``: the sliced width d′, the PCA basis of a residual boundary, W·Q·D products;
- ``modules``: ``FoldedRMSNorm``, ``SlicedDecoderLayer``, ``SliceSpec`` (the widths);
- ``procedure``: ``slice_model``, the whole procedure, with its options and report;
- ``io``: ``save_sliced`` / ``load_sliced``, ``apply_structure`` (sliced shapes on a skeleton);
- ``method``: the registered ``SliceGPT`` method.

The package re-exports what the rest of ``core`` uses; the steps' own names (folding,
rotation, the sliced modules) are imported from their modules.
"""

from core.methods.slicegpt.io import apply_structure, load_sliced, save_sliced
from core.methods.slicegpt.method import SliceGPT
from core.methods.slicegpt.modules import SLICING_FILE, SliceSpec, as_adapter, is_sliced
from core.methods.slicegpt.options import SliceOptions, SliceReport
from core.methods.slicegpt.procedure import slice_model
from core.methods.slicegpt.rotation import sliced_width

__all__ = [
    "SLICING_FILE",
    "SliceGPT",
    "SliceOptions",
    "SliceReport",
    "SliceSpec",
    "apply_structure",
    "as_adapter",
    "is_sliced",
    "load_sliced",
    "save_sliced",
    "slice_model",
    "sliced_width",
]
