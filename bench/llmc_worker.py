"""llm-compressor's side of ``bench/vs_llmcompressor.py``; runs in llm-compressor's own venv.

    VENV/bin/python bench/llmc_worker.py --model-dir DIR --calib calib.pt --method sparsegpt
        --pattern 0:0 --save OUT --json result.json

Loads the exported model (float32), prunes its decoder linears with ``oneshot`` and
SparseGPTModifier / WandaPruningModifier (sequential pipeline, lm_head ignored) on the
calibration tensor in ``calib.pt`` (N, L) in its order, writes the pruned model to OUT
(dense safetensors, scored by PruneScope's evaluator) and {seconds, peak_rss_mib, threads}
to result.json. Imports nothing from the project: it runs where llm-compressor is installed.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--method", choices=("sparsegpt", "wanda"), required=True)
    ap.add_argument("--pattern", default="0:0", help="N:M, 0:0 = unstructured")
    ap.add_argument("--sparsity", type=float, default=0.5)
    ap.add_argument("--save", required=True)
    ap.add_argument("--json", required=True)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.pruning import WandaPruningModifier
    from llmcompressor.modifiers.pruning.sparsegpt import SparseGPTModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    ids = torch.load(args.calib)  # (N, L)
    ds = Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()}
    )
    cls = SparseGPTModifier if args.method == "sparsegpt" else WandaPruningModifier
    recipe = cls(
        sparsity=args.sparsity,
        mask_structure=args.pattern,
        targets=["Linear"],
        ignore=["re:.*lm_head"],
    )
    t0 = time.perf_counter()
    oneshot(
        model=model,
        tokenizer=tok,
        dataset=ds,
        recipe=recipe,
        num_calibration_samples=ids.shape[0],
        max_seq_length=ids.shape[1],
        shuffle_calibration_samples=False,
        pipeline="sequential",
    )
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    model.save_pretrained(args.save, save_compressed=False)
    tok.save_pretrained(args.save)
    out = {"seconds": seconds, "peak_rss_mib": peak, "threads": torch.get_num_threads()}
    with open(args.json, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
