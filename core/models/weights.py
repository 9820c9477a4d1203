"""Safetensors weights read lazily, one module at a time, and written shard by shard.

``LazyWeights`` opens a folder's ``model.safetensors`` or sharded
``model.safetensors.index.json`` and reads named tensors on demand through ``safe_open``
(memory-mapped): each read opens the file, copies the tensors out and closes it, so no
mapping keeps pages of the whole model resident. ``ShardWriter`` collects the tensors of
changed modules and writes a shard whenever ``shard_bytes`` are buffered; ``finish`` copies
the tensors nobody changed straight from the source, writes the index and moves the folder
into place, so a failed run leaves no half-written model behind.

Both directions move bytes between files and tensors without a second copy: a read lands
in the tensor's own memory (``read_tensors``), a shard is written from each tensor's memory
(``write_shard``; ``safetensors.torch.save_file`` would first copy every tensor to a
``bytes`` object), and a tensor kept from the source is copied file to file
(``os.copy_file_range``) without ever becoming a tensor. A streamed run then holds at most
the unit in use and the one being written, whatever the shard layout of its source.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from core.errors import ModelLoadError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SHARD_BYTES = 32 * 2**20  # a shard is written once this much is buffered (~ a layer)


def weight_map(folder: str | Path) -> dict[str, str]:
    """tensor name -> file name of a safetensors model folder (single file or sharded)."""
    folder = Path(folder)
    index = folder / INDEX_FILE
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    single = folder / SINGLE_FILE
    if single.is_file():
        with safe_open(single, framework="pt") as f:
            return dict.fromkeys(f.keys(), SINGLE_FILE)
    raise ModelLoadError(
        f"{folder} has no {SINGLE_FILE} or {INDEX_FILE}; streaming needs safetensors"
    )


class LazyWeights:
    """Named tensors of a safetensors folder, read on demand."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.files = weight_map(self.folder)

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def keys(self) -> list[str]:
        return list(self.files)

    def read(self, keys: Iterable[str]) -> dict[str, torch.Tensor]:
        """The tensors ``keys`` as fresh CPU tensors, read straight into their own memory."""
        by_file: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            by_file[self.files[key]].append(key)
        out = {}
        for file, names in by_file.items():
            out.update(read_tensors(self.folder / file, names))
        return out

    def chunks(self, key: str, chunk_bytes: int = 16 * 2**20) -> Iterator[torch.Tensor]:
        """The tensor ``key`` flattened, as consecutive fresh CPU pieces of at most
        ``chunk_bytes`` (one element at least): a pass over a 192 MiB head (a count, a
        checksum) then holds 16 MiB of it, not all of it."""
        path = self.folder / self.files[key]
        header, base = read_header(path)
        info = header[key]
        dtype = _TORCH_DTYPES[info["dtype"]]
        n = math.prod(info["shape"])
        step = max(1, chunk_bytes // _DTYPE_BYTES[info["dtype"]])
        with open(path, "rb", buffering=0) as f:
            for first in range(0, n, step):
                t = torch.empty(min(step, n - first), dtype=dtype)
                f.seek(base + info["data_offsets"][0] + first * t.element_size())
                _read_into(f, _bytes_of(t), path, key)
                yield t

    def nbytes(self) -> int:
        """Bytes of all tensors (from the file headers; no tensor is read)."""
        return sum(tensor_bytes(self.folder / file) for file in set(self.files.values()))


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
_TORCH_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


_ST_DTYPES = {v: k for k, v in _TORCH_DTYPES.items()}


def read_header(path: str | Path) -> tuple[dict, int]:
    """(the JSON header of a safetensors file, the offset its data starts at). The format:
    an 8-byte little-endian header length, the JSON header (dtype, shape, data_offsets per
    tensor), then the data."""
    with open(path, "rb", buffering=0) as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), 8 + n


def read_tensors(path: str | Path, keys: Iterable[str]) -> dict[str, torch.Tensor]:
    """Named tensors of one safetensors file read with plain file reads into fresh CPU
    tensors. A memory-mapped read (``safe_open``) would keep the file's pages resident
    beside the copy until the file is closed: twice a 32k-vocabulary embedding's bytes at
    the peak."""
    header, base = read_header(path)
    with open(path, "rb", buffering=0) as f:
        out = {}
        for key in keys:
            info = header[key]
            start, end = info["data_offsets"]
            t = torch.empty(info["shape"], dtype=_TORCH_DTYPES[info["dtype"]])
            buf = _bytes_of(t)
            if len(buf) != end - start:
                raise ModelLoadError(f"{path}: {key} has {end - start} bytes, expected {len(buf)}")
            f.seek(base + start)
            _read_into(f, buf, path, key)
            out[key] = t
    return out


def _read_into(f, buf: memoryview, path: str | Path, key: str) -> None:
    """Fill ``buf`` from the raw file ``f`` at its position (readinto may return less)."""
    done = 0
    while done < len(buf):
        got = f.readinto(buf[done:])
        if not got:
            raise ModelLoadError(f"{path} ends inside tensor {key}")
        done += got


def _bytes_of(t: torch.Tensor) -> memoryview:
    """The memory of a contiguous CPU tensor as writable bytes (no copy)."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")


@dataclass(frozen=True)
class Span:
    """A tensor left where it is in a source file: copied file to file when written."""

    path: Path
    start: int  # absolute offset of its first byte in ``path``
    nbytes: int
    dtype: str  # safetensors' name (F32, BF16, ...)
    shape: tuple[int, ...]


def _write_all(dst, data) -> None:
    """Write all of ``data`` to the raw file ``dst`` (one write(2) stops at ~2 GiB)."""
    view, done = memoryview(data).cast("B"), 0
    while done < len(view):
        done += dst.write(view[done:])


def _copy_range(src, dst, start: int, nbytes: int) -> None:
    """Copy ``nbytes`` at ``start`` of the open file ``src`` to the end of the raw file
    ``dst`` through the kernel (copy_file_range), or through an 8 MiB buffer where that is
    not available (another filesystem, an older kernel)."""
    done = 0
    try:
        while done < nbytes:
            got = os.copy_file_range(src.fileno(), dst.fileno(), nbytes - done, start + done)
            if got == 0:
                break
            done += got
    except (AttributeError, OSError):
        pass
    src.seek(start + done)
    while done < nbytes:
        chunk = src.read(min(8 * 2**20, nbytes - done))
        if not chunk:
            raise ModelLoadError(f"{src.name} ends inside a tensor")
        _write_all(dst, chunk)
        done += len(chunk)


def write_shard(path: str | Path, items: dict[str, torch.Tensor | Span]) -> int:
    """Write a safetensors file from tensors (their own memory, no copy) and spans of
    source files (copied file to file). The header is padded to 8 bytes, as safetensors
    writes it. Returns the data bytes."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key, item in items.items():
        if isinstance(item, Span):
            dtype, shape, nbytes = item.dtype, list(item.shape), item.nbytes
        else:
            dtype, shape = _ST_DTYPES[item.dtype], list(item.shape)
            nbytes = item.numel() * item.element_size()
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    sources: dict[Path, object] = {}
    try:
        with open(path, "wb", buffering=0) as f:
            _write_all(f, len(raw).to_bytes(8, "little") + raw)
            for item in items.values():
                if isinstance(item, Span):
                    if item.path not in sources:
                        sources[item.path] = open(item.path, "rb")  # noqa: SIM115
                    _copy_range(sources[item.path], f, item.start, item.nbytes)
                else:
                    t = item.detach().to("cpu").contiguous()
                    if t.numel():
                        _write_all(f, _bytes_of(t))
    finally:
        for fh in sources.values():
            fh.close()
    return offset


def tensor_bytes(path: str | Path) -> int:
    """Bytes of the tensors in one safetensors file, from its header."""
    total = 0
    with safe_open(path, framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 (a safe_open handle, not a dict)
            sl = f.get_slice(key)
            n = 1
            for dim in sl.get_shape():
                n *= dim
            total += n * _DTYPE_BYTES[sl.get_dtype()]
    return total


class ShardWriter:
    """Write a model's tensors into ``folder`` shard by shard (``model-XXXXX.safetensors``
    plus ``model.safetensors.index.json``), through a hidden temporary folder."""

    def __init__(self, folder: str | Path, shard_bytes: int = SHARD_BYTES) -> None:
        self.folder = Path(folder).expanduser()
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.folder.parent / f".{self.folder.name}.partial"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()
        self.shard_bytes = shard_bytes
        self.buffer: dict[str, torch.Tensor | Span] = {}
        self.buffered = 0
        self.files: dict[str, str] = {}
        self.handled: set[str] = set()  # module names whose tensors are all written
        self.n_shards = 0
        self.total = 0

    def add(self, name: str, state: dict[str, torch.Tensor]) -> None:
        """A changed module's full state (keys already prefixed); the module's name marks
        every source tensor under it as replaced."""
        self.handled.add(name)
        for key, t in state.items():
            t = t.detach().to("cpu").contiguous()
            self.buffer[key] = t
            self.buffered += t.numel() * t.element_size()
        if self.buffered >= self.shard_bytes:
            self.flush()

    def replaced(self, key: str) -> bool:
        return (
            key in self.files
            or key in self.buffer
            or any(name == "" or key.startswith(name + ".") for name in self.handled)
        )

    def flush(self) -> None:
        if not self.buffer:
            return
        self.n_shards += 1
        file = f"model-{self.n_shards:05d}.safetensors"
        buffer, self.buffer = self.buffer, {}
        self.total += write_shard(self.tmp / file, buffer)
        self.files.update(dict.fromkeys(buffer, file))
        self.buffered = 0

    def finish(
        self, source: LazyWeights | None, fill: Callable[[Path], None] | None = None
    ) -> Path:
        """Copy the source tensors no module replaced, write the index, let ``fill`` add
        its files (config, tokenizer) to the temporary folder, then move the folder into
        place (replacing an old one)."""
        if source is not None:
            self._copy_unreplaced(source)
        self.flush()
        index = {
            "metadata": {"total_size": self.total},
            "weight_map": dict(sorted(self.files.items())),
        }
        (self.tmp / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        if fill is not None:
            fill(self.tmp)
        if self.folder.exists():
            shutil.rmtree(self.folder)
        self.tmp.rename(self.folder)
        return self.folder

    def _copy_unreplaced(self, source: LazyWeights) -> None:
        """Source files none of whose tensors were replaced are copied whole; the others'
        unreplaced tensors are copied as byte ranges. No tensor passes through memory."""
        by_file: dict[str, list[str]] = defaultdict(list)
        for key, file in source.files.items():
            by_file[file].append(key)
        for file, keys in sorted(by_file.items()):
            kept = [k for k in keys if not self.replaced(k)]
            if kept and len(kept) == len(keys):
                self.flush()
                self.n_shards += 1
                name = f"model-{self.n_shards:05d}.safetensors"
                shutil.copyfile(source.folder / file, self.tmp / name)
                self.files.update(dict.fromkeys(keys, name))
                self.total += tensor_bytes(source.folder / file)
                continue
            if not kept:
                continue
            header, base = read_header(source.folder / file)
            for key in kept:
                info = header[key]
                start, end = info["data_offsets"]
                span = Span(
                    source.folder / file,
                    base + start,
                    end - start,
                    info["dtype"],
                    tuple(info["shape"]),
                )
                self.buffer[key] = span
                self.buffered += span.nbytes
                if self.buffered >= self.shard_bytes:
                    self.flush()

    def abort(self) -> None:
        """Drop everything written so far."""
        self.buffer = {}
        shutil.rmtree(self.tmp, ignore_errors=True)
