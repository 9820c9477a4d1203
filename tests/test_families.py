"""Every model family the adapters cover, on its tiny random model (core.models.load.TINY_MODELS):
geometry from the config alone (SliceGPT: tests/test_slicing_families.py), Wanda / SparseGPT masks
have the exact sparsity and N:M, the attention-GD objective is the model's own attention and
its gradient matches autograd (biases, q/k norms), save -> reload keeps the logits, and a
family a method cannot serve is refused at planning, before any weight is loaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from family_helpers import FAMILY_MODELS, L, ids, logits, randomized

from core.adapters import FAMILIES
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
from core.models.geometry import Geometry
from core.models.load import byte_tokenizer, load_model, tiny_config
from core.pruning.layerwise import run_method
from core.runs.plan import plan_prune
from core.settings.config import CalibConfig, EvalConfig, ModelSpec, PruneConfig
from core.store.run_store import RunStore


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
    want = {
        "q": (nq, d),
        "k": (nkv, d),
        "v": (nkv, d),
        "o": (d, nq),
        "gate": (geo.intermediate_size, d),
        "up": (geo.intermediate_size, d),
        "down": (d, geo.intermediate_size),
    }
    got = {r: tuple(lin.weight.shape) for r, lin in ad.linears(ad.layers[0]).items()}
    assert got == {r: want[r] for r in geo.traits.roles}
    assert all(geo.in_features(r) == shape[1] for r, shape in got.items())


def test_an_unknown_family_names_the_supported_ones():
    with pytest.raises(ModelLoadError, match=r"supported families: llama .*opt"):
        Geometry.from_config(SimpleNamespace(model_type="bert"))


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
    run_method(
        make_method(method, options),
        ad,
        ids(),
        roles,
        [dict.fromkeys(roles, 0.5)] * ad.n_layers,
        pattern,
        "cpu",
    )
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
    run_method(
        make_method("wanda", {}),
        ad,
        ids(),
        roles,
        [dict.fromkeys(roles, 0.5)] * ad.n_layers,
        "2:4",
        "cpu",
    )
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


# ---- refusals at planning ------------------------------------------------------------------------
def plan(name: str, method: str, targets: str = "all", seqlen: int = 16, **options):
    return plan_prune(
        ModelSpec(name),
        PruneConfig(method, 0.5, targets=targets, options=tuple(options.items())),
        CalibConfig(nsamples=2, seqlen=seqlen),
        EvalConfig(seqlen=16, max_windows=2),
    ).cfg


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
    assert (
        make_method("attention-gd", {}).refusal(
            Geometry.from_config(tiny_config("tiny-qwen3")), 4096
        )
        is None
    )


@pytest.mark.parametrize(
    ("method", "extra"),
    [("attention-gd", ["--targets", "qk", "--calib-seqlen", "32"])],
)
def test_a_refused_run_stores_nothing(method, extra, tmp_path, capsys):
    """Issue #13: a model whose attention the objective does not cover (here: 32-token
    calibration against 16-token sliding windows) gives one clear error and no run record."""
    rc = main(
        [
            "prune",
            "--model",
            "tiny-gemma3",
            "--method",
            method,
            "--sparsity",
            "0.25",
            "--store",
            str(tmp_path),
            "--quiet",
            *extra,
        ]
    )
    assert rc == 2
    assert f"error: {method} cannot prune this gemma3 model" in capsys.readouterr().err
    assert RunStore(tmp_path).list() == []
    # the index and its lock file are the store's own, not a run record
    store_files = ("index.", ".index.lock")
    assert not [
        p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith(store_files)
    ]


def test_methods_listing_covers_every_family():
    rows = {row["family"]: row for row in family_support()}
    assert list(rows) == [cls.family for cls in FAMILIES]
    refused = {
        (family, method): m["refusal"]
        for family, row in rows.items()
        for method, m in row["methods"].items()
        if not m["supported"]
    }
    # the only refusals: heads cannot leave Phi-3's fused qkv_proj one layer at a time
    assert set(refused) == {("phi3", "flap"), ("phi3", "wanda-sp")}
    assert all("qkv_proj" in why for why in refused.values()), refused
    assert "sliding-window" in rows["gemma3"]["methods"]["attention-gd"]["condition"]
