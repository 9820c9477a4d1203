"""The CLI's bad-input paths: one clear message, exit code 2, store left consistent."""

import json

import pytest

from core.cli.main import main
from core.store.run_store import RunStore


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_and_reuse(capsys, store_root):
    args = [
        "eval",
        "--model",
        "tiny-llama",
        "--dataset",
        "pydoc",
        "--seqlen",
        "32",
        "--max-windows",
        "3",
        "--store",
        str(store_root),
        "--quiet",
    ]
    code, out, _ = run(capsys, *args, "--json")
    assert code == 0
    res = json.loads(out)
    assert res["metrics"]["n_tokens"] == 96 and res["metrics"]["ppl"] > 1
    assert res["config"]["model"]["device"] == "cpu"  # resolved, not "auto"
    code, out, _ = run(capsys, *args)
    assert code == 0 and "reused" in out and "perplexity" in out
    code, out, _ = run(capsys, "runs", "list", "--store", str(store_root), "--json")
    assert [r["id"] for r in json.loads(out)] == [res["run_id"]]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no-such-model-xyz"], "not found"),
        (
            ["--model", "tiny-llama", "--dataset", "wikitext2", "--data-dir", "/nonexistent"],
            "does not exist",
        ),
        (
            ["--model", "tiny-llama", "--seqlen", "4096", "--dataset", "pydoc"],
            "exceeds the model's context",
        ),
        (["--model", "tiny-llama", "--dataset", "bogus"], "unknown dataset"),
        (["--model", "tiny-llama", "--dataset", "pydoc", "--seqlen", "1"], "seqlen must be"),
        (
            ["--model", "tiny-llama", "--dataset", "pydoc", "--device", "cuda:7"],
            "CUDA is not available",
        ),
    ],
)
def test_eval_bad_inputs(capsys, store_root, argv, message):
    code, out, err = run(capsys, "eval", *argv, "--store", str(store_root), "--quiet")
    assert code == 2 and out == ""
    assert message in err and err.startswith("error:") and "Traceback" not in err
    assert all(r.status in ("failed", "done") for r in RunStore(store_root).list())
    assert list((store_root / "tmp").glob("*")) == []


def test_empty_text_file(capsys, store_root, tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("")
    code, _, err = run(
        capsys,
        "eval",
        "--model",
        "tiny-llama",
        "--dataset",
        f"file:{f}",
        "--store",
        str(store_root),
        "--quiet",
    )
    assert code == 2 and "empty" in err
    assert [r.status for r in RunStore(store_root).list()] == ["failed"]


def test_non_causal_model(capsys, store_root, tmp_path):
    from transformers import BertConfig, BertModel

    folder = tmp_path / "bert"
    BertModel(
        BertConfig(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            vocab_size=50,
        )
    ).save_pretrained(folder)
    code, _, err = run(
        capsys,
        "eval",
        "--model",
        str(folder),
        "--dataset",
        "pydoc",
        "--store",
        str(store_root),
        "--quiet",
    )
    assert code == 2 and "not a causal language model" in err


def test_unwritable_store(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(
        capsys,
        "eval",
        "--model",
        "tiny-llama",
        "--dataset",
        "pydoc",
        "--store",
        str(blocker / "s"),
        "--quiet",
    )
    assert code == 2 and "not writable" in err


def test_runs_show_unknown(capsys, store_root):
    code, _, err = run(capsys, "runs", "show", "deadbeef", "--store", str(store_root))
    assert code == 2 and "no run" in err
