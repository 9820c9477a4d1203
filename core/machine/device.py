"""Device and dtype selection: CUDA > MPS > CPU unless the user says otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from core.errors import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPES.update({"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16})


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' picks CUDA, then Apple MPS, then CPU; an explicit name is checked."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"unknown device {name!r} (use auto, cpu, cuda, cuda:N or mps)") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available on this machine")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device 'mps' requested but MPS is not available on this machine")
    return dev


@contextmanager
def single_thread(device: torch.device) -> Iterator[None]:
    """Run CPU LAPACK work (factorisations, eigendecompositions) on one thread.

    At the sizes pruning factorises (d ≈ 500-4000) MKL's two threads barely beat one on a
    quiet machine and are many times slower when the cores are shared; one thread also
    makes the result independent of the thread count. No effect on other devices.
    """
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' = bfloat16 on a GPU, float32 on the CPU (pruning statistics stay float32)."""
    if name == "auto":
        return torch.bfloat16 if device.type in ("cuda", "mps") else torch.float32
    if name not in DTYPES:
        raise ConfigError(f"unknown dtype {name!r}; use auto, {', '.join(sorted(DTYPES))}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe_device(device: torch.device) -> dict[str, object]:
    """Human facts about a device for the app and the run record."""
    info: dict[str, object] = {"device": str(device), "type": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, memory_gb=round(props.total_memory / 2**30, 1))
    elif device.type == "cpu":
        info.update(name="CPU", threads=torch.get_num_threads())
    else:
        info.update(name=device.type.upper())
    return info


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matrix products run on units made for them: a CUDA GPU that supports
    bfloat16, or a CPU with AVX512_BF16 or AMX. Elsewhere they are emulated, and slower than
    float32 (4x on the bench's AVX2 path: docs/benchmarks.md)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        cpu = torch.cpu
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(getattr(cpu, name, lambda: False)() for name in probes)
    return True
