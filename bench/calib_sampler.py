"""Calibration samplers compared: our windows (Wanda/SparseGPT) against SliceGPT's whole documents.

    python bench/calib_sampler.py [--seeds 0,1,2,3,4] [--nsamples 16] [--seqlen 512]
                                  [--max-windows 16] [--store DIR] [--lock /tmp/heavy.lock]

Issue #31 item 3. For SliceGPT 25 % and SparseGPT 50 % on the model (default SmolLM2-135M),
every seed is run with each sampler (``--calib-sampler window`` and ``documents``):
calibration on C4 train (the head subset of shared/data), evaluation on the first
``--max-windows`` windows of ``--seqlen`` tokens of WikiText-2 test. Each run is one CLI process
(``python -m core slice|prune --json --measure lean``); with ``--lock`` the runs hold that
lock file, several in a row up to ``--hold`` seconds; a run already in ``--store`` is read
back, not recomputed.

Printed per method x sampler: mean, std (over seeds, ddof 1), min and max of the perplexity
and the mean log-perplexity; then per method the difference of log-perplexity (documents -
window) per seed and its mean with a 95 % Student-t interval over seeds. The two samplers
share only the seed *number* (their draws are independent), so the interval is that of a
difference of means over n pairs; a bootstrap over 5 seeds would be no better founded.

Rule fixed before the runs (which statistic chooses the default): "documents" becomes the
default only if, for BOTH methods, the mean difference of log-perplexity (documents - window)
is negative and its 95 % t interval excludes 0. Otherwise "window" stays the default (no
evidence to change the protocol every published Wanda/SparseGPT figure uses).
"""

from __future__ import annotations

import fcntl
import json
import math
import shlex
import statistics
import subprocess
import sys
import time

from protocol import ROOT, protocol_parser, store_path
from scipy.stats import t as student_t

SAMPLERS = ("window", "documents")
METHODS: dict[str, list[str]] = {
    "slicegpt 25%": ["slice", "--sparsity", "0.25"],
    "sparsegpt 50%": ["prune", "--method", "sparsegpt", "--sparsity", "0.5"],
}


class HeavyLock:
    """``flock`` on a shared lock file, held for several runs in a row but released before a
    run that could push the hold past ``hold`` seconds (other jobs get their turn)."""

    def __init__(self, path: str | None, hold: float) -> None:
        self.fh = open(path, "a") if path else None  # noqa: SIM115 (held across runs)
        self.hold, self.since, self.longest = hold, None, 0.0

    def before_run(self) -> None:
        if self.fh is None:
            return
        now = time.monotonic()
        if self.since is not None and now - self.since + self.longest > self.hold:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.since = None
        if self.since is None:
            fcntl.flock(self.fh, fcntl.LOCK_EX)
            self.since = time.monotonic()

    def after_run(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)


def run_one(args, store: str, method: list[str], sampler: str, seed: int) -> dict:
    """One run through the CLI; its --json object."""
    cmd = [sys.executable, "-m", "core", *method, "--model", args.model, "--device", "cpu"]
    cmd += ["--calib", "c4", "--nsamples", str(args.nsamples), "--calib-seqlen", str(args.seqlen)]
    cmd += ["--seed", str(seed), "--calib-sampler", sampler, "--measure", "lean"]
    cmd += ["--eval", "wikitext2", "--seqlen", str(args.seqlen)]
    cmd += ["--max-windows", str(args.max_windows), "--data-dir", args.data_dir]
    cmd += ["--store", store, "--json", "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student-t interval of xs."""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    half = student_t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=16, seqlen=512, max_windows=16)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="calibration seeds (comma list)")
    ap.add_argument("--lock", default=None, help="run the CLI processes under flock LOCK")
    ap.add_argument("--hold", type=float, default=360, help="seconds to hold LOCK at most")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    store = store_path(args, "calib-sampler-")
    lock = HeavyLock(args.lock, args.hold)
    nll: dict[tuple[str, str], list[float]] = {}
    dense = None
    for name, method in METHODS.items():
        for seed in seeds:
            for sampler in SAMPLERS:
                lock.before_run()
                t0 = time.monotonic()
                out = run_one(args, store, method, sampler, seed)
                lock.after_run(time.monotonic() - t0)
                m = out["metrics"]
                dense = m.get("dense_ppl", dense)
                nll.setdefault((name, sampler), []).append(m["nll"])
                print(
                    f"  {name:14s} {sampler:9s} seed {seed}: ppl {m['ppl']:.3f}"
                    f" ({'stored' if out['cached'] else 'run'} {out['run_id']})",
                    flush=True,
                )
    print(
        f"\n{args.model}: calibration C4 train {args.nsamples} x {args.seqlen} tokens, "
        f"evaluation WikiText-2 test {args.max_windows} x {args.seqlen}; seeds {seeds}; "
        f"dense ppl {dense:.3f}"
    )
    print(f"{'method':14s} {'sampler':9s}  {'mean ppl':>9s} {'std':>7s} {'min':>8s} {'max':>8s}")
    for (name, sampler), xs in nll.items():
        ppl = [math.exp(x) for x in xs]
        sd = statistics.stdev(ppl) if len(ppl) > 1 else math.nan
        print(
            f"{name:14s} {sampler:9s}  {statistics.fmean(ppl):9.3f} {sd:7.3f}"
            f" {min(ppl):8.3f} {max(ppl):8.3f}   mean ln ppl {statistics.fmean(xs):.4f}"
        )
    verdicts = []
    print("\nln ppl(documents) - ln ppl(window), per seed; mean [95 % t interval]")
    for name in METHODS:
        pairs = zip(nll[(name, "documents")], nll[(name, "window")], strict=True)
        diff = [d - w for d, w in pairs]
        m, lo, hi = t_interval(diff)
        per = " ".join(f"{x:+.4f}" for x in diff)
        print(f"{name:14s} {per}   mean {m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
        verdicts.append(m < 0 and hi < 0)
    choice = "documents" if all(verdicts) else "window"
    print(f"\nrule: documents only if better with an interval excluding 0 for both -> {choice}")


if __name__ == "__main__":
    main()
