"""Which CPU-dependent step flips how many SparseGPT / Wanda mask entries (the step table of
docs/benchmarks.md, "SparseGPT across CPUs").

One-layer experiments on captured inputs, cheap enough to repeat under every MKL code path:

    python bench/sparsegpt_spread.py capture --dir /tmp/spread          # dense inputs, once
    MKL_CBWR=COMPATIBLE python bench/sparsegpt_spread.py masks --dir /tmp/spread --tag compat
    python bench/sparsegpt_spread.py masks --dir /tmp/spread --tag default
    python bench/sparsegpt_spread.py compare --dir /tmp/spread --ref default

``capture`` runs the dense model once over the protocol's calibration tensor (C4 train,
32 x 512, seed 0) and keeps, for decoder layer 0 and the last layer, the input of every
linear (q/k/v share one, gate/up one) and the layer's weights. ``masks`` prunes those
linears at 50% (unstructured and 2:4) from the saved inputs, once per variant of each step
that may depend on the CPU, each with the thread counts given (``--threads 2 1``; the reference has
2):

- ``gram32``: Gram from one float32 product per sequence, summed in float64, handed over
  in float32 (the runner's statistics), then ``sparsegpt_prune`` as the code stands;
- ``gram64``: the same products in float64, handed over in float64;
- ``ref32``: the reference sweep (IST-DASLab ``fasterprune``, as llm-compressor runs it):
  float32 Gram, float32 inverse and factor, float32 saliency and updates;
- ``wanda``: Wanda's masks from the column norms as the code computes them.

``compare`` counts the mask entries each (tag, threads) differs in from the reference tag
with 2 threads, per layer, variant and pattern. Every process reads the same saved inputs,
so a difference comes from that process's arithmetic alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from core.adapters import ROLES, SHARED_INPUT
from core.data import calibration_windows, load_corpus
from core.methods.masks import score_mask
from core.methods.sparsegpt import sparsegpt_prune
from core.methods.wanda import wanda_scores
from core.models.layer_inputs import capture_layer_inputs, walk_layers
from core.models.load import load_model
from core.models.offload import Offload
from core.settings.config import DataSpec

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PATTERNS = {"50%": None, "2:4": (2, 4)}
OWNERS = [r for r in ROLES if SHARED_INPUT.get(r, r) == r]  # roles whose input is captured


def capture(args: argparse.Namespace) -> None:
    lm = load_model(args.model)
    ad = lm.adapter
    corpus = load_corpus(DataSpec("c4", "train", args.data_dir))
    ids = calibration_windows(lm.tokenizer, corpus, args.nsamples, args.seqlen, 0)
    layers = sorted({0, ad.n_layers - 1})
    out: dict[str, torch.Tensor] = {"ids": ids}
    handles = []

    def visit(i: int, layer: torch.nn.Module) -> None:
        for h in handles:
            h.remove()
        handles.clear()
        if i not in layers:
            return
        for role, lin in ad.linears(layer, ROLES).items():
            out[f"{i}.{role}.W"] = lin.weight.detach().float().clone()
        for role in OWNERS:
            chunks: list[torch.Tensor] = []
            out[f"{i}.{role}.X"] = chunks  # type: ignore[assignment]
            mod = ad.input_module(layer, role)
            handles.append(
                mod.register_forward_pre_hook(lambda _m, a, c=chunks: c.append(a[0].float()))
            )

    inputs = capture_layer_inputs(ad, ids, "cpu", 4)
    walk_layers(ad, inputs, Offload(lm.model, torch.device("cpu")), visit, upto=layers[-1] + 1)
    for h in handles:
        h.remove()
    for k, v in list(out.items()):
        if isinstance(v, list):
            out[k] = torch.cat(v).reshape(-1, v[0].shape[-1]).contiguous()  # (tokens, in)
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    torch.save({"layers": layers, "seqlen": args.seqlen, **out}, Path(args.dir) / "capture.pt")
    print(f"captured layers {layers}: {ids.shape[0]} x {ids.shape[1]} tokens")


def gram(X: torch.Tensor, seqlen: int, dtype: torch.dtype) -> torch.Tensor:
    """Σ over sequences of xᵀx, each product in ``dtype``, summed in float64."""
    G = torch.zeros(X.shape[1], X.shape[1], dtype=torch.float64)
    for seq in X.split(seqlen):
        s = seq.to(dtype)
        G += s.T @ s
    return G


def ref32(W: torch.Tensor, H: torch.Tensor, nm, blocksize: int = 128, percdamp: float = 0.01):
    """IST-DASLab/sparsegpt ``fasterprune`` (llm-compressor's ``sparsify_weight``) in float32;
    returns the prune mask."""
    W, H = W.clone().float(), H.clone().float()
    cols = W.shape[1]
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H.diagonal().add_(percdamp * torch.mean(torch.diag(H)))
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1, Hinv1 = W[:, i1:i2].clone(), Hinv[i1:i2, i1:i2]
        Q1, Err1 = torch.zeros_like(W1), torch.zeros_like(W1)
        if nm is None:
            tmp = W1**2 / torch.diag(Hinv1).reshape(1, -1) ** 2
            mask1 = tmp <= torch.sort(tmp.flatten())[0][int(tmp.numel() * 0.5)]
        else:
            mask1 = torch.zeros_like(W1, dtype=torch.bool)
        for i in range(i2 - i1):
            w, d = W1[:, i], Hinv1[i, i]
            if nm is not None and i % nm[1] == 0:
                tmp = W1[:, i : i + nm[1]] ** 2 / torch.diag(Hinv1)[i : i + nm[1]] ** 2
                mask1.scatter_(1, i + torch.topk(tmp, nm[0], dim=1, largest=False)[1], True)
            q = w.clone()
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    return W == 0


def masks(args: argparse.Namespace) -> None:
    cap = torch.load(Path(args.dir) / "capture.pt")
    seqlen, res = cap["seqlen"], {}
    t0 = time.perf_counter()
    for threads in args.threads:
        torch.set_num_threads(threads)
        for i in cap["layers"]:
            for owner in OWNERS:
                X = cap[f"{i}.{owner}.X"]
                n = X.shape[0]
                g32, g64 = gram(X, seqlen, torch.float32), gram(X, seqlen, torch.float64)
                H = {"gram32": g32.float(), "gram64": g64}
                sq32 = torch.zeros(X.shape[1])
                for b in X.split(4 * seqlen):  # the runner's float32 norms, 4 sequences a call
                    sq32 += b.square().sum(0)
                sq = {"wanda": sq32, "wanda64": X.double().square().sum(0)}
                for role in [r for r in ROLES if SHARED_INPUT.get(r, r) == owner]:
                    W = cap[f"{i}.{role}.W"]
                    for pat, nm in PATTERNS.items():
                        key = f"{i}.{role}.{pat}"
                        for name, h in H.items():
                            _, m, _ = sparsegpt_prune(W, h, 0.5, nm, h_scale=2.0 / n)
                            res[f"{key}.{name}.t{threads}"] = m
                        res[f"{key}.ref32.t{threads}"] = ref32(W, g32.float() * (2.0 / n), nm)
                        for name, s in sq.items():
                            m = score_mask(wanda_scores(W, s), 0.5, "row", nm)
                            res[f"{key}.{name}.t{threads}"] = m
    torch.save(res, Path(args.dir) / f"masks_{args.tag}.pt")
    env = {k: v for k, v in os.environ.items() if k in ("MKL_CBWR", "ATEN_CPU_CAPABILITY")}
    print(f"{args.tag}: {len(res)} masks in {time.perf_counter() - t0:.1f}s, env {env}")


def compare(args: argparse.Namespace) -> None:
    d = Path(args.dir)
    ref = torch.load(d / f"masks_{args.ref}.pt")
    layers = sorted({k.split(".")[0] for k in ref}, key=int)
    variants = sorted({k.split(".")[3] for k in ref})
    changes = []  # (label, masks, threads) compared with the reference at 2 threads
    for path in sorted(d.glob("masks_*.pt")):
        tag = path.stem[len("masks_") :]
        other = ref if tag == args.ref else torch.load(path)
        for threads in (2, 1):
            probe = f"{next(iter(ref))[:-3]}.t{threads}"
            if not (tag == args.ref and threads == 2) and probe in other:
                changes.append((f"{tag} {threads}t", other, threads))
    print("| variant | pattern | layer | " + " | ".join(c[0] for c in changes) + " |")
    print("|---|---|---|" + "---|" * len(changes))
    for v in variants:
        for pat in PATTERNS:
            for lay in layers:
                keys = [k for k in ref if k.startswith(f"{lay}.") and k.endswith(f".{pat}.{v}.t2")]
                cells = [
                    str(sum(int((ref[k] != o[k[:-3] + f".t{t}"]).sum()) for k in keys))
                    for _, o, t in changes
                ]
                print(f"| {v} | {pat} | {lay} | " + " | ".join(cells) + " |")
    for lay in layers:
        n = sum(
            int(m.numel())
            for k, m in ref.items()
            if k.startswith(f"{lay}.") and k.endswith(".50%.gram32.t2")
        )
        print(f"(layer {lay}: {n} mask entries per variant and pattern)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("capture", "masks", "compare"))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--tag", default="default")
    ap.add_argument("--ref", default="default")
    ap.add_argument("--threads", type=int, nargs="+", default=[2], help="masks: thread counts")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data-dir", default=str(SHARED_DATA))
    ap.add_argument("--nsamples", type=int, default=32)
    ap.add_argument("--seqlen", type=int, default=512)
    args = ap.parse_args()
    {"capture": capture, "masks": masks, "compare": compare}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
