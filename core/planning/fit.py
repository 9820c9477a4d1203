"""Where a run's model fits, decided before any weight is read: in memory, streamed layer by
layer from its safetensors files (``core.stream``), or nowhere.

The rule (``--stream auto``, the default; figures from the model's config alone):

- in memory needs ``W + B``: the weight bytes in the run's dtype plus the planned buffers;
- streamed needs ``2·U + B``: twice the largest unit a streamed walk holds (a decoder layer,
  the embedding or the LM head: the unit in use and the one being written or read beside
  it), plus the same buffers;
- the buffers ``B`` are the larger of the calibration buffers (inputs, outputs and the
  widest kept input of a layer for every calibration token, and a method's per-layer
  statistics: ``STATS_PER_IN2`` bytes per MLP width squared and ``STATS_PER_WEIGHT`` per
  weight of the largest linear) and the evaluation buffers (a batch's activations
  and one chunk of logits with its log-softmax);
- free memory ``F`` is ``core.machine.process_memory.free_ram_bytes`` (MemAvailable, the
  memory cgroup's limit, RLIMIT_AS) as the planning process sees it, less ``RESERVE``; on a
  GPU the device's free memory ``F_dev`` must hold the path's bytes too, and RAM the bytes
  read on the way to it (the whole model in memory, two units streamed). A job the app
  starts plans in the app's process: its own interpreter is not in the figure.

auto runs in memory when ``W + B <= F`` (and ``<= F_dev`` on a GPU), else streams when the
model can be streamed and ``2·U + B`` fits, else refuses with the figures. A forced path
(``on`` / ``off``) is checked the same way, so no run starts on a path that cannot fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import ConfigError
from core.evaluation.perplexity import LOGIT_CHUNK
from core.machine.process_memory import free_ram_bytes
from core.models.load import TINY_MODELS, model_config
from core.planning.cost import model_shape
from core.settings.config import AUTO, CalibConfig, EvalConfig, ModelSpec

MiB = 2**20
RESERVE = 64 * MiB  # slack for what a run imports late (parquet writer) and the allocator
# A layer-wise method's statistics while one linear is pruned, measured on the streamed Wanda
# run of a d = 1024, MLP 3584 model (docs/benchmarks.md): the widest input's Gram in float64
# with its float32 copy (12 bytes per in²) and, for the largest linear, float64 scores with
# their sort (values, indices) and float32 products (~48 bytes per weight).
STATS_PER_IN2 = 12
STATS_PER_WEIGHT = 48
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Fit:
    """The figures of the rule (bytes) and the path they choose (``stream``; None when
    neither fits). ``free_device`` is None on the CPU; ``why_not_stream`` says why the
    model cannot be streamed (None when it can)."""

    weights: int
    largest_unit: int
    buffers: int
    free_ram: int
    free_device: int | None
    why_not_stream: str | None
    stream: bool | None

    @property
    def in_memory(self) -> int:
        return self.weights + self.buffers

    @property
    def streamed(self) -> int:
        return 2 * self.largest_unit + self.buffers

    def describe(self) -> str:
        """One line with the figures, for the form and the refusal."""
        mb = lambda b: f"{b / MiB:,.0f} MiB"  # noqa: E731
        room = f"{mb(self.free_ram)} of RAM free"
        if self.free_device is not None:
            room += f", {mb(self.free_device)} on the device"
        return (
            f"in memory needs {mb(self.in_memory)} (weights {mb(self.weights)} + buffers "
            f"{mb(self.buffers)}); streamed needs {mb(self.streamed)} (2 × largest unit "
            f"{mb(self.largest_unit)} + buffers); {room}"
        )


def _fits(need: int, ram_need: int, free_ram: int, free_device: int | None) -> bool:
    return (need if free_device is None else ram_need) <= free_ram and (
        free_device is None or need <= free_device
    )


def choose(
    mode: bool | str,
    weights: int,
    largest_unit: int,
    buffers: int,
    free_ram: int,
    free_device: int | None = None,
    why_not_stream: str | None = None,
) -> Fit:
    """Apply the rule: ``mode`` "auto", True (stream) or False (in memory). free_ram is
    already net of ``RESERVE``. Returns the figures with the path (stream None: refused)."""
    fit = Fit(weights, largest_unit, buffers, free_ram, free_device, why_not_stream, None)
    memory_ok = _fits(fit.in_memory, weights, free_ram, free_device)
    stream_ok = why_not_stream is None and _fits(
        fit.streamed, 2 * largest_unit, free_ram, free_device
    )
    if mode == AUTO:
        choice = False if memory_ok else (True if stream_ok else None)
    elif mode:
        choice = True if stream_ok or why_not_stream is not None else None
    else:
        choice = False if memory_ok else None
    return dataclasses.replace(fit, stream=choice)


def why_not_streamable(spec: ModelSpec) -> str | None:
    """Why a model cannot be streamed, from its name alone (None: it can)."""
    if spec.name in TINY_MODELS:
        return f"{spec.name} is built in memory, not read from files"
    if spec.trust_remote_code:
        return "a model with its own code (trust_remote_code) is not streamed"
    folder = Path(spec.name).expanduser()
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        return f"{spec.name} has no safetensors files"
    return None


def planned_buffers(
    spec: ModelSpec, calib: CalibConfig | None = None, eval_cfg: EvalConfig | None = None
) -> int:
    """Bytes of the buffers a run holds beside its weights (the module docstring's B)."""
    shape = model_shape(spec)
    g, item = shape.geo, _DTYPE_BYTES.get(spec.dtype, 4)
    d, ff = g.hidden_size, g.intermediate_size
    calib_b = 0
    if calib is not None:  # float32 statistics whatever the dtype
        acts = calib.nsamples * calib.seqlen * (2 * d + ff) * 4
        calib_b = acts + STATS_PER_IN2 * ff * ff + STATS_PER_WEIGHT * ff * d
    eval_cfg = eval_cfg or EvalConfig()
    batch = min(eval_cfg.batch_size, eval_cfg.max_windows or eval_cfg.batch_size)
    tokens = batch * eval_cfg.seqlen
    eval_b = tokens * (2 * d + ff) * item + 2 * min(LOGIT_CHUNK, tokens) * shape.vocab * 4
    return max(calib_b, eval_b)


def model_bytes(spec: ModelSpec) -> tuple[int, int]:
    """(weight bytes in the run's dtype, bytes of the largest streamed unit), from the
    model's config: decoder layers, the embedding and an untied head."""
    shape = model_shape(spec)
    item = _DTYPE_BYTES.get(spec.dtype, 4)
    config = model_config(spec.name, spec.trust_remote_code, spec.revision)
    text = getattr(config, "text_config", None) or config
    tied = bool(getattr(text, "tie_word_embeddings", getattr(config, "tie_word_embeddings", 0)))
    table = shape.vocab * shape.geo.hidden_size
    weights = shape.geo.n_layers * shape.layer_params + table * (1 if tied else 2)
    return weights * item, max(shape.layer_params, table) * item


def free_device_bytes(device: str) -> int | None:
    """Free memory of a CUDA device (None on the CPU and elsewhere)."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(dev)[0])


def plan_fit(
    spec: ModelSpec,
    calib: CalibConfig | None = None,
    eval_cfg: EvalConfig | None = None,
    free_ram: int | None = None,
) -> Fit:
    """The rule for a spec with its device and dtype resolved (``spec.stream``: "auto",
    True or False). free_ram: the measured figure when None (tests give their own)."""
    weights, unit = model_bytes(spec)
    ram = free_ram_bytes() if free_ram is None else free_ram
    return choose(
        spec.stream,
        weights,
        unit,
        planned_buffers(spec, calib, eval_cfg),
        max(0, ram - RESERVE),
        free_device_bytes(spec.device),
        why_not_streamable(spec),
    )


def place(
    spec: ModelSpec,
    calib: CalibConfig | None = None,
    eval_cfg: EvalConfig | None = None,
    free_ram: int | None = None,
) -> ModelSpec:
    """``spec`` with ``stream`` decided by the rule (True / False), or ConfigError with the
    figures when the path asked for (or, for auto, either path) cannot fit."""
    fit = plan_fit(spec, calib, eval_cfg, free_ram)
    if fit.stream is None:
        if spec.stream == AUTO:
            why = f" ({fit.why_not_stream})" if fit.why_not_stream else ""
            how = f"fits neither in memory nor streamed{why}"
        else:
            how = "does not fit streamed" if spec.stream else "does not fit in memory (--stream?)"
        raise ConfigError(f"{spec.name} {how}: {fit.describe()}; nothing was loaded")
    return dataclasses.replace(spec, stream=fit.stream)
