"""Every model family the adapters cover, on its tiny random model (core.models.load.TINY_MODELS):
geometry from the config alone, SliceGPT at s = 0 is the dense model, Wanda / SparseGPT masks
have the exact sparsity and N:M, the attention-GD objective is the model's own attention and
its gradient matches autograd (biases, q/k norms), save -> reload keeps the logits, and a
family a method cannot serve is refused at planning, before any weight is loaded."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from core.adapters import FAMILIES, adapter_for
from core.cli.main import main
from core.errors import ConfigError, ModelLoadError
from core.evaluation.attention_error import AttentionProbe, form
from core.evaluation.attention_ops import attention_probs
from core.families import family_support
from core.methods import make_method
from core.methods.attention_gd import (
    GroupProblem,
    head_extras,
    to_heads,
)
from core.methods.slicegpt import load_sliced, save_sliced, slice_model
from core.methods.slicegpt.modules import PostNormWriter
from core.methods.slicegpt.rotation import rotate_outputs
from core.models.geometry import Geometry
from core.models.load import build_tiny_model, byte_tokenizer, load_model, tiny_config
from core.pruning.layerwise import run_method
from core.runs.plan import plan_prune
from core.settings.config import CalibConfig, EvalConfig, ModelSpec, PruneConfig
from core.store.run_store import RunStore

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


# ---- geometry and roles ------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_config_geometry_is_the_loaded_models(name):
    _, ad = randomized(name)
    geo = Geometry.from_config(tiny_config(name))
    assert geo.traits == ad.traits(ad.config) and geo.family == ad.family
    assert (geo.n_layers, geo.hidden_size, geo.head_dim) == (
        ad.n_layers,
        ad.hidden_size,
        ad.head_dim,
    )
    d, nq, nkv = geo.hidden_size, geo.n_heads * geo.head_dim, geo.n_kv_heads * geo.head_dim
    want = {"q": (nq, d), "k": (nkv, d), "v": (nkv, d), "o": (d, nq),
            "gate": (geo.intermediate_size, d), "up": (geo.intermediate_size, d),
            "down": (d, geo.intermediate_size)}  # fmt: skip
    got = {r: tuple(lin.weight.shape) for r, lin in ad.linears(ad.layers[0]).items()}
    assert got == {r: want[r] for r in geo.traits.roles}
    assert all(geo.in_features(r) == shape[1] for r, shape in got.items())


def test_an_unknown_family_names_the_supported_ones():
    with pytest.raises(ModelLoadError, match=r"supported families: llama .*opt"):
        Geometry.from_config(SimpleNamespace(model_type="bert"))


# ---- SliceGPT --------------------------------------------------------------------------------------
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
    hooks = [layer.register_forward_hook(lambda _m, _a, out: widths.append(out.shape[-1]))
             for layer in ad.layers]  # fmt: skip
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
    posts = sum(p.numel() for layer in ad.layers for m in (layer.attn_post, layer.mlp_post)
                for p in m.parameters())  # fmt: skip
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
        hooks = [norm.register_forward_pre_hook(lambda _m, a: seen.append(a[0].clone()))
                 for layer in ad.layers for norm in ad.qk_norms(layer)]  # fmt: skip
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


# ---- Wanda / SparseGPT masks ---------------------------------------------------------------------
MASK_CASES = [
    ("wanda", {}, "unstructured"),
    ("wanda", {}, "2:4"),
    ("sparsegpt", {"selection": "exact"}, "unstructured"),
    ("sparsegpt", {}, "2:4"),
]


@pytest.mark.parametrize("name", FAMILY_MODELS)
@pytest.mark.parametrize(("method", "options", "pattern"), MASK_CASES)
def test_masks_have_the_exact_sparsity(name, method, options, pattern):
    model, ad = randomized(name)
    roles = ad.layout.roles
    run_method(make_method(method, options), ad, ids(), roles,
               [dict.fromkeys(roles, 0.5)] * ad.n_layers, pattern, "cpu")  # fmt: skip
    for layer in ad.layers:
        for role, lin in ad.linears(layer).items():
            zero = lin.weight == 0  # (out, in); for Phi-3 a view of the fused weight's rows
            out, inp = zero.shape
            if pattern == "2:4":
                per_group = zero.view(out, inp // 4, 4).sum(-1)
                # SparseGPT also zeroes inputs never active (OPT's ReLU leaves dead fc2 inputs)
                assert (per_group == 2).all() if method == "wanda" else (per_group >= 2).all()
            elif method == "wanda":  # per output row
                assert (zero.sum(1) == inp // 2).all(), role
            else:  # SparseGPT "exact": per matrix
                assert int(zero.sum()) == out * inp // 2, role
    assert torch.isfinite(logits(model, ids(1, seed=3))).all()


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_pruned_model_save_reload_through_the_loader(name, tmp_path):
    model, ad = randomized(name)
    roles = ad.layout.roles
    run_method(make_method("wanda", {}), ad, ids(), roles,
               [dict.fromkeys(roles, 0.5)] * ad.n_layers, "2:4", "cpu")  # fmt: skip
    x = ids(2, seed=5)
    before = logits(model, x)
    model.save_pretrained(tmp_path, safe_serialization=True)
    byte_tokenizer().save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.adapter.family == ad.family
    torch.testing.assert_close(logits(lm.model, x), before, rtol=0, atol=1e-5)


# ---- attention-GD objective ----------------------------------------------------------------------
def attention_setup(name: str, layer_index: int = 1, g: int = 0):
    """Layer ``layer_index`` of the float64 model (Gemma-3: a global layer) on 10 tokens (inside
    every window): X, the group's weights, RoPE, extras and the model's own attention."""
    model, ad = randomized(name, dtype=torch.float64)
    layer = ad.layers[layer_index]
    grabbed = []
    hook = ad.input_module(layer, "q").register_forward_pre_hook(
        lambda _m, a: grabbed.append(a[0].detach())
    )
    with torch.no_grad():
        out = model(input_ids=ids(2, 10, seed=1), output_attentions=True)
    hook.remove()
    X = torch.cat(grabbed)  # (2, 10, d)
    rope = ad.position_embeddings(X[:1], torch.arange(10)[None], layer_index)
    rope = None if rope is None else (rope[0][0], rope[1][0])
    r, hd = ad.n_heads // ad.n_kv_heads, ad.head_dim
    lin = ad.linears(layer, ("q", "k"))
    extras = head_extras(SimpleNamespace(linears=lin, adapter=ad, layer=layer), r, hd, g)
    Wq = to_heads(lin["q"].weight.detach()[g * r * hd : (g + 1) * r * hd], hd)
    Wk = lin["k"].weight.detach()[g * hd : (g + 1) * hd].T
    return X, Wq, Wk, rope, extras, out.attentions[layer_index][:, g * r : (g + 1) * r]


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_attention_objective_is_the_models_attention(name):
    X, Wq, Wk, rope, extras, attn = attention_setup(name)
    problem = GroupProblem(X, Wq, Wk, True, rope, torch.float64, extras)
    torch.testing.assert_close(problem.chunks[0].Y, attn, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_attention_gd_gradient_matches_autograd(name):
    X, Wq, Wk, rope, extras, _ = attention_setup(name)
    gen = torch.Generator().manual_seed(2)
    Mq = torch.rand(Wq.shape, generator=gen, dtype=torch.float64)
    Mk = torch.rand(Wk.shape, generator=gen, dtype=torch.float64)
    problem = GroupProblem(X, Wq, Wk, True, rope, extras=extras)
    ours = problem.loss_and_grad(Mq, Mk, 0.1)
    ref = problem.reference_loss_and_grad(Mq, Mk, 0.1)
    assert ours.loss.item() == pytest.approx(ref.loss.item(), rel=1e-10)
    for a, b in ((ours.grad_q, ref.grad_q), (ours.grad_k, ref.grad_k)):
        assert ((a - b).norm() / b.norm()).item() <= 1e-8


def test_an_unknown_qk_norm_is_refused():
    """A q/k norm the family's adapter does not recognise (no weight) is refused, not ignored."""
    _, ad = randomized("tiny-qwen3")
    layer = ad.layers[0]
    layer.self_attn.q_norm = torch.nn.LayerNorm(16, elementwise_affine=False)
    ctx = SimpleNamespace(linears=ad.linears(layer, ("q", "k")), adapter=ad, layer=layer)
    with pytest.raises(ConfigError, match="does not cover"):
        head_extras(ctx, 2, 16, 0)


@pytest.mark.parametrize("name", FAMILY_MODELS)
def test_attention_probes_reproduce_the_models_attention(name):
    """The attention comparisons (run metrics, the Attention page) compute every layer's
    attention as the model does: biases, q/k norms, scale, per-kind RoPE and, on 32 tokens,
    the 16-token sliding windows. Negative control: without the layer's form they differ
    wherever the family adds something to q·kᵀ/√d_h."""
    _, ad = randomized(name, dtype=torch.float64)
    x = ids(2, L, seed=1)
    with torch.no_grad():
        attentions = ad.model(input_ids=x, output_attentions=True).attentions
    probe = AttentionProbe.capture(ad, x, "probe", "cpu")
    geo = (ad.n_heads, ad.n_kv_heads, ad.head_dim)
    plain = True
    for i, want in enumerate(attentions):
        args = (probe.X[i], *probe.dense[i], *geo, True, probe.ropes[i])
        got = attention_probs(*args, form(ad, i))
        torch.testing.assert_close(got, want.float(), rtol=0, atol=1e-5)
        plain &= bool(torch.allclose(attention_probs(*args), want.float(), atol=1e-5))
    assert plain is (name in ("tiny-llama", "tiny-phi3"))  # nothing beyond q·kᵀ/√d_h


# ---- refusals at planning --------------------------------------------------------------------------
def plan(name: str, method: str, targets: str = "all", seqlen: int = 16, **options):
    return plan_prune(
        ModelSpec(name),
        PruneConfig(method, 0.5, targets=targets, options=tuple(options.items())),
        CalibConfig(nsamples=2, seqlen=seqlen),
        EvalConfig(seqlen=16, max_windows=2),
    )


def test_planning_refuses_what_a_family_cannot_run():
    assert plan("tiny-gemma3", "slicegpt").prune.method == "slicegpt"  # post-norm writers
    with pytest.raises(ConfigError, match="sliding-window layers attend to the last 16 tokens"):
        plan("tiny-gemma3", "attention-gd", "qk", seqlen=32)
    plan("tiny-gemma3", "attention-gd", "qk", seqlen=16)  # inside the window: covered
    plan("tiny-gemma3", "attention-gd", "qk", seqlen=32, max_len=16)
    with pytest.raises(ConfigError, match="opt models have no gate projection"):
        plan("tiny-opt", "wanda", "gate,up")
    assert plan("tiny-opt", "wanda", "mlp").prune.targets == "mlp"


def test_slicegpt_still_refuses_what_it_cannot_rotate():
    """Post-LN (OPT-350m: the norm sits on the stream after the add) and projected
    embeddings stay refused; pre-norm families with or without post-block norms slice."""
    slicegpt = make_method("slicegpt", {})
    post_ln = Geometry.from_config(tiny_config("tiny-opt", do_layer_norm_before=False))
    assert "post-LN" in slicegpt.refusal(post_ln)
    proj = Geometry.from_config(tiny_config("tiny-opt", word_embed_proj_dim=32))
    assert "projected" in slicegpt.refusal(proj)
    for name in ("tiny-gemma3", "tiny-opt", "tiny-llama"):
        assert slicegpt.refusal(Geometry.from_config(tiny_config(name))) is None


def test_attention_gd_refuses_a_scale_it_does_not_model():
    geo = Geometry.from_config(tiny_config("tiny-gemma3", query_pre_attn_scalar=256))
    why = make_method("attention-gd", {}).refusal(geo, 16)
    assert why is not None and "query_pre_attn_scalar" in why
    assert make_method("attention-gd", {}).refusal(Geometry.from_config(
        tiny_config("tiny-qwen3")), 4096) is None  # fmt: skip


@pytest.mark.parametrize(
    ("method", "extra"),
    [("attention-gd", ["--targets", "qk", "--calib-seqlen", "32"])],
)
def test_a_refused_run_stores_nothing(method, extra, tmp_path, capsys):
    """Issue #13: a model whose attention the objective does not cover (here: 32-token
    calibration against 16-token sliding windows) gives one clear error and no run record."""
    rc = main(["prune", "--model", "tiny-gemma3", "--method", method, "--sparsity", "0.25",
               "--store", str(tmp_path), "--quiet", *extra])  # fmt: skip
    assert rc == 2
    assert f"error: {method} cannot prune this gemma3 model" in capsys.readouterr().err
    assert RunStore(tmp_path).list() == []
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("index.")]


def test_methods_listing_covers_every_family():
    rows = {row["family"]: row for row in family_support()}
    assert list(rows) == [cls.family for cls in FAMILIES]
    for family, row in rows.items():
        for method, m in row["methods"].items():
            assert m["supported"] and not m["refusal"], (family, method)  # none refused
    assert "sliding-window" in rows["gemma3"]["methods"]["attention-gd"]["condition"]
