"""SliceGPT on every model family's tiny random model: s = 0 is the dense model, save -> reload
keeps the logits, Gemma-3's post-norms are carried by PostNormWriter, and a sliced file of
another family is refused."""

from __future__ import annotations

import json

import pytest
import torch
from family_helpers import SLICEABLE, ids, logits, randomized

from core.errors import ModelLoadError
from core.methods.slicegpt import load_sliced, save_sliced, slice_model
from core.methods.slicegpt.modules import PostNormWriter
from core.methods.slicegpt.rotation import rotate_outputs


# ---- SliceGPT ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SLICEABLE)
def test_slicegpt_at_s0_reproduces_the_dense_logits(name):
    model, _ = randomized(name)
    x = ids(2, seed=5)
    dense = logits(model, x)
    slice_model(model, ids(), 0.0)
    got = logits(model, x)
    assert dense.std() > 0.05  # the bound below is small against the logits' spread
    assert (got - dense).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", SLICEABLE)
def test_sliced_model_save_reload_keeps_the_logits(name, tmp_path):
    model, _ = randomized(name)
    report = slice_model(model, ids(), 0.25)
    assert report.d_sliced == 48
    x = ids(2, seed=5)
    before = logits(model, x)
    save_sliced(model, tmp_path)
    again = load_sliced(tmp_path, attn_implementation="eager")
    torch.testing.assert_close(logits(again, x), before, rtol=0, atol=1e-5)


def test_gemma3_slices_through_its_post_norms():
    """Gemma-3's post-attention / post-feedforward norms read o_proj / down_proj outputs in
    the original basis (d wide); a PostNormWriter (d′, d) carries them into the sliced stream.
    The residual is d′ wide, the q/k norms are left as they were, the extra matrices are
    counted, and the perplexity is finite."""
    model, ad = randomized("tiny-gemma3")
    d, n = ad.hidden_size, ad.n_layers
    qk = [[t.detach().clone() for t in ad.qk_gains(layer)[:2]] for layer in ad.layers]
    dense_params = ad.n_params()
    report = slice_model(model, ids(), 0.25)
    dp = report.d_sliced
    assert (d, dp) == (64, 48) and model.slicing.post_norms
    widths = []
    hooks = [
        layer.register_forward_hook(lambda _m, _a, out: widths.append(out.shape[-1]))
        for layer in ad.layers
    ]
    x = ids(2, seed=5)
    out = logits(model, x)
    for h in hooks:
        h.remove()
    assert widths == [dp] * (n - 1) + [d]  # the head is not sliced: the last layer writes d
    for i, layer in enumerate(ad.layers):
        assert ad.attn_writer(layer).out_features == d and ad.mlp_writer(layer).out_features == d
        assert layer.attn_post.proj.weight.shape == (dp, d)
        assert layer.mlp_post.proj.weight.shape == ((dp if i < n - 1 else d), d)
        assert not list(layer.attn_post.norm.parameters())  # (1 + w) moved into proj
        for before, after in zip(qk[i], ad.qk_gains(layer)[:2], strict=True):
            assert torch.equal(before, after)
    posts = sum(
        p.numel()
        for layer in ad.layers
        for m in (layer.attn_post, layer.mlp_post)
        for p in m.parameters()
    )
    assert posts == dp * d * (2 * n - 1) + d * d
    assert report.n_params_sliced == ad.n_params() and report.n_params_dense == dense_params
    nll = torch.nn.functional.cross_entropy(out[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    assert torch.isfinite(nll) and nll.item() < 2 * torch.log(torch.tensor(260.0)).item()


def test_post_norm_writer_is_the_rotated_normed_output():
    """On hand-sized tensors: after ``rotate_outputs`` the writer of a post-block norm with
    gain γ computes (γ ⊙ o / rms(o))·Q·D, the normed block output in the sliced basis, and
    the norm itself keeps no weight."""
    gamma = torch.tensor([1.5, 0.5, 2.0, 1.0])
    o = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0]])
    Q, _ = torch.linalg.qr(torch.tensor([[2.0, 1, 0, 1], [1, 3, 1, 0], [0, 1, 4, 1], [1, 0, 1, 5]]))
    writer = PostNormWriter(4, 1e-6, torch.diag(gamma))
    rotate_outputs(writer.proj, Q.double(), 3)
    want = (gamma * o / (o.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()) @ Q[:, :3]
    torch.testing.assert_close(writer(o), want, rtol=0, atol=1e-6)
    assert [n for n, _ in writer.named_parameters()] == ["proj.weight"]


def test_gemma3_q_k_norms_see_the_dense_inputs_at_s0():
    """q_norm / k_norm act on head dims after q_proj / k_proj: at s = 0 they receive exactly
    the dense model's inputs, whatever rotation the residual stream went through."""
    model, ad = randomized("tiny-gemma3")
    x = ids(2, seed=5)

    def qk_inputs() -> list[torch.Tensor]:
        seen: list[torch.Tensor] = []
        hooks = [
            norm.register_forward_pre_hook(lambda _m, a: seen.append(a[0].clone()))
            for layer in ad.layers
            for norm in ad.qk_norms(layer)
        ]
        logits(model, x)
        for h in hooks:
            h.remove()
        return seen

    dense = qk_inputs()
    slice_model(model, ids(), 0.0)
    sliced = qk_inputs()
    assert len(dense) == len(sliced) == 2 * ad.n_layers
    assert max((a - b).abs().max().item() for a, b in zip(dense, sliced, strict=True)) <= 1e-4


def test_a_sliced_file_of_another_family_is_refused(tmp_path):
    """slicing.json's post_norms must match the family: a Llama folder claiming post-norm
    writers is refused with the reason, not loaded with wrong shapes."""
    model, _ = randomized("tiny-llama")
    slice_model(model, ids(), 0.25)
    save_sliced(model, tmp_path)
    spec = json.loads((tmp_path / "slicing.json").read_text())
    (tmp_path / "slicing.json").write_text(json.dumps({**spec, "post_norms": True}))
    with pytest.raises(ModelLoadError, match="post_norms=True but llama models lack"):
        load_sliced(tmp_path)
