"""``--stream auto`` (core.planning.fit): the path is chosen by the figures before any weight
is read; the free-memory figure is injected, never allocated. In-memory runs keep their ids."""

from __future__ import annotations

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.models.load import build_tiny_model, byte_tokenizer
from core.planning import fit
from core.requests import request
from core.settings.config import CalibConfig, DataSpec, EvalConfig, ModelSpec

MiB = 2**20


# ---- the rule --------------------------------------------------------------------------------
def test_auto_keeps_a_model_that_fits_in_memory() -> None:
    f = fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=2000 * MiB)
    assert f.stream is False


def test_auto_streams_a_model_that_fits_only_streamed() -> None:
    f = fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=600 * MiB)
    assert f.stream is True and f.streamed == 450 * MiB


def test_auto_refuses_when_neither_fits() -> None:
    assert fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=400 * MiB).stream is None
    # a model that cannot be streamed and does not fit in memory
    f = fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, 600 * MiB, why_not_stream="tiny")
    assert f.stream is None


def test_forced_paths_are_checked_too() -> None:
    assert fit.choose(True, 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=2000 * MiB).stream is True
    assert fit.choose(True, 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=400 * MiB).stream is None
    assert fit.choose(False, 1000 * MiB, 200 * MiB, 50 * MiB, free_ram=600 * MiB).stream is None
    assert fit.choose(False, 1000 * MiB, 200 * MiB, 50 * MiB, 2000 * MiB).stream is False
    # forced on a model that cannot stream: left to the plan's own refusal (check_stream)
    f = fit.choose(True, 1000 * MiB, 200 * MiB, 50 * MiB, 2000 * MiB, why_not_stream="tiny")
    assert f.stream is True


def test_on_a_gpu_the_device_must_hold_the_path() -> None:
    # plenty of RAM, a device too small for the whole model but not for two units
    f = fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, 4000 * MiB, free_device=800 * MiB)
    assert f.stream is True
    f = fit.choose("auto", 1000 * MiB, 200 * MiB, 50 * MiB, 4000 * MiB, free_device=2000 * MiB)
    assert f.stream is False


def test_model_bytes_of_the_tiny_llama_match_its_parameters() -> None:
    spec = ModelSpec("tiny-llama", "cpu", "float32")
    weights, unit = fit.model_bytes(spec)
    model = build_tiny_model("tiny-llama")
    n = sum(p.numel() for p in model.parameters())  # tied or not, each tensor once
    norms = sum(p.numel() for name, p in model.named_parameters() if "norm" in name)
    assert weights == (n - norms) * 4  # the rule counts the matrices, not the norm vectors
    layer = sum(p.numel() for name, p in model.named_parameters() if ".layers.0." in name)
    embed = model.get_input_embeddings().weight.numel()
    assert (
        unit
        == max(
            layer
            - sum(
                p.numel()
                for name, p in model.named_parameters()
                if ".layers.0." in name and "norm" in name
            ),
            embed,
        )
        * 4
    )


# ---- through the plan ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit") / "tiny"
    build_tiny_model("tiny-llama").eval().save_pretrained(out)
    byte_tokenizer().save_pretrained(out)
    return out


def _values(folder, **kw):
    return {
        "model": str(folder),
        "device": "cpu",
        "dtype": "float32",
        "method": "wanda",
        "calib": "pydoc",
        "nsamples": 4,
        "seqlen": 32,
        "eval": "pydoc",
        "max_windows": 4,
        **kw,
    }


def _free(monkeypatch, mib: float) -> None:
    monkeypatch.setattr(fit, "free_ram_bytes", lambda: int(mib * MiB) + fit.RESERVE)


def _figures(folder) -> fit.Fit:
    spec = ModelSpec(str(folder), "cpu", "float32", stream="auto")
    calib = CalibConfig(DataSpec("pydoc", "train"), 4, 32)
    return fit.plan_fit(spec, calib, EvalConfig(DataSpec("pydoc"), 32, 4), free_ram=1 << 50)


def test_plan_chooses_by_the_free_memory(folder, monkeypatch) -> None:
    figures = _figures(folder)
    assert figures.streamed < figures.in_memory
    _free(monkeypatch, 1 << 20)  # plenty: in memory, with the id of an in-memory run
    roomy = request.plan_request("prune", _values(folder))
    off = request.plan_request("prune", _values(folder, stream="off"))
    assert roomy.model.stream is False and roomy.run_id == off.run_id
    assert "stream" not in roomy.to_dict()["model"]
    between = (figures.streamed + figures.in_memory) / 2 / MiB
    _free(monkeypatch, between)  # the weights do not fit, two units do: streamed
    tight = request.plan_request("prune", _values(folder))
    on = request.plan_request("prune", _values(folder, stream="on"))
    assert tight.model.stream is True and tight.run_id == on.run_id
    _free(monkeypatch, figures.streamed / MiB / 2)  # neither: refused with the figures
    with pytest.raises(ConfigError, match="fits neither in memory nor streamed") as err:
        request.plan_request("prune", _values(folder))
    assert "weights" in str(err.value) and "MiB of RAM free" in str(err.value)


def test_cli_refuses_before_loading_and_stores_nothing(folder, monkeypatch, tmp_path, capsys):
    _free(monkeypatch, _figures(folder).streamed / MiB / 2)
    store = tmp_path / "store"
    argv = ["prune", *[f"--{k.replace('_', '-')}={v}" for k, v in _values(folder).items()]]
    assert main([*argv, "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "fits neither" in err
    assert not (store / "runs").exists() or not list((store / "runs").iterdir())


def test_stream_flags(folder) -> None:
    from core.cli.main import build_parser, field_values

    def parsed(*flags):
        return field_values(build_parser().parse_args(["prune", *flags]))["stream"]

    assert parsed() == "auto" and parsed("--stream") == "on" and parsed("--no-stream") == "off"
    assert parsed("--stream", "off") == "off"
    assert (
        ModelSpec("m", stream="on").stream is True and ModelSpec("m", stream="off").stream is False
    )
    with pytest.raises(ConfigError, match="auto, on or off"):
        ModelSpec("m", stream="maybe")


def test_prune_form_says_which_path(store_root, monkeypatch) -> None:
    """The Prune page's form shows the planned path with its figures."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=60)
    at.run()
    at.switch_page("pages/prune.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.caption if "Runs " in c.value]
    assert len(said) == 1 and "**in memory**" in said[0] and "MiB of RAM free" in said[0]


# ---- free memory under a limit (core.machine.process_memory) ------------------------------------
def test_cgroup_limits_are_read_v1_and_v2(tmp_path) -> None:
    from core.machine.process_memory import _cgroup_free

    v1 = tmp_path / "v1"
    grp = v1 / "memory" / "job"
    grp.mkdir(parents=True)
    (grp / "memory.stat").write_text(
        f"total_inactive_file {100 * MiB}\nhierarchical_memory_limit {1000 * MiB}\n"
    )
    (grp / "memory.usage_in_bytes").write_text(str(600 * MiB))
    proc = tmp_path / "cgroup1"
    proc.write_text("5:cpu:/job\n4:memory:/job\n")
    assert _cgroup_free(v1, proc) == 500 * MiB
    (grp / "memory.stat").write_text(f"hierarchical_memory_limit {2**63 - 4096}\n")
    assert _cgroup_free(v1, proc) is None  # no limit set

    v2 = tmp_path / "v2"
    (v2 / "a" / "b").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "a" / "b" / "memory.max").write_text("max\n")
    (v2 / "a" / "b" / "memory.current").write_text(str(100 * MiB))
    (v2 / "a" / "memory.max").write_text(str(800 * MiB))
    (v2 / "a" / "memory.current").write_text(str(500 * MiB))
    (v2 / "a" / "memory.stat").write_text(f"anon 1\ninactive_file {50 * MiB}\n")
    proc2 = tmp_path / "cgroup2"
    proc2.write_text("0::/a/b\n")
    assert _cgroup_free(v2, proc2) == 350 * MiB  # the parent's limit binds
