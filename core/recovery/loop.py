"""The recovery training loop: next-token loss on calibration windows, AdamW, a curve of
training loss and held-out perplexity every K steps, and a checkpoint at the same steps.

Deterministic by construction: the order of the training windows is a function of the seed
alone (``batch_order``), the model runs without dropout, and a checkpoint holds the trained
parameters, the optimizer state and the curve so far, so a run resumed from step k ends with
the same weights as one that never stopped (on the same device and kernels).
On CUDA the forward and backward run under bfloat16 autocast while the trained parameters and
the optimizer state stay float32 (master weights).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.evaluation.perplexity import evaluate_perplexity
from core.progress import ProgressFn, report
from core.settings.config import RecoverConfig

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"


def batch_order(n: int, steps: int, batch_size: int, seed: int) -> torch.Tensor:
    """(steps, batch_size) indices into ``n`` training windows: successive random
    permutations (every window once before any twice), from ``seed`` alone."""
    g = torch.Generator().manual_seed(seed)
    need = steps * batch_size
    perms = [torch.randperm(n, generator=g) for _ in range(math.ceil(need / n))]
    return torch.cat(perms)[:need].view(steps, batch_size)


@dataclass
class Checkpoint:
    """A run's resumable state in its scratch folder (kept when the run is killed, removed
    when it is stored). ``key``: the run id it belongs to; another run's file is ignored."""

    folder: Path
    key: str

    @property
    def path(self) -> Path:
        return self.folder / CHECKPOINT_FILE

    def load(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", self.path, exc)
            return None
        return state if state.get("key") == self.key else None

    def save(self, state: dict[str, Any]) -> None:
        """Written beside and renamed over the old one: a kill never leaves half a file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        torch.save({**state, "key": self.key}, tmp)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


@dataclass
class LoopResult:
    rows: list[dict[str, float]]  # the curve: step, train_loss, heldout_ppl
    resumed_from: int  # the checkpoint's step (0: started afresh)
    steps_run: int  # steps this process ran
    tokens_per_s: float = field(default=0.0)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _heldout_ppl(model: nn.Module, heldout: torch.Tensor, device: torch.device) -> float:
    with _autocast(device):
        return evaluate_perplexity(model, heldout, heldout.shape[0], device).ppl


def train(
    model: nn.Module,
    params: list[tuple[str, nn.Parameter]],
    windows: torch.Tensor,
    heldout: torch.Tensor,
    rc: RecoverConfig,
    device: torch.device,
    checkpoint: Checkpoint,
    progress: ProgressFn | None = None,
    after_backward: Callable[[], None] | None = None,
    after_step: Callable[[], None] | None = None,
) -> LoopResult:
    """Train ``params`` of ``model`` for ``rc.steps`` steps of ``rc.batch_size`` windows
    (rows of ``windows``, (n, L) token ids); resume from ``checkpoint`` when it holds this
    run's state. after_backward / after_step: the caller's hold on the zeros (masked
    fine-tuning masks the gradient, then the weight)."""
    trained = [p for _, p in params]
    opt = torch.optim.AdamW(trained, lr=rc.lr, weight_decay=0.0)
    order = batch_order(windows.shape[0], rc.steps, rc.batch_size, rc.seed)
    model.eval()  # no dropout: the same batch gives the same gradient
    state = checkpoint.load()
    if state is not None:
        with torch.no_grad():
            for name, p in params:
                p.copy_(state["params"][name])
        opt.load_state_dict(state["optimizer"])
        rows, pending, start = list(state["rows"]), list(state["pending"]), int(state["step"])
        log.info("resuming recovery from step %d", start)
    else:
        rows, pending, start = [], [], 0
        rows.append({"step": 0, "train_loss": math.nan, "heldout_ppl": 0.0})
        rows[0]["heldout_ppl"] = _heldout_ppl(model, heldout, device)
    report(progress, "recover", start, rc.steps, "resumed" if start else "")
    t0 = time.perf_counter()
    for step in range(start, rc.steps):
        ids = windows[order[step]].to(device)
        with _autocast(device):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        if after_backward is not None:
            after_backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if after_step is not None:
            after_step()
        last = float(loss.detach())
        pending.append(last)
        done = step + 1
        if done % rc.every == 0 or done == rc.steps:
            ppl = _heldout_ppl(model, heldout, device)
            rows.append(
                {"step": done, "train_loss": sum(pending) / len(pending), "heldout_ppl": ppl}
            )
            pending = []
            checkpoint.save(
                {
                    "step": done,
                    "params": {n: p.detach().cpu().clone() for n, p in params},
                    "optimizer": opt.state_dict(),
                    "rows": rows,
                    "pending": pending,
                }
            )
        report(progress, "recover", done, rc.steps, f"loss {last:.3f}")
    seconds = time.perf_counter() - t0
    ran = rc.steps - start
    rate = ran * rc.batch_size * windows.shape[1] / seconds if ran and seconds > 0 else 0.0
    return LoopResult(rows, start, ran, rate)
