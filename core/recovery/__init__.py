"""Recovery fine-tuning that keeps the sparsity (the 'recover' run kind, core.runs.recover).

A pruned model is followed by a short fine-tune in the papers behind every method here
(Wanda §5: LoRA and dense fine-tuning; SliceGPT §4: recovery fine-tuning). Here the zeros
the pruning chose are held exactly:

- ``zero_set``: the pruned linears by module name and their exact zeros, re-applied and checked;
- ``lora``: adapters on the pruned linears (``peft``), merged at the end;
- ``loop``: the training loop (AdamW, bfloat16 autocast over float32 master weights on
  CUDA), the curve of training loss and held-out perplexity, checkpoints to resume from;
- ``finetune``: the two methods, LoRA (merged, then the zeros re-applied) and masked full
  fine-tuning of the pruned linears (gradient and weight masked every step).
"""

from core.recovery.finetune import FinetuneResult, finetune
from core.recovery.loop import Checkpoint
from core.recovery.zero_set import ZeroSet, pruned_linears

__all__ = ["Checkpoint", "FinetuneResult", "ZeroSet", "finetune", "pruned_linears"]
