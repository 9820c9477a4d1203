"""PruneScope against llm-compressor 0.14 on the same calibration tensor.

    python bench/vs_llmcompressor.py [--model smollm2-135m] [--rounds 2]
        [--only wanda-50% sparsegpt-2:4 ...] [--venv /tmp/llmc-venv]

For Wanda and SparseGPT at 50% unstructured and 2:4, each side prunes in a process of its
own, back to back: llm-compressor (``oneshot``, SparseGPTModifier / WandaPruningModifier on
every decoder linear, sequential pipeline; ``bench/llmc_worker.py`` in a virtual environment
the bench creates with ``torch==2.13.0`` and ``llmcompressor==0.14.0.1``, never a project
requirement) and PruneScope (``core.pruning.apply.apply_prune``). Both start from the same
safetensors copy of the model and read the same calibration tensor from one file (C4 train,
32 x 512, seed 0: the protocol's draw); both pruned models are scored by PruneScope's
evaluator on the first 64 x 512 WikiText-2 test windows. Printed per configuration and round:
perplexity with its 95% window-bootstrap interval, pruning seconds (llm-compressor: the
whole ``oneshot`` call; PruneScope: ``apply_prune``), peak RSS of the whole process up to
the end of pruning, the ratios PruneScope / llm-compressor, and the share of PruneScope's mask
entries that are those of its round-1 float32 run. A warning is printed when
more than a quarter of a core was busy over the 5 s before a measurement: shared machines
give no speed figures worth quoting.

``--nudge-seeds 0 1 2 3`` measures both tools' numerical spread the same way: round r prunes a
copy of the model whose token embeddings have a random half of their entries moved one
float32 ulp (seed r; 0 is the model as is; ``ulp_nudge``), so every
layer-0 input moves by the size of the difference two CPUs' kernels make, identically for
both sides. After the table, each side's perplexity spread (and time spread) over the
rounds is printed: "parity" is overlapping intervals measured this way, not one draw each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from protocol import SHARED_DATA, protocol_windows
from safetensors.torch import load_file, save_file

from core.analysis.uncertainty import ppl_intervals
from core.evaluation.perplexity import evaluate_perplexity
from core.models.gguf import gguf_folder
from core.models.load import load_model
from core.names import CALIB_DTYPES, F32
from core.settings.config import PruneConfig

HERE = Path(__file__).resolve().parent
LLMC_PINS = ("torch==2.13.0", "llmcompressor==0.14.0.1")
CONFIGS = {  # name -> (method, PruneScope pattern, llm-compressor mask_structure)
    "wanda-50%": ("wanda", "unstructured", "0:0"),
    "sparsegpt-50%": ("sparsegpt", "unstructured", "0:0"),
    "wanda-2:4": ("wanda", "2:4", "2:4"),
    "sparsegpt-2:4": ("sparsegpt", "2:4", "2:4"),
}
QUIET_BUSY = 0.25  # cores busy (sampled over QUIET_WINDOW_S) above which timings are flagged
QUIET_WINDOW_S = 5.0


def ensure_llmc(venv: Path) -> Path:
    """The venv's python with llm-compressor importable, creating the venv when needed."""
    py = venv / "bin" / "python"
    ok = py.is_file() and subprocess.run([py, "-c", "import llmcompressor"]).returncode == 0
    if not ok:
        print(f"installing {' '.join(LLMC_PINS)} into {venv} (one-off)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", *LLMC_PINS], check=True)
    return py


def busy_cores(seconds: float = QUIET_WINDOW_S) -> float:
    """Cores' worth of CPU time spent by anything over the next ``seconds`` (/proc/stat).

    Not the load average: that decays over a minute, so the worker that just ended would
    make every measurement after the first look loaded."""

    def ticks() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = ticks()
    time.sleep(seconds)
    busy1, total1 = ticks()
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(total1 - total0, 1)


def quiet_check(what: str) -> bool:
    """Whether the machine is idle before a measurement (warns when it is not)."""
    if not Path("/proc/stat").is_file():
        return True  # cannot tell (not Linux)
    busy = busy_cores()
    if busy > QUIET_BUSY:
        print(
            f"WARNING: {busy:.2f} cores busy over {QUIET_WINDOW_S:.0f} s before {what}: "
            "the machine is not quiet, timings are not comparable",
            file=sys.stderr,
        )
        return False
    return True


def ulp_nudge(hidden: list[torch.Tensor], seed: int) -> None:
    """Move a random half of the entries one ulp up or down (in place)."""
    gen = torch.Generator().manual_seed(seed)
    for h in hidden:
        pick = torch.rand(h.shape, generator=gen) < 0.5
        up = torch.rand(h.shape, generator=gen) < 0.5
        toward = torch.where(up, torch.inf, -torch.inf).to(h.dtype)
        h.copy_(torch.where(pick, torch.nextafter(h, toward), h))


def nudged_copy(model_dir: Path, work: Path, seed: int) -> Path:
    """A copy of a safetensors model folder with its token embeddings ulp-nudged (seed); the
    other files are linked. Seed 0 is the folder itself."""
    if seed == 0:
        return model_dir
    out = work / f"model-nudge{seed}"
    out.mkdir(exist_ok=True)
    for f in model_dir.iterdir():
        if f.suffix != ".safetensors" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    nudged = 0
    for f in model_dir.glob("*.safetensors"):
        tensors = load_file(f)
        for name, t in tensors.items():
            if name.endswith("embed_tokens.weight"):
                ulp_nudge([t], seed)
                nudged += 1
        save_file(tensors, out / f.name, metadata={"format": "pt"})
    if not nudged:
        raise SystemExit(f"no embed_tokens.weight in {model_dir}: cannot nudge this model")
    return out


def spread(values: list[float]) -> str:
    """mean, sd and range of a few figures, the last two in % of the mean."""
    mean = float(np.mean(values))
    sd = float(np.std(values, ddof=1))
    return (
        f"mean {mean:.4f}, sd {sd / mean:.2%}, range {(max(values) - min(values)) / mean:.2%} "
        f"({min(values):.4f}-{max(values):.4f})"
    )


def ps_worker(args: argparse.Namespace) -> None:
    """PruneScope's side: load, prune on the saved tensor (timed), peak RSS, score."""
    lm = load_model(args.model)
    calib = torch.load(args.calib)
    method, pattern, _ = CONFIGS[args.config]
    prune = PruneConfig(method=method, sparsity=0.5, pattern=pattern, calib_dtype=args.calib_dtype)
    from core.pruning.apply import apply_prune

    t0 = time.perf_counter()
    apply_prune(lm, prune, calib, torch.device(args.device))
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.masks:
        torch.save(pruned_masks(lm), args.masks)
    out = {"seconds": seconds, "peak_rss_mib": peak, **score(lm.model, args)}
    Path(args.json).write_text(json.dumps(out))


def pruned_masks(lm) -> dict[str, torch.Tensor]:
    """Every decoder linear's zero pattern (out·in,) as packed bits, by parameter name."""
    return {
        name: torch.from_numpy(np.packbits((p == 0).flatten().numpy()))
        for name, p in lm.model.named_parameters()
        if p.ndim == 2 and ".layers." in name
    }


def mask_agreement(ref: Path, other: Path) -> str:
    """The share of mask entries two PruneScope runs agree on, as text ('-' without both)."""
    if not (ref.is_file() and other.is_file()):
        return "-"
    a, b = torch.load(ref), torch.load(other)
    differ = sum(int(np.unpackbits(np.bitwise_xor(a[k].numpy(), b[k].numpy())).sum()) for k in a)
    total = sum(a[k].numel() * 8 for k in a)
    return f"{1 - differ / total:.4%} ({differ} differ)"


def eval_worker(args: argparse.Namespace) -> None:
    """Score a model folder (llm-compressor's output) with PruneScope's evaluator."""
    lm = load_model(args.model_dir)
    Path(args.json).write_text(json.dumps(score(lm.model, args)))


def score(model: torch.nn.Module, args: argparse.Namespace) -> dict[str, float]:
    windows = torch.load(args.windows)
    res = evaluate_perplexity(model, windows, device=args.device)
    iv = ppl_intervals([np.asarray(res.window_nll)[None, :]])[0]
    return {"ppl": res.ppl, "ppl_lo": iv.lo, "ppl_hi": iv.hi}


def run(cmd: list[str]) -> None:
    """A worker process; its own output (llm-compressor logs to stdout) goes to stderr, so
    stdout carries the table alone."""
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def llmc_command(py, model_dir, calib: Path, name: str, out_dir: Path, out_json: Path) -> list:
    """llm-compressor's side of configuration ``name``: bench/llmc_worker.py under ``py``."""
    method, _, structure = CONFIGS[name]
    return [
        str(py), str(HERE / "llmc_worker.py"), "--model-dir", str(model_dir),
        "--calib", str(calib), "--method", method, "--pattern", structure,
        "--save", str(out_dir), "--json", str(out_json),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data-dir", default=str(SHARED_DATA))
    ap.add_argument("--nsamples", type=int, default=32)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--max-windows", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--nudge-seeds",
        nargs="*",
        type=int,
        help="one round per seed on a model with ulp-nudged embeddings (0: as is); "
        "replaces --rounds",
    )
    ap.add_argument("--only", nargs="*", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument(
        "--calib-dtypes",
        nargs="*",
        choices=CALIB_DTYPES,
        default=list(CALIB_DTYPES),
        help="PruneScope's calibration forward precisions, one row each (default: both)",
    )
    ap.add_argument("--venv", default=str(Path(tempfile.gettempdir()) / "llmc-venv"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--work", default=None, help="folder for tensors and models (temp)")
    ap.add_argument("--worker", choices=("ps", "eval"), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--calib", help=argparse.SUPPRESS)
    ap.add_argument("--calib-dtype", default=F32, help=argparse.SUPPRESS)
    ap.add_argument("--masks", help=argparse.SUPPRESS)
    ap.add_argument("--windows", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        {"ps": ps_worker, "eval": eval_worker}[args.worker](args)
        return

    py = ensure_llmc(Path(args.venv))
    work = Path(args.work or tempfile.mkdtemp(prefix="vs-llmc-"))
    work.mkdir(parents=True, exist_ok=True)
    lm = load_model(args.model)
    calib, windows = protocol_windows(
        lm.tokenizer, args.data_dir, args.nsamples, args.seqlen, args.max_windows
    )
    del lm
    torch.save(calib, work / "calib.pt")
    torch.save(windows, work / "windows.pt")
    base_dir = gguf_folder(args.model) if not Path(args.model).is_dir() else Path(args.model)
    seeds = args.nudge_seeds if args.nudge_seeds else [0] * args.rounds
    rows, quiet = [], True
    for rnd, seed in enumerate(seeds):
        model_dir = str(nudged_copy(base_dir, work, seed))
        ps_model = args.model if seed == 0 else model_dir
        common = ["--model", ps_model, "--device", args.device]
        common += ["--windows", str(work / "windows.pt")]
        for name in args.only:
            out_dir, lj, ej = (work / f"{name}-{rnd}{s}" for s in ("", "-l.json", "-e.json"))
            quiet &= quiet_check(f"llm-compressor {name}")
            run(llmc_command(py, model_dir, work / "calib.pt", name, out_dir, lj))
            run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    "eval",
                    "--model-dir",
                    str(out_dir),
                    *common,
                    "--json",
                    str(ej),
                ]
            )
            llmc = {**json.loads(lj.read_text()), **json.loads(ej.read_text())}
            for dtype in args.calib_dtypes:
                quiet &= quiet_check(f"PruneScope {name} ({dtype})")
                pj = work / f"{name}-{rnd}-p-{dtype}.json"
                run(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        "ps",
                        "--config",
                        name,
                        "--calib-dtype",
                        dtype,
                        *common,
                        "--calib",
                        str(work / "calib.pt"),
                        "--json",
                        str(pj),
                        "--masks",
                        str(work / f"{name}-{rnd}-m-{dtype}.pt"),
                    ]
                )
                rows.append((rnd, seed, name, dtype, json.loads(pj.read_text()), llmc))
    quiet_word = "yes" if quiet else "NO"
    print(
        f"\n{args.model}, calibration {args.nsamples} x {args.seqlen} C4 (one tensor, both "
        f"sides), WikiText-2 {windows.shape[0]} x {windows.shape[1]}, device {args.device}, "
        f"{torch.get_num_threads()} threads, quiet machine: {quiet_word}"
    )
    print(
        "| round | nudge seed | config | PS forwards | PPL PruneScope [95%] "
        "| PPL llm-compressor [95%] "
        "| s PS | s llmc | s ratio | peak RSS PS MiB | llmc MiB | RSS ratio "
        "| intervals overlap | masks as round 1 float32 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rnd, seed, name, dtype, ps, lc in rows:
        overlap = ps["ppl_lo"] <= lc["ppl_hi"] and lc["ppl_lo"] <= ps["ppl_hi"]
        t_ratio, m_ratio = ps["seconds"] / lc["seconds"], ps["peak_rss_mib"] / lc["peak_rss_mib"]
        same = mask_agreement(work / f"{name}-0-m-{F32}.pt", work / f"{name}-{rnd}-m-{dtype}.pt")
        print(
            f"| {rnd + 1} | {seed} | {name} | {dtype} "
            f"| {ps['ppl']:.3f} [{ps['ppl_lo']:.2f}, {ps['ppl_hi']:.2f}] "
            f"| {lc['ppl']:.3f} [{lc['ppl_lo']:.2f}, {lc['ppl_hi']:.2f}] "
            f"| {ps['seconds']:.1f} | {lc['seconds']:.1f} | {t_ratio:.2f} "
            f"| {ps['peak_rss_mib']:.0f} | {lc['peak_rss_mib']:.0f} "
            f"| {m_ratio:.2f} | {'yes' if overlap else 'no'} | {same} |"
        )

    if len(seeds) > 1:
        print_spreads(rows)


def print_spreads(rows: list) -> None:
    """Each side's perplexity and pruning-time spread over the rounds, per configuration."""
    print("\nover the rounds:")
    for name in dict.fromkeys(r[2] for r in rows):
        mine = [r for r in rows if r[2] == name]
        llmc = list({r[0]: r[5] for r in mine}.values())  # one llm-compressor run per round
        print(
            f"{name} llm-compressor: PPL {spread([lc['ppl'] for lc in llmc])}; "
            f"s {spread([lc['seconds'] for lc in llmc])}"
        )
        for dtype in dict.fromkeys(r[3] for r in mine):
            ps = [r[4] for r in mine if r[3] == dtype]
            print(
                f"{name} PruneScope {dtype}: PPL {spread([p['ppl'] for p in ps])}; "
                f"s {spread([p['seconds'] for p in ps])}"
            )


if __name__ == "__main__":
    main()
