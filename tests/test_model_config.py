"""Model configs are read once per process, and a packaged model's GGUF header at most once
per cache: no plan, page or test parses it again once a summary or a converted copy exists."""

from __future__ import annotations

import os

import pytest
import transformers

from core.models import gguf, load
from core.models.catalog import EMBEDDED_MODEL, GGUF_MODELS
from core.models.load import model_config, tiny_config
from core.requests.request import plan_request

OTHER = next(name for name in GGUF_MODELS if name != EMBEDDED_MODEL)


@pytest.fixture
def reads(monkeypatch) -> list[dict]:
    """Every AutoConfig.from_pretrained call as {path, gguf_file}, still reading for real."""
    calls: list[dict] = []
    real = transformers.AutoConfig.from_pretrained

    def spy(path, *args, **kwargs):
        calls.append({"path": str(path), "gguf_file": kwargs.get("gguf_file")})
        return real(path, *args, **kwargs)

    monkeypatch.setattr(gguf.AutoConfig, "from_pretrained", spy)
    monkeypatch.setattr(load.AutoConfig, "from_pretrained", spy)
    load._read_config.cache_clear()
    yield calls
    load._read_config.cache_clear()


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRUNESCOPE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_folder_config_is_read_once_and_again_when_its_file_changes(tmp_path, reads) -> None:
    folder = tmp_path / "model"
    tiny_config("tiny-llama").save_pretrained(folder)
    first = model_config(str(folder))
    first.num_hidden_layers = 99  # a caller's change stays its own
    second = model_config(str(folder))
    assert len(reads) == 1 and second.num_hidden_layers != 99
    tiny_config("tiny-llama", num_hidden_layers=3).save_pretrained(folder)
    stamp = os.stat(folder / "config.json").st_mtime_ns + 10**9  # a later file, as an edit makes
    os.utime(folder / "config.json", ns=(stamp, stamp))
    assert model_config(str(folder)).num_hidden_layers == 3
    assert len(reads) == 2


def test_a_packaged_model_reads_its_summary_and_never_its_gguf(empty_cache, reads) -> None:
    # A header summary in the cache (as `core prepare` leaves it) stands for the GGUF header.
    summary = gguf.header_summary(EMBEDDED_MODEL)
    summary.parent.mkdir(parents=True)
    tiny_config("tiny-llama", hidden_size=96).to_json_file(summary)
    assert model_config(EMBEDDED_MODEL).hidden_size == 96
    values = {"model": EMBEDDED_MODEL, "method": "wanda", "sparsity": 0.5, "device": "cpu"}
    for _ in range(3):  # planning as a page rerun would: the estimate, the caption, the launch
        plan_request("prune", values)
    assert len(reads) == 1 and reads[0]["gguf_file"] is None


def test_a_converted_copy_wins_over_the_summary(empty_cache, reads) -> None:
    summary = gguf.header_summary(EMBEDDED_MODEL)
    summary.parent.mkdir(parents=True)
    tiny_config("tiny-llama", hidden_size=96).to_json_file(summary)
    assert model_config(EMBEDDED_MODEL).hidden_size == 96
    tiny_config("tiny-llama", hidden_size=64).save_pretrained(gguf.converted_dir(EMBEDDED_MODEL))
    assert model_config(EMBEDDED_MODEL).hidden_size == 64  # keyed by the file it came from
    assert all(r["gguf_file"] is None for r in reads)


def test_the_header_is_parsed_once_and_kept(empty_cache, monkeypatch) -> None:
    parsed: list[str] = []

    def header(path, gguf_file=None, **kwargs):
        assert gguf_file is not None, "only the header read reaches this fake"
        parsed.append(gguf_file)
        return tiny_config("tiny-llama", hidden_size=80)

    real = gguf.AutoConfig.from_pretrained
    monkeypatch.setattr(
        gguf.AutoConfig,
        "from_pretrained",
        lambda path, *a, **kw: header(path, **kw) if kw.get("gguf_file") else real(path, *a, **kw),
    )
    assert gguf.gguf_config(EMBEDDED_MODEL).hidden_size == 80
    assert gguf.gguf_config(EMBEDDED_MODEL).hidden_size == 80  # from the summary
    assert len(parsed) == 1 and gguf.header_summary(EMBEDDED_MODEL).is_file()
    assert not list(gguf.header_summary(EMBEDDED_MODEL).parent.glob(".summary-*"))


def test_prepare_converts_the_default_and_summarises_the_others(empty_cache, monkeypatch) -> None:
    done: list[tuple[str, str]] = []

    def convert(name, target):
        done.append(("convert", name))
        tiny_config("tiny-llama").save_pretrained(target)

    def summarise(name):
        done.append(("header", name))
        tiny_config("tiny-llama").to_json_file(gguf.header_summary(name))

    monkeypatch.setattr(gguf, "convert_gguf", convert)
    monkeypatch.setattr(gguf, "gguf_config", summarise)
    gguf.header_summary(OTHER).parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    gguf.prepare(EMBEDDED_MODEL, lines.append)
    assert done == [("convert", EMBEDDED_MODEL), ("header", OTHER)]
    assert any("converting" in line and EMBEDDED_MODEL in line for line in lines)
    assert sum("done in" in line for line in lines) == 2
    lines.clear()
    gguf.prepare(EMBEDDED_MODEL, lines.append)  # all done: nothing to do, nothing said
    assert lines == [] and len(done) == 2
