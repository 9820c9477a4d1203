"""Every maintained bench/ script, smoke-run on tiny-llama in this process (pydoc corpora, a few
tokens, a temp store), and the rule that keeps bench/ true.

A script is a module of bench/ with a ``__main__`` block: docs/benchmarks.md cites it (a
section under "The maintained scripts") and this file smoke-runs it (``test_smoke_<name>``).
Any other module of bench/ is a helper that a script or a test imports. Scripts are called
through their ``main(argv)`` with bench/ on ``sys.path`` (how they import their helpers), so
no process start is paid; each test asserts on what the script prints or writes.
"""

import ast
import gc
import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
MAX_SCRIPTS = 9  # eight measurements, and llm-compressor's half of vs_llmcompressor
sys.path.insert(0, str(BENCH))

TINY = ("--model", "tiny-llama")


@pytest.fixture(scope="module", autouse=True)
def frozen_heap():
    """Every run collects garbage at its phases (core.machine.process_memory.release_freed):
    in a test process that walks the whole import-time heap (~0.2 s a call here). Frozen, as
    pages/serve.py freezes the app's, the collections walk only what the scripts make."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _has_main_block(path: Path) -> bool:
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
        for node in ast.parse(path.read_text()).body
    )


def _scripts(bench: Path = BENCH) -> set[str]:
    return {p.stem for p in bench.glob("*.py") if _has_main_block(p)}


def _untrue(bench: Path, doc: str, smoked: set[str]) -> dict[str, set[str]]:
    """What breaks the rule: scripts without a section under "The maintained scripts",
    sections without a script, scripts without a ``test_smoke_<name>``."""
    section = doc.split("## The maintained scripts", 1)[-1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^### `bench/(\w+)\.py`", section, re.M))
    scripts = _scripts(bench)
    return {
        "not listed": scripts - listed,
        "listed, not in bench/": listed - scripts,
        "not smoke-run": {s for s in scripts if f"test_smoke_{s}" not in smoked},
    }


def test_every_script_is_cited_and_smoke_run():
    smoked = {name for name in globals() if name.startswith("test_smoke_")}
    untrue = _untrue(BENCH, BENCHMARKS.read_text(), smoked)
    assert {rule: names for rule, names in untrue.items() if names} == {}
    assert len(_scripts()) <= MAX_SCRIPTS


def test_the_rule_catches_a_new_script_and_a_stale_section(tmp_path):
    (tmp_path / "new.py").write_text(
        'def main():\n    pass\n\nif __name__ == "__main__":\n    main()\n'
    )
    (tmp_path / "helper.py").write_text("def f():\n    pass\n")  # no __main__: not a script
    doc = "## The maintained scripts\n\n### `bench/gone.py`\n\n## Next\n\n### `bench/new.py`\n"
    assert _untrue(tmp_path, doc, {"test_smoke_gone"}) == {
        "not listed": {"new"},  # its heading sits outside the section
        "listed, not in bench/": {"gone"},
        "not smoke-run": {"new"},
    }


def test_every_helper_is_imported_by_a_script_or_a_test():
    helpers = {p.stem for p in BENCH.glob("*.py")} - _scripts()
    users = "\n".join(p.read_text() for p in [*BENCH.glob("*.py"), *ROOT.glob("tests/*.py")])
    unused = {
        h for h in helpers if not re.search(rf"^\s*(from {h} import|import {h}\b)", users, re.M)
    }
    assert helpers and unused == set()


def test_smoke_calib_sensitivity(tmp_path, capsys):
    import calib_sensitivity

    calib_sensitivity.main_bench([
        *TINY, "--calib", "pydoc", "--other", "pydoc", "--eval", "pydoc", "--seeds", "1",
        "--other-seeds", "2", "--methods", "magnitude", "--patterns", "unstructured",
        "--nsamples", "2", "--seqlen", "32", "--max-windows", "2", "--store", str(tmp_path),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("| method | pattern | draws | Jaccard (lowest draw) |")
    rows = [line for line in out.splitlines() if line.startswith("| magnitude | unstructured |")]
    assert [r.split(" | ")[2] for r in rows] == ["pydoc seeds 1", "pydoc seeds 2"]
    # magnitude's masks do not read the calibration data: every draw keeps the same weights,
    # where two random masks at 50 % share a third of their kept entries
    assert all(" | 1.000 (1.000) | 0.333 | 1.000 | 0.500 | " in r for r in rows)


def test_smoke_dimension_or_params(tmp_path, capsys):
    import dimension_or_params

    argv = [
        *TINY, "--corpus", "pydoc", "--nsamples", "2", "--seqlen", "32", "--max-windows", "2",
        "--methods", "shortgpt,slicegpt", "--budgets", "0.25,0.5", "--seeds", "0",
        "--store", str(tmp_path),
    ]  # fmt: skip
    dimension_or_params.main(argv)
    out = capsys.readouterr().out
    assert "5 runs computed, 0 reused" in out  # 2 methods x 2 budgets, and the dense run
    points = re.findall(r"^(shortgpt|slicegpt) +(0\.25|0\.5) ", out, re.M)
    assert sorted(points) == sorted(
        (m, b) for m in ("shortgpt", "slicegpt") for b in ("0.25", "0.5")
    )
    left_out = out.split("left out", 1)[1]
    assert re.search(r"^shortgpt ", left_out, re.M) and re.search(r"^slicegpt ", left_out, re.M)
    assert "\nverdict: " in out
    dimension_or_params.main([*argv, "--report-only"])  # read back from the store alone
    again = capsys.readouterr().out
    assert "runs computed" not in again and again.endswith(out.split(" reused\n", 1)[1])


def test_smoke_attention_gd_ablation(tmp_path, monkeypatch):
    """``--smoke``: both families, two seeds; the readings the components need (and Wanda),
    resumable from its --out file."""
    import attention_gd_ablation as bench

    out = tmp_path / "nll.json"
    argv = ["--smoke", "--out", str(out), "--readings", "wanda", "wanda + swap",
            "adam, no swap", "default"]  # fmt: skip
    text = bench.main(argv)
    assert "**70% of W_Q/W_K only**" in text and "**50% of every linear" in text
    assert "| wanda | " in text and "+0.0000 [+0.0000, +0.0000]" in text  # Wanda against itself
    assert text.count("| swap search (− adam, no swap) |") == 2
    assert text.count("| descent (Adam) (− wanda + swap) |") == 2
    assert out.read_text().count("|default|") == 4  # 2 settings x 2 seeds
    assert bench.main(argv) == text  # resumed from --out: nothing measured again


def test_smoke_attention_gd_headroom(tmp_path, capsys, monkeypatch):
    """``--smoke``: every row at both sizes, the attribution and the default's choice; the
    JSON it writes is what the pages' reader (core.methods.attention_gd.headroom) reads."""
    import attention_gd_headroom as bench

    from core.methods.attention_gd import headroom as hr

    monkeypatch.setattr(hr, "HERE", tmp_path)
    hr.load.cache_clear()
    bench.main(["--smoke", "--headroom-json", str(hr.path_for("tiny-llama"))])
    out = capsys.readouterr().out
    for tokens in (32, 64):  # 2 and 4 windows of 16 tokens
        for row in bench.ROWS:
            assert re.search(rf"^ +{tokens}  {re.escape(row)} ", out, re.M), (tokens, row)
    assert (
        "Where attention-gd's descent loses its gain over Wanda, by calibration tokens: 32: " in out
    )
    assert "default (core/analysis/gd_choice.py): " in out
    data = json.loads(hr.path_for("tiny-llama").read_text())
    assert [s["tokens"] for s in data["sizes"]] == [32, 64]
    assert set(data["sizes"][0]["rows"]) == set(bench.ROWS)
    assert hr.standing("tiny-llama", 64).startswith("On tiny-llama")
    assert "64 calibration tokens" in hr.standing("tiny-llama", 64)
    hr.load.cache_clear()


@pytest.fixture(scope="module")
def tiny_protocol(tmp_path_factory):
    """tiny-llama's calibration tensor and evaluation windows (pydoc), saved as the bench's
    driver saves them, and the dense model as a safetensors folder (llm-compressor's input)."""
    from core.data import calibration_windows, eval_windows, load_corpus
    from core.models.load import load_model
    from core.settings.config import DataSpec

    work = tmp_path_factory.mktemp("vs-llmc")
    lm = load_model("tiny-llama")
    calib = calibration_windows(lm.tokenizer, load_corpus(DataSpec("pydoc", "train")), 2, 32, 0)
    windows = eval_windows(lm.tokenizer, load_corpus(DataSpec("pydoc", "test")), 32, 2)
    torch.save(calib, work / "calib.pt")
    torch.save(windows, work / "windows.pt")
    lm.model.save_pretrained(work / "dense")
    lm.tokenizer.save_pretrained(work / "dense")
    return work


def test_smoke_vs_llmcompressor(tiny_protocol):
    """PruneScope's side (the ps worker: prune, time, masks, score) and the scorer of
    llm-compressor's output (the eval worker), each as the driver calls it."""
    import vs_llmcompressor as bench

    work = tiny_protocol
    common = [*TINY, "--device", "cpu", "--windows", str(work / "windows.pt")]
    bench.main([
        "--worker", "ps", "--config", "wanda-50%", *common, "--calib", str(work / "calib.pt"),
        "--json", str(work / "ps.json"), "--masks", str(work / "m.pt"),
    ])  # fmt: skip
    ps = json.loads((work / "ps.json").read_text())
    assert ps["ppl_lo"] <= ps["ppl"] <= ps["ppl_hi"] and ps["seconds"] > 0
    assert bench.mask_agreement(work / "m.pt", work / "m.pt") == "100.0000% (0 differ)"
    masks = torch.load(work / "m.pt")
    zeros = sum(
        int(torch.from_numpy(__import__("numpy").unpackbits(m.numpy())).sum())
        for m in masks.values()
    )
    bits = sum(m.numel() * 8 for m in masks.values())
    assert abs(zeros / bits - 0.5) < 0.01  # Wanda 50 % on every decoder linear
    bench.main(["--worker", "eval", "--model-dir", str(work / "dense"), *common,
                "--json", str(work / "e.json")])  # fmt: skip
    dense = json.loads((work / "e.json").read_text())
    assert dense["ppl"] < ps["ppl"]  # the dense model, scored by the same evaluator
    nudged = bench.nudged_copy(work / "dense", work, seed=1)
    from safetensors.torch import load_file

    (name,) = [
        k for k in load_file(nudged / "model.safetensors") if k.endswith("embed_tokens.weight")
    ]
    a, b = (load_file(d / "model.safetensors")[name] for d in (work / "dense", nudged))
    moved = a != b
    assert 0.4 < moved.float().mean() < 0.6  # a random half, each by one ulp
    assert torch.equal(torch.nextafter(a[moved], b[moved]), b[moved])


def test_smoke_llmc_worker(tmp_path):
    """The worker runs where llm-compressor is installed (not here): the command the driver
    builds for each configuration parses to that configuration's method and mask structure."""
    import llmc_worker
    import vs_llmcompressor as bench

    for name, (method, _, structure) in bench.CONFIGS.items():
        cmd = bench.llmc_command("py", tmp_path / "m", tmp_path / "c.pt", name, tmp_path / "o",
                                 tmp_path / "o.json")  # fmt: skip
        assert cmd[1] == str(BENCH / "llmc_worker.py")
        args = llmc_worker.parse(cmd[2:])
        assert (args.method, args.pattern, args.sparsity) == (method, structure, 0.5)
    with pytest.raises(SystemExit):
        llmc_worker.parse(["--method", "wanda"])  # the model, calibration and outputs are required


def test_smoke_gpu_check(tmp_path, capsys):
    """The CPU-runnable part: the methods section on CPU twice and the streamed model, small."""
    import gpu_check

    out_json = tmp_path / "gpu_check.json"
    argv = [*TINY, "--device", "cpu", "--small", "--skip", "cuda_tests", "--methods",
            "magnitude", "--out", str(out_json)]  # fmt: skip
    assert gpu_check.main(gpu_check.parse(argv)) == 0
    out = capsys.readouterr().out
    assert "== methods ==" in out and "== streamed_1b ==" in out and "== cuda_tests ==" not in out
    assert re.search(r"^magnitude +(\d+\.\d+) +\1 +\+0\.00%", out, re.M)  # CPU against itself
    assert "streamed wanda:" in out and "streamed eval :" in out and "\nPASS in " in out
    report = json.loads(out_json.read_text())
    assert report["ok"] and [r["method"] for r in report["methods"]["rows"]] == ["magnitude"]


def test_smoke_big_model(tmp_path, capsys):
    """Build, streamed prune and evaluation, reload, on a two-layer random Llama (every phase in
    this process): the streamed perplexity is the reloaded one."""
    import big_model

    argv = ["--workdir", str(tmp_path / "big"), "--layers", "2", "--hidden", "64",
            "--intermediate", "128", "--vocab", "256", "--nsamples", "2", "--calib-seqlen", "16",
            "--windows", "2", "--seqlen", "16", "--methods", "wanda", "--in-process"]  # fmt: skip
    big_model.main(big_model.parse(argv))
    out = capsys.readouterr().out
    assert re.search(r"^method +weight bytes +prune peak RSS +eval peak RSS", out, re.M)
    assert re.search(r"^dense \(eval\) .* nan +-$", out, re.M)
    assert re.search(r"^wanda 50% .* yes$", out, re.M)
    assert not (tmp_path / "big").exists()  # removed without --keep


def test_smoke_app_latency(tmp_path, capsys):
    """Without a browser: the seed run the heatmap needs (once), a store filled to N runs by
    copies, and the table over every page."""
    import app_latency
    import bulk_store

    from core.store.run_store import RunStore

    app_latency.ensure_prune_run(tmp_path)
    app_latency.ensure_prune_run(tmp_path)  # present: nothing run again
    store = RunStore(tmp_path)
    assert len(store.list(kind="prune", status="done")) == 1
    before = len(store.list())
    assert bulk_store.fill(store, before + 2) == 2 and len(store.list(status="done")) == before + 2
    copies = [r for r in store.list() if "bench_copy" in r.config.get("extra", {})]
    assert len(copies) == 2
    capsys.readouterr()
    t = app_latency.Timing(total=0.5, ask=0.1, run=0.3, draw=0.1, charts=2)
    names = [*app_latency.PAGES, app_latency.HEATMAP, app_latency.HEATMAP_NEXT,
             app_latency.COMPARE, app_latency.COMPARE_NEXT]  # fmt: skip
    passes = {"navigate": dict.fromkeys(names, t), "load": dict.fromkeys(app_latency.PAGES, t)}
    app_latency.print_table(passes, [passes, passes])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "seconds",
        "first",
        "median",
        "max",
        "load",
        "lmax",
        "ask",
        "run",
        "draw",
        "charts",
    ]
    assert [line.split("  ")[0].strip() for line in out[1:-1]] == names
    assert out[-1].startswith("(2 warm passes;")
