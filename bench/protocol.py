"""What every benchmark script shares: the protocol's arguments and a quiet results store.

Scripts run as ``python bench/NAME.py`` and import this module by its bare name (their own
folder is first on ``sys.path``), as they do ``appserver``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def protocol_parser(
    doc: str, nsamples: int, seqlen: int, max_windows: int
) -> argparse.ArgumentParser:
    """A parser with the options of every protocol: model, data folder, calibration size,
    window length, evaluation windows, results store. ``doc``: the script's docstring."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data-dir", default=str(SHARED_DATA))
    ap.add_argument("--nsamples", type=int, default=nsamples, help="calibration sequences")
    ap.add_argument("--seqlen", type=int, default=seqlen, help="tokens per sequence / window")
    ap.add_argument("--max-windows", type=int, default=max_windows, help="evaluation windows")
    ap.add_argument("--store", default=None, help="results store (default: a temp dir)")
    return ap


def protocol_windows(tokenizer, data_dir: str, nsamples: int, seqlen: int, max_windows: int):
    """The SparseGPT/Wanda parity protocol's tensors: calibration (nsamples, seqlen) from C4
    train (seed 0) and the first ``max_windows`` evaluation windows of WikiText-2 test."""
    from core.data import calibration_windows, eval_windows, load_corpus
    from core.settings.config import DataSpec

    calib = calibration_windows(
        tokenizer, load_corpus(DataSpec("c4", "train", data_dir)), nsamples, seqlen, 0
    )
    test = load_corpus(DataSpec("wikitext2", "test", data_dir))
    return calib, eval_windows(tokenizer, test, seqlen, max_windows)


def store_path(args: argparse.Namespace, prefix: str) -> str:
    """The results store of this run: --store, or a fresh temp dir."""
    return args.store or tempfile.mkdtemp(prefix=prefix)


def open_store(args: argparse.Namespace, prefix: str):
    """The results store, with transformers' progress bars and info logs silenced (the
    scripts print their own table)."""
    import transformers

    from core.store.run_store import RunStore

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    logging.basicConfig(level=logging.WARNING)
    return RunStore(store_path(args, prefix))
