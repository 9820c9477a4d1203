"""CLI commands of the analyses built on pruning runs (slice, sweep, effdim) and the
human-readable summaries every command prints."""

from __future__ import annotations

from typing import Any

COMMANDS: dict[str, Any] = {}


def add_commands(sub, add_model, add_eval, add_calib, add_common) -> None:
    """Register the analysis subcommands on the top-level parser."""


def summary_lines(command: str, m: dict[str, Any]) -> list[str]:
    """A few readable lines of a run's metrics."""
    lines = []
    data = m.get("data") or {}
    if data:
        note = "" if data.get("comparable", True) else "  [NOT comparable with published figures]"
        lines.append(
            f"data: {data.get('dataset')} ({data.get('split')}) from {data.get('source')}{note}"
        )
    if command == "eval" or "tokens_per_s" in m:
        lines.append(f"perplexity: {m['ppl']:.4f}  (mean NLL {m['nll']:.4f} nats)")
        lines.append(
            f"tokens evaluated: {m['n_tokens']} ({m['n_windows']} windows of {m['seqlen']})"
        )
        lines.append(f"throughput: {m['tokens_per_s']:.1f} tokens/s in {m['seconds']:.1f} s")
    elif "dense_ppl" in m:
        lines.append(f"dense perplexity:  {m['dense_ppl']:.4f}")
        lines.append(
            f"pruned perplexity: {m['ppl']:.4f}  ({m['n_windows']} windows, {m['n_tokens']} tokens)"
        )
        if "achieved_sparsity" in m:
            lines.append(f"achieved sparsity: {m['achieved_sparsity']:.4f} of targeted weights "
                         f"({m['decoder_sparsity']:.4f} of all decoder linears)")  # fmt: skip
        lines.append(f"pruning time: {m['prune_seconds']:.1f} s")
        if m.get("saved_to"):
            lines.append(f"saved to: {m['saved_to']}")
    return lines
