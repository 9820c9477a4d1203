"""Wall time of one 8-configuration sweep of the embedded model with 1 and 2 workers, on the
local executor (this process / a 2-process pool) and on a private Ray cluster (1 / 2 CPUs).

    python bench/sweep_scaling.py [--points 8] [--settings local-1,local-2,ray-1,ray-2]

Protocol: magnitude and Wanda at s = 0.3, 0.4, 0.5, 0.6 (8 configurations) on the
embedded model (float32, CPU), calibrated on 8 x 128 tokens of WikiText-2 train (seed 0),
perplexity on the first 8 windows of 128 tokens of WikiText-2 test, so one run takes tens of
seconds. Every setting starts from an empty store and computes the dense baseline first (one
run every setting pays alike). Workers each get cores / workers threads (torch), so 2 workers
on 2 cores trade intra-op for inter-run parallelism. Prints wall time and speed-up against the
same executor with 1 worker, and checks every setting stored the same perplexities.
"""

from __future__ import annotations

import os
import time

from protocol import open_store, protocol_parser

METHODS = ("magnitude", "wanda")
SPARSITIES = (0.3, 0.4, 0.5, 0.6)


def main() -> None:
    ap = protocol_parser(__doc__, nsamples=8, seqlen=128, max_windows=8)
    ap.add_argument("--points", type=int, default=8, help="first N configurations (smoke: 2)")
    ap.add_argument("--settings", default="local-1,local-2,ray-1,ray-2")
    args = ap.parse_args()

    from pathlib import Path

    from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec
    from core.sweeps.executors import make_executor
    from core.sweeps.grid import GridSpec, resolve_grid
    from core.sweeps.orchestrate import run_sweep_grid

    data_dir = str(Path(args.data_dir).resolve())
    grid = [(m, s) for m in METHODS for s in SPARSITIES][: args.points]
    methods = tuple(dict.fromkeys(m for m, _ in grid))
    sparsities = tuple(dict.fromkeys(s for _, s in grid))
    spec = GridSpec(
        ModelSpec(args.model, "cpu", "float32"),
        methods,
        sparsities,
        CalibConfig(DataSpec("wikitext2", "train", data_dir), args.nsamples, args.seqlen, 0),
        EvalConfig(DataSpec("wikitext2", "test", data_dir), args.seqlen, args.max_windows),
    )
    n_points = len(resolve_grid(spec)) - 1
    print(
        f"model {args.model} (float32, CPU); {n_points} configurations ({', '.join(methods)} "
        f"x s = {', '.join(map(str, sparsities))}) + the dense baseline; calibration "
        f"{args.nsamples} x {args.seqlen} WikiText-2 train, eval {args.max_windows} x "
        f"{args.seqlen} WikiText-2 test"
    )

    walls: dict[str, float] = {}
    tables: dict[str, list] = {}
    for setting in args.settings.split(","):
        kind, workers = setting.split("-")
        store = open_store(args, f"sweep-scaling-{setting}-")
        if kind == "ray":
            import ray

            if ray.is_initialized():
                ray.shutdown()
            # Ray starts its workers at nice 15; the local pool runs at this process's
            # priority, so without this any background process would tax Ray alone
            os.environ.setdefault("RAY_worker_niceness", "0")
        # what `python -m core sweep --executor KIND --workers N` builds (Ray: a private
        # cluster of this machine's cores, cores // N per task)
        executor = make_executor(kind, int(workers), ray_address="local")
        t0 = time.perf_counter()
        out = run_sweep_grid(spec, store, executor)
        walls[setting] = time.perf_counter() - t0
        tables[setting] = [(r["method"], r["sparsity"], r["ppl_mean"]) for r in out["table"]]
        print(f"  {setting}: {walls[setting]:.1f} s ({out['computed']} runs)", flush=True)

    print()
    print(f"{'executor':<10}{'workers':>8}{'wall s':>10}{'s/run':>8}{'speed-up':>10}")
    for setting, wall in walls.items():
        kind, workers = setting.split("-")
        base = walls.get(f"{kind}-1")
        speed = f"{base / wall:.2f}x" if base else "-"
        print(f"{kind:<10}{workers:>8}{wall:>10.1f}{wall / (n_points + 1):>8.1f}{speed:>10}")
    same = len({tuple(t) for t in tables.values()}) == 1
    print(f"\nall settings stored the same perplexities: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
