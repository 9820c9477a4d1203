"""SliceGPT: delete rows and columns by projecting the residual stream onto its top PCA subspace.

Ashkboos et al., ICLR'24 (arXiv 2401.15024; papers.md §6). One module per step:

- ``folding``: fold each RMSNorm's γ into the linears that read it (computational invariance);
- ``rotation``: the sliced width d′, the PCA basis of a residual boundary, W·Q·D products;
- ``modules``: ``FoldedRMSNorm``, ``SlicedDecoderLayer``, ``SliceSpec`` (the widths);
- ``procedure``: ``slice_model``, the whole procedure, with its options and report;
- ``io``: ``save_sliced`` / ``load_sliced``;
- ``method``: the registered ``SliceGPT`` method.

The package re-exports what the rest of ``core`` uses; the steps' own names (folding,
rotation, the sliced modules) are imported from their modules.
"""

from core.methods.slicegpt.io import load_sliced, save_sliced
from core.methods.slicegpt.method import SliceGPT
from core.methods.slicegpt.modules import as_adapter
from core.methods.slicegpt.procedure import SliceOptions, SliceReport, slice_model
from core.methods.slicegpt.rotation import sliced_width

__all__ = [
    "SliceGPT",
    "SliceOptions",
    "SliceReport",
    "as_adapter",
    "load_sliced",
    "save_sliced",
    "slice_model",
    "sliced_width",
]
