"""SliceGPT invariants (papers.md §6-7) on tiny random Llamas, plus one slow SmolLM2 check."""

from __future__ import annotations

import copy
import itertools
import json

import pytest
import torch
from torch import nn

from core.adapters import adapter_for
from core.errors import ConfigError, ModelLoadError
from core.methods import get_method
from core.methods.base import ApplyPlan
from core.methods.slicegpt import (
    SliceGPT,
    SliceOptions,
    load_sliced,
    save_sliced,
    slice_model,
    sliced_width,
)
from core.methods.slicegpt.folding import center_embeddings, untie_head
from core.methods.slicegpt.modules import SlicedDecoderLayer
from core.methods.slicegpt.rotation import pca_basis
from core.models.load import build_tiny_model

TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Where there is smoke there is fire. "
    "The early bird catches the worm, but the second mouse gets the cheese. "
)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return ((a - b).abs().max() / b.abs().max()).item()


def byte_ids(text: str, n: int, length: int, offset: int = 0) -> torch.Tensor:
    """(n, length) windows of the UTF-8 bytes of text repeated, starting at offset."""
    data = torch.tensor(list(text.encode() * (1 + (offset + n * length) // len(text))))
    return data[offset : offset + n * length].view(n, length)


def random_ids(n: int, length: int, seed: int, vocab: int = 256) -> torch.Tensor:
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids).logits


@torch.no_grad()
def mean_nll(model: nn.Module, ids: torch.Tensor) -> float:
    out = logits(model, ids)[:, :-1].float()
    return nn.functional.cross_entropy(out.flatten(0, 1), ids[:, 1:].flatten()).item()


@pytest.fixture
def exact_norms(monkeypatch):
    """HF's LlamaRMSNorm rounds through float32 even for float64 inputs, which caps a float64
    comparison at ~1e-7; the float64 reference gets norms computed in the input's dtype."""
    from transformers.models.llama import modeling_llama

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * (x * inv_rms)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", forward)


@pytest.fixture(scope="module")
def trained_state() -> dict[str, torch.Tensor]:
    """tiny-llama fitted briefly to TEXT, so that its residual stream has structure (a random
    model's NLL can even fall as s grows: slicing pushes it towards uniform predictions)."""
    model = build_tiny_model("tiny-llama", seed=0)
    ids = byte_ids(TEXT, 8, 64)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(40):
            loss = nn.functional.cross_entropy(
                model(input_ids=ids).logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def trained_model(state: dict[str, torch.Tensor]) -> nn.Module:
    model = build_tiny_model("tiny-llama", seed=0)
    model.load_state_dict(state)
    return model.eval()


# ---- pure functions ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("d", "s", "want"),
    [
        (64, 0.0, 64),
        (64, 0.25, 48),
        (576, 0.25, 432),
        (4096, 0.30, 2864),
        (3072, 0.30, 2144),
        (64, 0.9, 0),
    ],
)
def test_sliced_width(d: int, s: float, want: int) -> None:
    if want == 0:  # int(0.1·64) = 6 rounds down to 0
        with pytest.raises(ConfigError, match="rounds"):
            sliced_width(d, s)
        return
    got = sliced_width(d, s)
    assert got == want and got % 8 == 0


@pytest.mark.parametrize("s", [1.0, -0.1, 1.5])
def test_sliced_width_rejects_bad_sparsity(s: float) -> None:
    with pytest.raises(ConfigError):
        sliced_width(64, s)


def test_pca_basis_orthogonal_and_descending() -> None:
    X = torch.randn(500, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    X = X * torch.linspace(0.1, 3.0, 24, dtype=torch.float64)  # distinct variances
    cov = X.T @ X
    eigvals, Q = pca_basis(cov)
    assert torch.linalg.norm(Q.T @ Q - torch.eye(24, dtype=torch.float64)) < 1e-10
    assert bool((eigvals[:-1] >= eigvals[1:]).all())
    # Q diagonalises C with the (undamped) eigenvalues on the diagonal.
    assert torch.allclose(Q.T @ cov @ Q, torch.diag(eigvals), atol=1e-8 * eigvals[0].item())


def test_pca_basis_on_hand_made_2d_data() -> None:
    # Points along (1, 1) plus a smaller, uncorrelated spread (Σ t·u = 0) along (1, −1).
    t = torch.linspace(-1, 1, 21, dtype=torch.float64)
    u = 0.1 * (t**2 - (t**2).mean())
    X = torch.stack([t + u, t - u], dim=1)  # (21, 2)
    eigvals, Q = pca_basis(X.T @ X, damp=0.0)
    axes = Q * torch.sign(Q[0])  # fix each column's sign
    want = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64) / 2**0.5
    assert torch.allclose(axes, want, atol=1e-12)
    assert eigvals.tolist() == pytest.approx([2 * (t**2).sum().item(), 2 * (u**2).sum().item()])


def test_options_validation() -> None:
    for bad in (
        dict(orientation="svd"),
        dict(round_to=0),
        dict(damp=-1.0),
        dict(batch_size=0),
        dict(center_embeddings="yes"),
    ):
        with pytest.raises(ConfigError):
            SliceOptions(**bad)


# ---- the s = 0 invariant -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-llama-mha"])
def test_s0_reproduces_dense_logits_float32(name: str) -> None:
    model = build_tiny_model(name, seed=1).eval()
    x = random_ids(2, 40, seed=2)
    ref = logits(model, x)
    report = slice_model(model, random_ids(8, 32, seed=1), 0.0)
    assert report.d_sliced == report.d
    assert rel_err(logits(model, x), ref) <= 1e-4


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("tiny-llama", {}),
        ("tiny-llama-mha", {}),
        ("tiny-llama", {"attention_bias": True, "mlp_bias": True}),
    ],  # biases rotate with W
)
def test_s0_reproduces_dense_logits_float64(name: str, overrides: dict, exact_norms) -> None:
    model = build_tiny_model(name, seed=1, dtype=torch.float64, **overrides).eval()
    for name_, p in model.named_parameters():  # HF initialises biases to 0; make them matter
        if name_.endswith(".bias"):
            torch.nn.init.normal_(p, std=0.02)
    x = random_ids(2, 40, seed=2)
    ref = logits(model, x)
    slice_model(model, random_ids(8, 32, seed=1), 0.0)
    assert rel_err(logits(model, x), ref) <= 1e-9


def test_s0_with_sliced_head_and_random_orientation(exact_norms) -> None:
    model = build_tiny_model("tiny-llama", seed=1, dtype=torch.float64).eval()
    x = random_ids(2, 40, seed=2)
    ref = logits(model, x)
    options = SliceOptions(slice_head=True, orientation="random")
    slice_model(model, random_ids(8, 32, seed=1), 0.0, options)
    assert rel_err(logits(model, x), ref) <= 1e-9


def test_s0_with_centred_embeddings_is_the_centred_dense_model(exact_norms) -> None:
    """center_embeddings changes the function of an RMSNorm model (layer 0 reads x − x̄·1):
    s = 0 must reproduce the dense model with centred embeddings and an untied, uncentred head
    (positive control), and must differ from the original model (negative control)."""
    model = build_tiny_model("tiny-llama", seed=1, dtype=torch.float64).eval()
    x = random_ids(2, 40, seed=2)
    original = logits(model, x)
    centred = copy.deepcopy(model)
    untie_head(centred)
    center_embeddings(centred.model.embed_tokens)
    want = logits(centred, x)
    slice_model(model, random_ids(8, 32, seed=1), 0.0, SliceOptions(center_embeddings=True))
    got = logits(model, x)
    assert rel_err(got, want) <= 1e-9
    assert rel_err(got, original) > 1e-3


# ---- shapes, parameters, orientation -------------------------------------------------------------
def expected_params(model: nn.Module, width: int, head_width: int) -> int:
    """Parameters of tiny-llama sliced to ``width`` (untied head, weight-free norms)."""
    c = model.config
    hd = c.hidden_size // c.num_attention_heads
    q_out, kv_out = c.num_attention_heads * hd, c.num_key_value_heads * hd
    per_layer = width * (q_out + 2 * kv_out) + q_out * width + 2 * width * c.intermediate_size
    total = c.vocab_size * width + c.vocab_size * head_width
    for i in range(c.num_hidden_layers):
        d_out = head_width if i == c.num_hidden_layers - 1 else width
        total += per_layer + c.intermediate_size * d_out + width * width + width * d_out
    return total


@pytest.mark.parametrize("slice_head", [False, True])
def test_shapes_and_parameter_count(slice_head: bool) -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    d = model.config.hidden_size
    n_dense = sum(p.numel() for p in model.parameters())
    options = SliceOptions(slice_head=slice_head)
    report = slice_model(model, random_ids(8, 32, seed=1), 0.25, options)
    width, head_width = 48, 48 if slice_head else d
    assert report.d_sliced == width and width % 8 == 0 and report.s_eff == pytest.approx(0.25)
    adapter = adapter_for(model)  # the sliced model is still adapter-compatible
    assert adapter.embed_tokens.weight.shape[1] == width
    assert adapter.lm_head.in_features == head_width
    for i, layer in enumerate(adapter.layers):
        assert isinstance(layer, SlicedDecoderLayer)
        lin = adapter.linears(layer)
        d_out = head_width if i == adapter.n_layers - 1 else width
        assert all(lin[r].in_features == width for r in ("q", "k", "v", "gate", "up"))
        assert lin["o"].out_features == width and lin["down"].out_features == d_out
        assert layer.attn_shortcut.shape == (width, width)
        assert layer.mlp_shortcut.shape == (width, d_out)
    assert report.n_params_dense == n_dense
    assert report.n_params_sliced == expected_params(model, width, head_width)
    assert report.n_params_sliced < n_dense
    assert report.n_layer_params_sliced < report.n_layer_params_dense
    # One report row and spectrum per residual boundary: embeddings, then mid/out per layer.
    assert len(report.rows) == report.spectra.shape[0] == 1 + 2 * adapter.n_layers
    assert all(0.0 < r["energy_kept"] <= 1.0 for r in report.rows)
    spectra = report.spectra
    assert bool((spectra[:, :-1] >= spectra[:, 1:]).all())


def test_random_orientation_matches_pca(exact_norms) -> None:
    x = random_ids(2, 40, seed=2)
    out, embed = {}, {}
    for orientation in ("pca", "random"):
        model = build_tiny_model("tiny-llama", seed=1, dtype=torch.float64).eval()
        slice_model(model, random_ids(8, 32, seed=1), 0.25, SliceOptions(orientation=orientation))
        out[orientation], embed[orientation] = logits(model, x), model.model.embed_tokens.weight
    assert not torch.allclose(embed["random"], embed["pca"])  # a different basis ...
    assert rel_err(out["random"], out["pca"]) <= 1e-9  # ... of the same subspace


def test_perplexity_grows_with_sparsity(trained_state) -> None:
    calib, held_out = byte_ids(TEXT, 16, 64), byte_ids(TEXT, 8, 64, offset=37)
    nll = [mean_nll(trained_model(trained_state), held_out)]
    for s in (0.25, 0.5):
        model = trained_model(trained_state)
        slice_model(model, calib, s)
        nll.append(mean_nll(model, held_out))
    assert nll[0] < nll[2]
    assert all(b >= a - 1e-3 for a, b in itertools.pairwise(nll)), nll


def test_kv_cache_generation_matches_full_forward() -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    slice_model(model, random_ids(8, 32, seed=1), 0.25)
    x = random_ids(1, 24, seed=3)
    with torch.no_grad():
        full = model(input_ids=x).logits[:, -1]
        prefix = model(input_ids=x[:, :-1], use_cache=True)
        step = model(input_ids=x[:, -1:], cache=prefix.cache, use_cache=True)
    assert rel_err(step.logits[:, -1], full) <= 1e-5


# ---- save / reload -------------------------------------------------------------------------------
def test_save_and_reload_give_identical_logits(tmp_path) -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    slice_model(model, random_ids(8, 32, seed=1), 0.25)
    folder = save_sliced(model, tmp_path / "sliced")
    spec = json.loads((folder / "slicing.json").read_text())
    assert spec["widths"][0] == [48, 48, 48] and spec["widths"][-1] == [48, 48, 64]
    assert spec["options"]["round_to"] == 8
    reloaded = load_sliced(folder, "cpu", torch.float32, attn_implementation="eager")
    x = random_ids(2, 40, seed=2)
    # exact: the reloaded model is the same modules with the same float32 weights and the same
    # (eager) attention, so the same kernels run on the same data
    assert torch.equal(logits(reloaded, x), logits(model, x))
    n_params = [sum(p.numel() for p in m.parameters()) for m in (reloaded, model)]
    assert n_params[0] == n_params[1]


def test_save_rejects_dense_and_load_rejects_other_folders(tmp_path) -> None:
    with pytest.raises(ConfigError):
        save_sliced(build_tiny_model("tiny-llama"), tmp_path)
    with pytest.raises(ModelLoadError, match="missing"):
        load_sliced(tmp_path)


# ---- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [1.0, -0.1, 0.95])  # 0.95: int(0.05·64) = 3 rounds down to 0
def test_bad_sparsity_raises_before_touching_the_model(s: float) -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError):
        slice_model(model, random_ids(2, 16, seed=1), s)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_unsupported_models_give_clear_errors() -> None:
    ids = random_ids(2, 16, seed=1)
    with pytest.raises(ModelLoadError, match="supported families"):
        slice_model(nn.Linear(4, 4), ids, 0.25)
    layer_norm = build_tiny_model("tiny-llama")
    layer_norm.model.layers[0].input_layernorm = nn.LayerNorm(64)
    with pytest.raises(ModelLoadError, match="RMSNorm"):
        slice_model(layer_norm, ids, 0.25)
    extra = build_tiny_model("tiny-llama")
    extra.model.layers[1].post_feedforward_layernorm = nn.Identity()
    with pytest.raises(ModelLoadError, match="post_feedforward_layernorm"):
        slice_model(extra, ids, 0.25)


def test_slicing_twice_is_refused() -> None:
    model = build_tiny_model("tiny-llama", seed=1).eval()
    slice_model(model, random_ids(4, 16, seed=1), 0.25)
    with pytest.raises(ConfigError, match="already sliced"):
        slice_model(model, random_ids(4, 16, seed=1), 0.25)


# ---- registry ------------------------------------------------------------------------------------
def test_registered_as_structured_method() -> None:
    cls = get_method("slicegpt")
    assert cls is SliceGPT and cls.structured and cls.options_cls is SliceOptions
    method = cls(SliceOptions())
    # Method.apply runs its own whole-model procedure, not the layer-wise runner.
    assert not hasattr(method, "prune_layer") and cls.run_kind == "slice"
    model = build_tiny_model("tiny-llama-mha", seed=1).eval()
    report = method.slice(model, random_ids(4, 16, seed=1), 0.25)
    assert report.d_sliced == 24
    model = build_tiny_model("tiny-llama-mha", seed=1).eval()
    plan = ApplyPlan(0.25, (), "unstructured", torch.device("cpu"))
    assert method.apply(model, random_ids(4, 16, seed=1), plan).d_sliced == 24


# ---- real model ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_smollm2_s0_reproduces_dense_logits() -> None:
    from core.models.load import load_model

    try:
        loaded = load_model("smollm2-135m")
    except ModelLoadError as exc:
        pytest.skip(f"embedded model unavailable: {exc}")
    x = random_ids(1, 32, seed=2, vocab=loaded.adapter.vocab_size)
    ref = logits(loaded.model, x)
    slice_model(loaded, random_ids(4, 64, seed=1, vocab=loaded.adapter.vocab_size), 0.0)
    assert rel_err(logits(loaded.model, x), ref) <= 1e-4
