"""The field-definition table: every setting a user can choose, defined once.

The CLI derives its argument groups from it (``core.cli.main.parser``), the app draws its forms
from it, and ``core.requests.request`` turns a dict of field values (parsed flags or form values)
into the same resolved ``RunConfig``. One set of defaults: the reference protocol of
Wanda/SparseGPT (calibration 32 × 512 tokens of C4 train, seed 0); SliceGPT's commands keep
its own reference calibration (WikiText-2 train, seed 42). ``PRESETS`` are named sets of
ordinary values, so a preset gives the same run id from the CLI and the app.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.errors import ConfigError
from core.models.catalog import available_models
from core.names import (
    CALIB_DTYPES,
    DATASETS,
    F32,
    FULL,
    MEASURES,
    PATTERNS,
    TARGETS,
    TASK_NAMES,
    method_names,
)
from core.requests.calib_fields import CALIB, SLICEGPT_CALIB
from core.requests.protocol_fields import PROTOCOL
from core.requests.recovery import RECOVER_CALIB, RECOVER_FIELDS
from core.requests.sweep_axes import SWEEP_CALIB, SWEEP_GRID, method_list, sweep_reference
from core.settings.field import CHOICE, FLAG, FLOAT, INT, LIST, MULTI, TEXT, Field


def _group(group: str, *fields: Field) -> tuple[Field, ...]:
    return tuple(dataclasses.replace(f, group=group) for f in fields)


MODEL = _group(
    "model",
    Field(
        "model",
        "Model",
        f"a named model ({', '.join(available_models())}), a local folder or a HF id",
        "smollm2-135m",
    ),
    Field(
        "device",
        "Device",
        "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N, mps",
        "auto",
        TEXT,
        ("auto", "cpu", "cuda", "mps"),
    ),
    Field(
        "dtype",
        "Number precision",
        "auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16",
        "auto",
        CHOICE,
        ("auto", "float32", "bfloat16", "float16"),
        advanced=True,
    ),
    Field(
        "trust_remote_code",
        "Run the model's own code from the Hub",
        "allow model code from the Hub",
        False,
        FLAG,
        advanced=True,
    ),
    Field(
        "revision",
        "Hub revision (branch, tag or commit)",
        "model revision on the Hub",
        advanced=True,
    ),
    Field(
        "stream",
        "Stream the weights from disk (models larger than RAM or the GPU)",
        "on: never hold the model: read one decoder layer at a time from its safetensors files "
        "and write the changed model shard by shard into the run folder (same numbers; no "
        "effective dimension, latency, attention errors or zero-shot tasks); off: hold it in "
        "memory; auto: stream only when the weights and buffers would not fit in free memory "
        "(checked before loading; a path that cannot fit is refused with the figures). "
        "--stream alone is on, --no-stream off",
        "auto",
        CHOICE,
        ("auto", "on", "off"),
        advanced=True,
    ),
)

_DATA_DIR = Field(
    "data_dir",
    "Data folder",
    "local data folder in the shared/data layout (default: $PRUNESCOPE_DATA_DIR or "
    "../shared/data when present, else the Hugging Face Hub)",
    advanced=True,
)
_CORPUS_HELP = f"{', '.join(DATASETS)} (pydoc: offline, stdlib) or file:<path>"
EVAL_DATASET = Field("dataset", "Evaluation corpus", _CORPUS_HELP, "wikitext2")
EVAL = _group(
    "evaluation",
    EVAL_DATASET,
    Field("split", "Evaluation split", "test (wikitext2), validation (c4)", advanced=True),
    _DATA_DIR,
    Field(
        "seqlen",
        "Window length (tokens)",
        "window length in tokens (default 512)",
        512,
        INT,
        range=(2, 131072),
    ),
    Field(
        "max_windows",
        "Evaluation windows",
        "evaluate only the first N windows",
        None,
        INT,
        range=(1, 10**7),
    ),
    Field(
        "batch_size",
        "Windows per forward",
        "evaluation windows per forward",
        4,
        INT,
        range=(1, 4096),
        advanced=True,
    ),
)
_TARGETS = Field(
    "targets",
    "Targets",
    "all, attention, mlp, qk, or roles like q,k,v",
    "all",
    TEXT,
    TARGETS,
)
_OPTION = Field(
    "option",
    "Method options",
    "a method option KEY=VALUE, e.g. percdamp=0.01, lam=0.1, steps=30 (repeatable)",
    (),
    LIST,
)
_BUDGET = Field(
    "budget",
    "Parameter budget",
    "params=F: remove the fraction F of the decoder's parameters, mapped to the method's own "
    "knob (shortgpt: the nearest whole number of layers; wanda-sp: its ratio; flap: its "
    "fraction; slicegpt: d′); replaces --sparsity. Structured methods only",
    None,
    TEXT,
)
_MEASURE = Field(
    "measure",
    "Measurements",
    "full: also the forward latency before and after and the changed model's effective "
    "dimension; lean: perplexity and kept parameters only (quicker, for demos)",
    FULL,
    CHOICE,
    MEASURES,
    advanced=True,
)
PRUNE = _group(
    "pruning",
    Field(
        "method",
        "Method",
        "one of the registered methods",  # with their names: command_fields
        "wanda",
        TEXT,
        method_names(),
    ),
    Field(
        "sparsity",
        "Sparsity",
        "fraction of weights to remove, in [0, 1)",
        0.5,
        FLOAT,
        range=(0.0, 0.99),
    ),
    _BUDGET,
    Field(
        "pattern",
        "Pattern",
        "unstructured or N:M (2:4, 4:8, ...)",
        "unstructured",
        TEXT,
        PATTERNS,
    ),
    _TARGETS,
    Field(
        "allocation",
        "Allocation",
        "uniform, or OWL's outlier-weighted layer sparsities",
        "uniform",
        CHOICE,
        ("uniform", "owl"),
    ),
    Field(
        "owl_lambda",
        "OWL: layer sparsities span target ± λ",
        "OWL: sparsities span target ± λ",
        0.08,
        FLOAT,
        range=(0.0, 0.5),
        advanced=True,
    ),
    Field(
        "owl_m",
        "OWL: outliers are scores above M × mean",
        "OWL: outliers are scores above M × their mean",
        5.0,
        FLOAT,
        range=(1.0, 100.0),
        advanced=True,
    ),
    Field(
        "calib_dtype",
        "Calibration forward precision",
        "float32: the layer forwards that feed the statistics in float32, as the reference "
        "implementations (default); bfloat16: their matrix products in bfloat16 with float32 "
        "accumulation, about twice as fast where the CPU or GPU has bfloat16 units "
        "(layer-wise methods; statistics and updates stay float32/float64)",
        F32,
        CHOICE,
        CALIB_DTYPES,
        advanced=True,
    ),
    _OPTION,
    _MEASURE,
    Field("save", "Save to", "save the pruned model (save_pretrained) in DIR", config=False),
    Field(
        "activations_on_cpu",
        "Activations on CPU",
        "keep calibration activations on the CPU (large models)",
        False,
        FLAG,
        config=False,
    ),
)
ZEROSHOT = _group(
    "zero-shot accuracy",
    Field(
        "tasks",
        "Zero-shot tasks",
        f"comma list of {', '.join(TASK_NAMES)}, or all (default: none, perplexity only); "
        "accuracy beside perplexity, scored as lm-evaluation-harness scores it",
        None,
        MULTI,
        TASK_NAMES,
    ),
    Field("limit", "Items per task", "first N items of each task", None, INT, range=(1, 10**6)),
)
SLICE = _group(
    "slicing",
    Field(
        "sparsity",
        "Slicing fraction s",
        "slicing fraction s in [0, 1)",
        0.25,
        FLOAT,
        range=(0.0, 0.99),
    ),
    _BUDGET,
    dataclasses.replace(
        _OPTION, help="round_to=8, damp=0.01, slice_head=false, orientation=pca|random"
    ),
    _MEASURE,
    Field(
        "save",
        "Save to",
        "save the sliced model in DIR (reload: core.methods.slicegpt.load_sliced)",
        config=False,
    ),
)
SWEEP = _group(
    "sweep",
    *SWEEP_GRID,
    PROTOCOL,
    _TARGETS,
    dataclasses.replace(
        _OPTION,
        help="KEY=VALUE for every method of the sweep, METHOD.KEY=VALUE for one "
        "(sparsegpt.percdamp=0.02; slicegpt: round_to=8, damp=0.01, orientation=pca|random)",
    ),
    _MEASURE,
)
ZEROSHOT_MODEL = (
    *_group("zero-shot accuracy", dataclasses.replace(ZEROSHOT[0], default="all"), ZEROSHOT[1]),
    dataclasses.replace(
        _DATA_DIR,
        help="folder with tasks/<task>/ files (default: "
        "$PRUNESCOPE_DATA_DIR or ../shared/data when present, else the Hub)",
    ),
    Field("batch_size", "Batch size", "items per forward", 8, INT, range=(1, 4096)),
    Field("run", "Run", "a stored eval/prune/slice run: evaluate the model it produced"),
)


def _with(fields: tuple[Field, ...], **changes: dict[str, Any]) -> tuple[Field, ...]:
    """``fields`` with some fields changed: name -> {attribute: value}."""
    return tuple(dataclasses.replace(f, **changes.get(f.name, {})) for f in fields)


_EVAL_FLAG = {"dataset": {"name": "eval"}}

RECOVER_SAVE = Field(
    "save",
    "Save to",
    "save the recovered model in DIR (a sliced one reloads with load_sliced)",
    group="recovery",
    config=False,
)

# command -> its fields, in the order the CLI lists them and the app draws them
COMMANDS: dict[str, tuple[Field, ...]] = {
    "eval": (*MODEL, *EVAL),
    "prune": (*MODEL, *PRUNE, *CALIB, *_with(EVAL, **_EVAL_FLAG), *ZEROSHOT),
    "slice": (
        *MODEL,
        *SLICE,
        *_with(CALIB, **SLICEGPT_CALIB),
        *_with(EVAL, **_EVAL_FLAG),
        *ZEROSHOT,
    ),
    "sweep": (
        *MODEL,
        *SWEEP,
        *_with(CALIB, **SWEEP_CALIB),
        *_with(EVAL, **_EVAL_FLAG),
        *ZEROSHOT,
    ),
    "zeroshot": (*_with(MODEL, model={"default": None}), *ZEROSHOT_MODEL),
    "recover": (
        *RECOVER_FIELDS,
        *RECOVER_CALIB,
        *_group("training text", _DATA_DIR),
        *ZEROSHOT,
        RECOVER_SAVE,
    ),
}

# Named sets of ordinary field values. "quick" keeps a run of the embedded model to minutes
# on a CPU; "demo" (short evaluation windows) to about a minute (the demo set, core.demo);
# "reference" is the protocol every default follows.
PRESETS: dict[str, dict[str, Any]] = {
    "reference": {},
    "quick": {"nsamples": 16, "seqlen": 256, "calib_seqlen": 256, "max_windows": 16},
    # the demo set (core.demo): every page filled in minutes, numbers noisy but real
    "demo": {"nsamples": 8, "seqlen": 64, "calib_seqlen": 128, "max_windows": 4},
}


# Commands whose "method" field picks registered pruning methods (core.names.METHODS).
METHOD_COMMANDS = ("prune", "sweep")


def _registered(f: Field) -> Field:
    """A method field offering the registry's methods as they are now, so a method
    registered after this table was built is a choice too."""
    names = method_names()
    return dataclasses.replace(f, choices=names, help=f"{f.help} ({', '.join(names)})")


def command_fields(command: str) -> tuple[Field, ...]:
    """The fields of a command (ConfigError for a command that has none)."""
    if command not in COMMANDS:
        raise ConfigError(f"no {command!r} command (has: {', '.join(COMMANDS)})")
    if command not in METHOD_COMMANDS:
        return COMMANDS[command]
    return tuple(_registered(f) if f.name == "method" else f for f in COMMANDS[command])


def defaults(command: str, preset: str = "reference") -> dict[str, Any]:
    """Every field of ``command`` at its default, with a preset's values on top."""
    values = {f.name: f.default for f in command_fields(command)}
    return {**values, **{k: v for k, v in PRESETS[preset].items() if k in values}}


def sweep_defaults(methods: Any, preset: str = "reference") -> dict[str, Any]:
    """The sweep command's defaults for these methods (calibration by ``sweep_reference``)."""
    return {
        **defaults("sweep", preset),
        "method": ",".join(method_list(methods)),
        **sweep_reference(methods),
    }


def app_preset(device_type: str | None) -> str:
    """The preset the app's forms start from: the reference protocol on a GPU, 'quick' on a
    CPU or Apple GPU, where the reference takes tens of minutes on the embedded model."""
    return "reference" if device_type == "cuda" else "quick"
