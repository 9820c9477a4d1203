"""The tiny model of every family, randomised so that folding and biases are exercised, and
the inputs the family tests feed it (tests/test_families.py, tests/test_slicing_families.py)."""

from __future__ import annotations

import torch

from core.adapters import adapter_for
from core.models.load import build_tiny_model

FAMILY_MODELS = [
    "tiny-llama",
    "tiny-mistral",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-gemma3",
    "tiny-phi3",
    "tiny-opt",
]
SLICEABLE = FAMILY_MODELS  # Gemma-3 through its post-norm writers (PostNormWriter)
L = 32  # longer than the 16-token sliding windows of tiny-mistral / tiny-gemma3


def randomized(name: str, seed: int = 0, dtype: torch.dtype = torch.float32):
    """The tiny model with random norm gains, norm biases and linear biases (HF initialises
    them to neutral values, under which folding and bias handling would go untested)."""
    model = build_tiny_model(name, seed=seed).to(dtype).eval()
    ad = adapter_for(model)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.rand(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            if pname.endswith("bias"):
                p.copy_(0.2 * (noise - 0.5))
            elif p.dim() == 1 and "norm" in pname:
                p.copy_(noise - 0.5 if ad.layout.norm == "rms_1p" else 0.5 + noise)
    return model, ad


def ids(n: int = 4, length: int = L, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits(model, x: torch.Tensor) -> torch.Tensor:
    return model(input_ids=x, use_cache=False).logits
