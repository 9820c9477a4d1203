"""Save and load a sliced model: safetensors weights, ``slicing.json`` (the widths) and the
Hugging Face ``config.json``; loading rebuilds the dense model from its config, gives it the
sliced shapes, then loads the weights strictly."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from core.errors import ConfigError, ModelLoadError
from core.methods.slicegpt.folding import untie_head
from core.methods.slicegpt.modules import (
    SLICING_FILE,
    WEIGHTS_FILE,
    FoldedRMSNorm,
    PostNormWriter,
    SlicedDecoderLayer,
    SliceSpec,
    as_adapter,
    check_sliceable,
    is_sliced,
    set_embedding,
    set_linear,
)
from core.models.weights import INDEX_FILE, weight_map


def apply_structure(model: nn.Module, spec: SliceSpec) -> None:
    """Give a freshly built dense HF model the sliced shapes of ``spec`` (weights uninitialised)."""
    adapter = as_adapter(model)
    check_sliceable(adapter)
    if adapter.hidden_size != spec.hidden_size or adapter.n_layers != len(spec.widths):
        raise ModelLoadError(
            f"{SLICING_FILE} describes d={spec.hidden_size} with {len(spec.widths)} layers but the "
            f"config has d={adapter.hidden_size} with {adapter.n_layers}"
        )
    if spec.post_norms != adapter.traits(adapter.config).post_norms:
        raise ModelLoadError(
            f"{SLICING_FILE} says post_norms={spec.post_norms} but {adapter.family} models "
            f"{'have' if not spec.post_norms else 'lack'} post-block norms"
        )
    untie_head(adapter)
    embed = adapter.embed_tokens
    dtype = embed.weight.dtype

    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device=embed.weight.device)

    def reshape(lin: nn.Linear, out: int, inp: int) -> None:
        set_linear(lin, empty(out, inp), None if lin.bias is None else empty(out))

    for table in (embed, adapter.position_table):
        if table is not None:
            set_embedding(table, empty(table.num_embeddings, spec.widths[0][0]))
    d = spec.hidden_size
    for i, (d_in, d_mid, d_out) in enumerate(spec.widths):
        layer = adapter.layers[i]
        for lin in adapter.attn_readers(layer):
            reshape(lin, lin.out_features, d_in)
        for lin in adapter.mlp_readers(layer):
            reshape(lin, lin.out_features, d_mid)
        posts = [None, None]  # post-block norms: the writers keep d outputs, P writes d′
        for k, (writer, width) in enumerate(
            ((adapter.attn_writer(layer), d_mid), (adapter.mlp_writer(layer), d_out))
        ):
            if spec.post_norms:
                posts[k] = PostNormWriter(d, spec.eps, empty(width, d))
            else:
                reshape(writer, width, writer.in_features)
        adapter.layers[i] = SlicedDecoderLayer(
            adapter.attention_block(layer),
            adapter.mlp_block(layer),
            FoldedRMSNorm(d, spec.eps),
            FoldedRMSNorm(d, spec.eps),
            empty(d_in, d_mid),
            empty(d_mid, d_out),
            *posts,
        )
    adapter.set_final_norm(FoldedRMSNorm(spec.hidden_size, spec.eps))
    head = adapter.lm_head
    if spec.head_bias and head.bias is None:
        head.bias = nn.Parameter(empty(head.out_features), requires_grad=False)
    reshape(head, head.out_features, spec.widths[-1][2])
    adapter.model.slicing = spec


def save_sliced(model: nn.Module, folder: str | Path) -> Path:
    """Write ``model.safetensors``, ``slicing.json`` and the HF ``config.json`` into folder."""

    model = as_adapter(model).model
    if not is_sliced(model):
        raise ConfigError("save_sliced needs a model sliced by slice_model (no .slicing found)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, folder / WEIGHTS_FILE, metadata={"format": "pt"})
    (folder / SLICING_FILE).write_text(json.dumps(model.slicing.to_json(), indent=2) + "\n")
    model.config.save_pretrained(folder)
    return folder


def load_sliced(
    folder: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
) -> nn.Module:
    """Rebuild a sliced model saved by ``save_sliced``: HF model from config, sliced shapes
    from ``slicing.json``, then the weights (strict). Returns the model in eval mode.

    attn_implementation: as for ``from_pretrained`` ("eager" to get attention weights);
    None lets transformers choose (sdpa), which may differ from the sliced model's in the
    last float bits."""

    folder = Path(folder)
    # one safetensors file (save_sliced) or shards with an index (a streamed slice)
    weights = WEIGHTS_FILE if not (folder / INDEX_FILE).is_file() else INDEX_FILE
    missing = [f for f in ("config.json", SLICING_FILE, weights) if not (folder / f).is_file()]
    if missing:
        raise ModelLoadError(f"{folder} is not a sliced model folder: missing {', '.join(missing)}")
    spec = SliceSpec.from_json(json.loads((folder / SLICING_FILE).read_text()))
    config = AutoConfig.from_pretrained(folder)
    config.tie_word_embeddings = False
    model = AutoModelForCausalLM.from_config(
        config, dtype=dtype, attn_implementation=attn_implementation
    )
    apply_structure(model, spec)
    state: dict[str, torch.Tensor] = {}
    for file in sorted(set(weight_map(folder).values())):
        state.update(load_file(folder / file))
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()
