"""Home: what the tool does, the device found, the models offered, and the maths it checks."""

from __future__ import annotations

import streamlit as st

from core import figures
from core.adapters import supported_families
from core.analysis.tables import runs_frame
from core.models.catalog import EMBEDDED_MODEL, GGUF_MODELS, available_models
from pages.common import device_info, get_store, list_runs, require_frame
from pages.links import linked
from pages.starters import MODEL_KEY, demo_button

require_frame(__file__)
st.title("PruneScope")
st.markdown(
    "PruneScope prunes small language models with magnitude, Wanda, SparseGPT, SliceGPT and "
    "attention-matrix gradient descent, and measures what each one costs in perplexity. "
    "Every run is kept in a local results store, so you can compare methods layer by layer, "
    "look at the masks and attention maps they produce, and export the numbers. "
    "Two papers' claims are checked by eye: that perplexity follows the representation "
    "dimension d′ (Paper A), and that gradient descent on the attention-mask loss converges "
    "as its assumptions predict (Paper B)."
)

with st.container(border=True):
    st.subheader("Populate every page")
    st.markdown(
        "One click starts the smallest runs that fill every page, one after another: a dense "
        "baseline, Wanda and SparseGPT at 50% and 2:4, a SliceGPT sweep, attention-GD at 50% "
        "with its baselines, and zero-shot accuracy on two tasks. Pages fill as pieces land; "
        "the sidebar shows the progress from every page."
    )
    models = available_models()
    chosen = st.session_state.get(MODEL_KEY, EMBEDDED_MODEL)
    # kept under a plain key too: a widget's key is dropped on pages that do not draw it
    st.session_state[MODEL_KEY] = linked(
        st.selectbox,
        "Model",
        models,
        index=models.index(chosen) if chosen in models else 0,
        key="demo_pick",
    )
    demo_button(get_store())
    done = list_runs(get_store(), kind="prune", status="done")
    if done:  # what the store holds so far, at a glance (the Runs page compares in detail)
        st.plotly_chart(
            figures.ppl_vs_sparsity(figures.compare_frame(runs_frame(done)), "Stored pruning runs"),
            key="home_runs",
        )

dev = device_info()
col_dev, col_models, col_store = st.columns(3)
with col_dev:
    st.subheader("Device")
    if dev.get("type") == "cuda":
        st.success(f"GPU: **{dev.get('name')}** · {dev.get('memory_gb')} GB")
    elif dev.get("type") == "mps":
        st.success("Apple GPU (MPS)")
    else:
        st.warning(
            f"No GPU found: running on the CPU ({dev.get('threads', '?')} threads). "
            "Runs will be slower; the Prune page's 'quick' preset (its choice on a CPU) still "
            "finishes in a few minutes on the embedded model."
        )
with col_models:
    st.subheader("Models")
    for name in available_models():
        if name in GGUF_MODELS:
            default = ", embedded default" if name == EMBEDDED_MODEL else ""
            note = f" — {GGUF_MODELS[name].title}{default}"
        else:
            note = " — tiny random"
        st.markdown(f"- `{name}`{note}")
    st.caption(
        "Any local folder or Hugging Face id of a supported family also works: "
        f"{supported_families()}."
    )
with col_store:
    st.subheader("Runs stored")
    runs = list_runs(get_store())
    st.metric("runs", len(runs), help="finished, failed and running runs in the store")
    st.page_link("pages/prune.py", label="Start a pruning run", icon=":material/content_cut:")
    st.page_link("pages/runs.py", label="Browse stored runs", icon=":material/table_view:")

st.divider()
st.subheader("The forward pass in terms of the width d")
left, right = st.columns(2)
with left:
    st.markdown("Residual stream of L tokens, width d, decoder layer ℓ = 1…N:")
    st.latex(r"h_0 = E[x] \in \mathbb{R}^{L\times d}")
    st.latex(
        r"\operatorname{RMSNorm}(h) = \gamma \odot \frac{h}{\sqrt{\lVert h\rVert_2^2/d + \epsilon}}"
    )
    st.latex(r"X = \operatorname{RMSNorm}(h), \quad Q_j = R(X W_{Q,j}), \quad K_g = R(X W_{K,g})")
    st.latex(
        r"A_j = \operatorname{softmax}\!\Big(\frac{Q_j K_{g(j)}^{\top}}{\sqrt{d_h}} + M_c\Big)"
        r"\in \mathbb{R}^{L\times L}"
    )
    st.latex(
        r"h \leftarrow h + \big[A_1 X W_{V,g(1)} \,\|\, \cdots \,\|\, A_H X W_{V,g(H)}\big] W_O"
    )
    st.latex(r"\hat X = \operatorname{RMSNorm}(h)")
    st.latex(
        r"h \leftarrow h + \big(\operatorname{SiLU}(\hat X W_{\mathrm{gate}}) \odot "
        r"\hat X W_{\mathrm{up}}\big) W_{\mathrm{down}}"
    )
    st.latex(r"\text{logits} = \operatorname{RMSNorm}(h_N)\, W_{\mathrm{head}}")
    st.caption(
        "W_Q, W_K, W_V, W_gate, W_up read d inputs; W_O and W_down write d outputs. "
        "Unstructured pruning zeroes entries and keeps d; SliceGPT rotates the stream and "
        "keeps d′ = (1 − s)·d columns."
    )
    st.page_link(
        "pages/compare.py",
        label="See what pruning changes in this forward pass, layer by layer, on your own text",
        icon=":material/compare:",
    )
with right:
    st.markdown("**Paper A** — perplexity set by the representation dimension:")
    st.latex(r"\frac{\ln \mathrm{PPL}_0}{\ln \mathrm{PPL}} = 1 - s, \qquad s = 1 - \frac{d'}{d}")
    st.caption("Checked on the Representation dimension page (fit: ratio = a(1 − s) + b).")
    st.markdown("**Paper B** — a mask M on W = W_Q W_Kᵀ/√d_h fitted by gradient descent:")
    st.latex(
        r"f(M) = \operatorname{softmax}\big(X (M \circ W) X^{\top}\big), \qquad Y = f(\mathbf 1)"
    )
    st.latex(r"L(M) = \tfrac12 \lVert f(M) - Y \rVert_F^2 + \tfrac12 \lambda \lVert M \rVert_F^2")
    st.latex(r"M_{t+1} = M_t - \eta \nabla L(M_t)")
    st.latex(r"\nabla L(M) = W \circ (X^{\top} P X) + \lambda M")
    st.caption(
        "Row j of P is s_j∘c_j − s_j⟨s_j, c_j⟩ with s_j = row j of f(M) and c_j = s_j − y_j."
    )
    st.caption(
        "Linear convergence needs a Lipschitz gradient (η ≤ 1/L) and a PL inequality "
        "½‖∇L‖² ≥ μ(L − L*): the Assumption checks page plots both along the GD path."
    )
