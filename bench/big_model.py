"""A model larger than the memory it is pruned in: streamed Wanda, SparseGPT and SliceGPT.

    python bench/big_model.py [--workdir /tmp/ps-big] [--layers 48] [--hidden 1024]
                              [--nsamples 4 --calib-seqlen 128 --windows 2 --seqlen 128]
                              [--threads 1] [--methods sparsegpt,slicegpt,wanda] [--no-dense]
    python bench/big_model.py --real [--shard-mb 400] [--limit-mb 1300] [--layouts units,packed]

``--real``: a model of real proportions as ``save_pretrained`` writes it (16 layers, d = 1024,
MLP 3584, vocabulary 49,152: the embedding and the untied head are 192 MiB each, 1312 MiB
of float32), saved both ways, one unit per shard (18 files) and packed into shards of at
most ``--shard-mb`` (4 files of <= 400 MB), each with a byte-level tokenizer. For each layout
the whole CLI process (``python -m core prune --stream --method wanda ...``) runs under
``/usr/bin/time -v``; its peak RSS is set against the goal: the idle CLI process
(``python -c "import core.cli.main"``: interpreter, libraries, core) + 2 x the largest unit
+ 64 MiB, and the run's own ``over_budget_mb`` is printed. ``--limit-mb``: the same prune
with the default flags (``--stream auto``) in a memory cgroup of that size (``core.machine``
reads the limit), which must stream by itself and finish, and a model whose largest unit
cannot fit even streamed (vocabulary 262,144 x d 2048: a 2 GiB embedding), which must be refused
before loading, with the figures.

Builds a randomly initialised Llama-shaped model (default: 48 layers, d = 1024, 2816 MLP,
32000 vocabulary, untied head: 682 M parameters, 2.73 GB float32) and saves it as
safetensors one decoder layer per shard, never holding it whole. Then, each phase in a fresh
subprocess that reports its own peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, so
phases do not pollute each other): dense perplexity streamed layer by layer; Wanda and
SparseGPT at 50% and SliceGPT at 25%, each streamed from the source files into a new folder
written shard by shard (``core.stream.pipeline``); the pruned folder's perplexity streamed;
and the folder reloaded whole with plain transformers (SliceGPT: ``load_sliced``) and
evaluated the ordinary way, which must give the same perplexity. The reload phase holds the
whole model by design; the goal (peak RSS <= 35% of the weight bytes) is for the streamed
phases. Token ids are seeded random draws from the vocabulary: on a random model the
perplexity means nothing beyond the equality checked here. Wall times are printed but on a
shared machine they are not speed figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from core.evaluation.perplexity import evaluate_perplexity
from core.methods.slicegpt import load_sliced
from core.models.load import byte_tokenizer
from core.models.weights import LazyWeights
from core.settings.config import PruneConfig
from core.stream.pipeline import perplexity_streamed, prune_streamed
from core.stream.synthetic import llama_config, write_random_model

METHODS = {"wanda": 0.5, "sparsegpt": 0.5, "slicegpt": 0.25}
ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.35


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def build(args, folder: Path | None = None, shard_mb: float | None = None) -> dict:
    """The random source model (``core.stream.synthetic``): one unit per shard, or packed
    into shards of at most ``shard_mb`` MB as ``save_pretrained(max_shard_size=...)``
    writes them; with a byte-level tokenizer, so the CLI can run it."""
    folder = folder or Path(args.workdir) / "source"
    cfg = llama_config(args.layers, args.hidden, args.intermediate, args.vocab)
    shard = None if shard_mb is None else int(shard_mb * 10**6)
    total = write_random_model(folder, cfg, torch.float32, shard_bytes=shard)
    byte_tokenizer().save_pretrained(folder)
    shards = len(list(folder.glob("*.safetensors")))
    return {"weight_bytes": total, "n_params": total // 4, "shards": shards}


def _ids(args, n: int, L: int, seed: int) -> torch.Tensor:
    return torch.randint(0, args.vocab, (n, L), generator=torch.Generator().manual_seed(seed))


def phase(args) -> dict:
    """One phase in this (fresh) process; returns its figures and peak RSS."""
    if args.threads:
        torch.set_num_threads(args.threads)
    work, name = Path(args.workdir), args.phase
    windows = _ids(args, args.windows, args.seqlen, seed=1)
    out: dict = {}
    t0 = time.perf_counter()
    if name == "build":
        out = build(args)
    elif name == "idle":
        pass  # interpreter + torch + transformers + core: the floor under every phase
    elif name.startswith("eval-"):
        folder = work / name.removeprefix("eval-")
        res, peak = perplexity_streamed(folder, windows, args.batch_size)
        out = {"ppl": res.ppl, "peak_params": peak}
    elif name.startswith("prune-"):
        method = name.removeprefix("prune-")
        prune = PruneConfig(method=method, sparsity=METHODS[method])
        calib = _ids(args, args.nsamples, args.calib_seqlen, seed=0)
        run = prune_streamed(work / "source", work / method, prune, calib)
        out = {
            "peak_params": run.peak_materialised,
            "out_bytes": LazyWeights(work / method).nbytes(),
        }
    elif name.startswith("reload-"):
        method = name.removeprefix("reload-")
        folder = work / method
        model = (
            load_sliced(folder)
            if method == "slicegpt"
            else AutoModelForCausalLM.from_pretrained(folder)
        )
        out = {"ppl": evaluate_perplexity(model.eval(), windows, args.batch_size).ppl}
    out.update(seconds=time.perf_counter() - t0, peak_rss=peak_rss_bytes())
    return out


def run_phase(args, name: str) -> dict:
    """One phase in a fresh process (its peak RSS its own), or in this one with
    ``--in-process`` (a smoke run: the peaks then accumulate)."""
    if args.in_process:
        res = phase(argparse.Namespace(**{**vars(args), "phase": name}))
    else:
        cmd = [sys.executable, __file__, "--phase", name, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"phase {name} failed (exit {proc.returncode})")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"  {name:16s} peak RSS {res['peak_rss'] / 2**20:8.0f} MiB  {res['seconds']:7.1f} s",
        flush=True,
    )
    return res


# ---- --real: a model of real proportions, the whole CLI process ---------------------------------
REAL = {"layers": 16, "hidden": 1024, "intermediate": 3584, "vocab": 49152}
TOO_BIG = {"layers": 2, "hidden": 2048, "intermediate": 5632, "vocab": 262144}
SLACK_MB = 64


def cli_prune(folder: Path, store: Path, *flags: str) -> list[str]:
    """The issue's streamed Wanda run (flags added: --stream, --no-stream or none)."""
    return [
        sys.executable, "-m", "core", "prune", "--model", str(folder), "--device", "cpu",
        "--method", "wanda", "--sparsity", "0.5", "--calib", "pydoc", "--nsamples", "4",
        "--seqlen", "128", "--eval", "pydoc", "--max-windows", "2", "--store", str(store),
        "--json", "--quiet", *flags,
    ]  # fmt: skip


def timed(cmd: list[str], prefix: list[str] = ()) -> dict:
    """Run ``cmd`` under /usr/bin/time -v: exit status, whole-process peak RSS (MiB), the
    last JSON line of stdout (or None) and stderr's tail."""
    proc = subprocess.run(
        [*prefix, "/usr/bin/time", "-v", *cmd], capture_output=True, text=True, cwd=ROOT
    )
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    lines = [x for x in proc.stdout.strip().splitlines() if x.startswith("{")]
    err = [x for x in proc.stderr.splitlines() if not x.startswith("\t")]
    return {
        "rc": proc.returncode,
        "peak_mb": int(peak.group(1)) / 1024 if peak else math.nan,
        "out": json.loads(lines[-1]) if lines else None,
        "err": "\n".join(err[-5:]),
        "signalled": "Command terminated by signal" in proc.stderr,
    }


def in_memory_cgroup(cmd: list[str], limit_mb: int) -> tuple[dict, str]:
    """``timed(cmd)`` inside a fresh memory cgroup of ``limit_mb`` (v1 or v2, removed
    afterwards), else under ``systemd-run -p MemoryMax``, else ``prlimit --as``. Returns the
    result and how the limit was set (and, for a cgroup, whether its OOM killer fired)."""
    v1, v2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")
    name = f"prunescope-bench-{uuid.uuid4().hex[:6]}"
    for group, limit_file, procs in (
        (v1 / name, "memory.limit_in_bytes", "cgroup.procs"),
        (v2 / name, "memory.max", "cgroup.procs"),
    ):
        if not os.access(group.parent, os.W_OK) or not (
            group.parent == v1 or "memory" in _read(v2 / "cgroup.subtree_control")
        ):
            continue
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit_mb * 2**20))
        except OSError:
            continue
        try:
            enter = ["sh", "-c", f'echo $$ > {group / procs} && exec "$@"', "sh"]
            res = timed(cmd, enter)
            oom = _read(group / "memory.oom_control") + _read(group / "memory.events")
            killed = re.search(r"oom_kill (\d+)", oom)
            res["oom_kills"] = int(killed.group(1)) if killed else 0
            return res, f"memory cgroup {group} limited to {limit_mb} MiB"
        finally:
            group.rmdir()
    if shutil.which("systemd-run"):
        scope = ["systemd-run", "--scope", "-q", "-p", f"MemoryMax={limit_mb}M"]
        return timed(cmd, scope), f"systemd-run scope, MemoryMax={limit_mb}M"
    return timed(cmd, ["prlimit", f"--as={limit_mb * 2**20}"]), f"prlimit --as={limit_mb} MiB"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def unit_mb(shape: dict) -> float:
    layer = 4 * shape["hidden"] ** 2 + 3 * shape["hidden"] * shape["intermediate"]
    return max(layer, shape["vocab"] * shape["hidden"]) * 4 / 2**20


def real(args) -> None:
    """Both shard layouts of the REAL model, then (--limit-mb) the memory-limited runs."""
    work = Path(args.workdir)
    for k, v in REAL.items():
        setattr(args, k, v)
    idle = timed([sys.executable, "-c", "import core.cli.main"])["peak_mb"]
    unit = unit_mb(REAL)
    goal = idle + 2 * unit + SLACK_MB
    print(
        f"real-proportions model: {REAL}; largest unit {unit:.0f} MiB; idle CLI process "
        f"(python -c 'import core.cli.main') {idle:.0f} MiB; goal: peak <= {idle:.0f} "
        f"+ 2 x {unit:.0f} + {SLACK_MB} = {goal:.0f} MiB",
        flush=True,
    )
    head = (
        f"{'layout':22s} {'shards':>6s} {'weights':>9s} {'peak RSS':>9s} {'goal':>6s} {'ok':>3s} "
        f"{'budget':>7s} {'prune peak':>10s} {'over_budget':>11s} {'ppl':>9s} {'s':>6s}"
    )
    print(head + "\n" + "-" * len(head), flush=True)
    folders = {}
    layouts = {
        "units": ("one unit per shard", None),
        "packed": (f"{args.shard_mb:g} MB shards", args.shard_mb),
    }
    for label, shard_mb in (layouts[x] for x in args.layouts.split(",")):
        folder = work / ("units" if shard_mb is None else "packed")
        built = build(args, folder, shard_mb)
        folders[label] = folder
        t0 = time.perf_counter()
        res = timed(cli_prune(folder, work / "store", "--stream", "--force"))
        secs = time.perf_counter() - t0
        if res["rc"] != 0 or res["out"] is None:
            print(f"{label}: exit {res['rc']}\n{res['err']}")
            continue
        m = res["out"]["metrics"]
        ok = "yes" if res["peak_mb"] <= goal else "NO"
        print(
            f"{label:22s} {built['shards']:6d} {built['weight_bytes'] / 2**20:5.0f} MiB "
            f"{res['peak_mb']:5.0f} MiB {goal:6.0f} {ok:>3s} {m['memory_budget_mb']:7.0f} "
            f"{m['prune_peak_rss_mb']:10.0f} {m['over_budget_mb']:+11.0f} {m['ppl']:9.2f} "
            f"{secs:6.1f}",
            flush=True,
        )
    if args.limit_mb:
        limited(args, work, next(iter(folders.values())))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def limited(args, work: Path, folder: Path) -> None:
    """The default flags under a memory limit below the weights: streamed by themselves and
    finished; a model that cannot fit even streamed: refused before loading."""
    print(f"\nwith memory limited to {args.limit_mb} MiB (weights: 1312 MiB), default flags:")
    res, how = in_memory_cgroup(cli_prune(folder, work / "store-limited"), args.limit_mb)
    out = res["out"] or {}
    m = out.get("metrics", {})
    print(
        f"  {how}\n  prune (--stream auto): exit {res['rc']}, killed: "
        f"{'yes' if res['signalled'] or res.get('oom_kills') else 'no'} "
        f"(oom kills {res.get('oom_kills', '-')}), streamed: {m.get('streamed', False)}, "
        f"peak RSS {res['peak_mb']:.0f} MiB, ppl {m.get('ppl', math.nan):.2f}"
    )
    if res["rc"] != 0:
        print("  " + res["err"].replace("\n", "\n  "))
    too_big = work / "too-big"
    too_big.mkdir(parents=True, exist_ok=True)  # its config: planning reads nothing else
    cfg = llama_config(
        TOO_BIG["layers"], TOO_BIG["hidden"], TOO_BIG["intermediate"], TOO_BIG["vocab"]
    )
    cfg.save_pretrained(too_big)
    byte_tokenizer().save_pretrained(too_big)
    (too_big / "model.safetensors").write_bytes(b"")  # never read: refused before loading
    res, _ = in_memory_cgroup(cli_prune(too_big, work / "store-limited"), args.limit_mb)
    print(
        f"  a model with a {unit_mb(TOO_BIG):.0f} MiB largest unit ({TOO_BIG}): exit "
        f"{res['rc']}, peak RSS {res['peak_mb']:.0f} MiB\n  " + res["err"]
    )


def main(args) -> None:
    threads = args.threads or torch.get_num_threads()
    print(
        f"big_model: {args.layers} layers, d={args.hidden}, workdir {args.workdir}, "
        f"{threads} thread(s) per phase",
        flush=True,
    )
    built = run_phase(args, "build")
    weights = built["weight_bytes"]
    print(
        f"  source: {built['n_params'] / 1e6:.0f} M parameters, {weights / 1e9:.2f} GB float32, "
        f"{built['shards']} shards",
        flush=True,
    )
    idle = run_phase(args, "idle")
    rows = []
    if not args.no_dense:
        dense = run_phase(args, "eval-source")
        rows.append(("dense (eval)", dense["peak_rss"], dense["peak_rss"], dense["ppl"], math.nan))
    for method in args.methods.split(","):
        s = METHODS[method]
        pruned = run_phase(args, f"prune-{method}")
        ev = run_phase(args, f"eval-{method}")
        re = run_phase(args, f"reload-{method}")
        rows.append((f"{method} {s:.0%}", pruned["peak_rss"], ev["peak_rss"], ev["ppl"], re["ppl"]))
    print()
    print(
        f"weight bytes (source, float32): {weights:,} ({weights / 2**20:.0f} MiB); "
        f"idle process (python + torch + transformers + core): {idle['peak_rss'] / 2**20:.0f} MiB"
    )
    print(
        f"calibration {args.nsamples} x {args.calib_seqlen} tokens, "
        f"eval {args.windows} x {args.seqlen}"
    )
    head = (
        f"{'method':14s} {'weight bytes':>13s} {'prune peak RSS':>15s} {'eval peak RSS':>14s} "
        f"{'ratio':>7s} {'goal':>5s} {'ppl streamed':>13s} {'ppl reloaded':>13s} {'same':>5s}"
    )
    print(head)
    print("-" * len(head))
    for method, p_rss, e_rss, ppl, ppl_re in rows:
        ratio = max(p_rss, e_rss) / weights
        ok = "yes" if ratio <= GOAL else "NO"
        same = "-" if ppl_re != ppl_re else ("yes" if abs(ppl_re - ppl) <= 1e-5 * ppl else "NO")
        print(
            f"{method:14s} {weights / 2**20:9.0f} MiB {p_rss / 2**20:11.0f} MiB "
            f"{e_rss / 2**20:10.0f} MiB {ratio:7.1%} {ok:>5s} {ppl:13.4f} {ppl_re:13.4f} {same:>5s}"
        )
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)


def parse(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workdir", default="/tmp/ps-big")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--nsamples", type=int, default=4)
    ap.add_argument("--calib-seqlen", type=int, default=128)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--seqlen", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the model folders afterwards")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list, in this order")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense source's perplexity")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads per phase (default: torch's). On a shared, loaded machine 1 is "
        "much faster: MKL's two-thread cholesky_inverse took 14-17 s for 2816 x 2816 there, "
        "one thread 0.7 s (the bits of SparseGPT's factors depend on the thread count)",
    )
    ap.add_argument("--real", action="store_true", help="the real-proportions model (docstring)")
    ap.add_argument("--shard-mb", type=float, default=400, help="--real: packed shard size")
    ap.add_argument("--limit-mb", type=int, default=0, help="--real: the memory-limited runs")
    ap.add_argument("--layouts", default="units,packed", help="--real: which shard layouts")
    ap.add_argument(
        "--in-process", action="store_true", help="every phase in this process (a smoke run)"
    )
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse()
    if ARGS.phase:
        print(json.dumps(phase(ARGS)))
    elif ARGS.real:
        real(ARGS)
    else:
        main(ARGS)
