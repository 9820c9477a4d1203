"""The readable lines of a recover run's metrics (``python -m core recover`` without --json)."""

from __future__ import annotations

from typing import Any


def _ppl(m: dict[str, Any], key: str) -> str:
    lo, hi = m.get(f"{key}_lo"), m.get(f"{key}_hi")
    return f"{m[key]:.4f}" + (f" [{lo:.4f}, {hi:.4f}]" if lo is not None else "")


def recovery_lines(m: dict[str, Any]) -> list[str]:
    """Perplexity before/after with 95% intervals, the curve's ends, the zeros, time, memory."""
    lines = [
        f"recovered run {m['parent_run']} ({m['parent_kind']}) with {m['recover_method']}, "
        f"{m['steps']} steps"
        + (f" (resumed at step {m['resumed_from']})" if m["resumed_from"] else ""),
        f"dense perplexity:           {_ppl(m, 'dense_ppl')}",
        f"before recovery:            {_ppl(m, 'parent_ppl')}",
        f"after recovery:             {_ppl(m, 'ppl')}  ({m['n_windows']} windows, 95% intervals)",
        f"held-out curve:             {m['heldout_ppl_start']:.4f} -> {m['heldout_ppl_end']:.4f} "
        f"(final training loss {m['final_train_loss']:.4f})",
    ]
    if m.get("achieved_sparsity") is not None:
        same = "exactly the parent's zero set" if m["zero_set_kept"] else "ZERO SET CHANGED"
        lines.append(
            f"achieved sparsity:          {m['achieved_sparsity']!r} (parent "
            f"{m['parent_achieved_sparsity']!r}): {same}"
        )
    if m.get("kept_params") is not None:
        lines.append(f"kept parameters:            {m['kept_params']:.4f} of the dense model's")
    lines.append(
        f"fine-tune time:             {m['recover_seconds']:.1f} s "
        f"({m['train_tokens_per_s']:.0f} training tokens/s); peak RSS {m['peak_rss_mb']:.0f} MiB"
    )
    if "parent_mean_acc" in m:
        lines.append(
            f"zero-shot mean accuracy:    {m['mean_acc']:.4f} (parent {m['parent_mean_acc']:.4f})"
        )
    if m.get("saved_to"):
        lines.append(f"saved to: {m['saved_to']}")
    return lines
