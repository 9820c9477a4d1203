"""``python -m pages.serve [streamlit flags]``: the app's server, warmed before it listens.

Streamlit runs every session's script inside the server process, so whatever a page imports or
caches per process is paid by the first visitor after a start: torch, transformers and the run
stack, the default model's shape for the time estimates, its family's modeling code (at the
first attention map) and the CPU's measured speed. ``warm`` pays them before ``streamlit run``
binds its port, so a start takes that much longer and the first page after it costs what any
later one does (``bench/app_latency.py`` prints both; figures in docs/benchmarks.md).

Last, ``settle_heap`` freezes what the warm-up built. Streamlit collects garbage after every
script run (its ``runner.postScriptGC``, a full ``gc.collect(2)``), and with torch,
transformers, pandas and plotly imported that walks hundreds of thousands of objects while
holding the GIL, so the server's event loop cannot tell the browser the run has finished
until it is over. Frozen, the import-time heap (which lives as long as the process anyway) is
left out of collections, and the collection after a run walks only what pages made since.

Nothing here changes what the app does: a warm-up step that fails is logged and skipped, and
the page then pays for it as before. ``make run`` and the app benches start the app this way.
"""

from __future__ import annotations

import ast
import gc
import importlib
import logging
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from streamlit.web import cli
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from core.models.load import model_config
from core.planning.cost import model_shape
from core.planning.speed import cpu_flops
from core.requests.request import DEFAULT_MODEL
from core.settings.config import ModelSpec

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
log = logging.getLogger("prunescope.serve")


def top_imports(path: Path) -> list[str]:
    """Modules a script imports at its top level (``import a.b`` -> a.b; ``from a import b``
    -> a, and a.b when that is a module), in file order. A script that does not parse names
    none: its page shows the error when it runs, the server still starts."""
    try:
        body = ast.parse(path.read_text()).body
    except (OSError, SyntaxError, ValueError) as exc:
        log.warning("warm-up: cannot read %s (%s); its page pays for its imports", path, exc)
        return []
    names: list[str] = []
    for node in body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module not in (None, "__future__"):
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def page_modules(scripts: Iterable[Path]) -> list[str]:
    """What the app and its pages import, less ``pages.*``: a page script draws when imported,
    and a helper's ``st.cache_data`` made before the runtime exists would keep a cache of its
    own. Names that are not modules (``f`` of ``from m import f``) are kept: ``warm`` skips
    them."""
    seen: dict[str, None] = {}
    for script in scripts:
        for name in top_imports(script):
            if name.split(".")[0] != "pages":
                seen.setdefault(name)
    return list(seen)


def default_model_class(name: str) -> type:
    """The model's shape for the estimates (cached per process) and its transformers class:
    transformers imports a family's modeling code at its first model (~1 s), which would
    otherwise fall on the first attention map. Other families pay that once, when first used."""
    model_shape(ModelSpec(name=name))
    return MODEL_FOR_CAUSAL_LM_MAPPING[type(model_config(name))]


def settle_heap() -> int:
    """Collect the warm-up's garbage, then move every live object to the permanent generation
    (``gc.freeze``), so later collections skip them; how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def warm(scripts: Iterable[Path]) -> float:
    """Import every module the pages import, fill the per-process caches that the first
    page's estimate reads, and freeze the resulting heap; seconds spent."""
    t0 = time.perf_counter()
    for name in page_modules(list(scripts)):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # an attribute, not a module (from core import figures ok)
            continue
        except Exception as exc:  # a warm-up must never stop the server
            log.warning("warm-up: import %s failed (%s); the first page pays for it", name, exc)
    for step in (lambda: default_model_class(DEFAULT_MODEL), cpu_flops):
        try:
            step()
        except Exception as exc:  # e.g. the embedded model is not installed
            log.warning("warm-up step failed (%s); the first estimate pays for it", exc)
    log.info("warm-up: %d objects frozen out of the collection after each run", settle_heap())
    return time.perf_counter() - t0


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seconds = warm([APP, *sorted((ROOT / "pages").glob("*.py"))])
    log.info("PruneScope: warmed in %.1f s; starting the server", seconds)
    sys.argv = ["streamlit", "run", str(APP), *argv]
    cli.main()


if __name__ == "__main__":
    main(sys.argv[1:])
