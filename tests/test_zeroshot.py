"""Zero-shot accuracy: lm-eval's item construction and scoring rule, the local task loaders,
log-likelihoods through HFLM on a tiny model, runs (dense, pruned, rebuilt, sliced sweeps),
Paper A's accuracy relation, and bad input."""

from __future__ import annotations

import json
import math

import pytest
import torch

from core.analysis.relation import accuracy_relation
from core.cli.main import main
from core.errors import ConfigError, DataError
from core.evaluation import accuracy as zs
from core.settings.config import (
    CalibConfig,
    DataSpec,
    EvalConfig,
    ModelSpec,
    PruneConfig,
    RunConfig,
    ZeroShotConfig,
)

MODEL = ModelSpec("tiny-llama", "cpu", "float32")
EVAL = EvalConfig(DataSpec("pydoc", "test"), seqlen=64, max_windows=2)
CALIB = CalibConfig(DataSpec("pydoc", "train"), nsamples=4, seqlen=64, seed=0)


# ---- hand-made task files in every local format ---------------------------------------------
def write_tasks(root) -> str:
    """A shared/data-like folder with a few items per task; returns its path."""
    t = root / "tasks"
    for name in zs.TASK_NAMES:
        (t / name).mkdir(parents=True)
    arc = [
        {
            "id": "a1",
            "question": {
                "stem": "What melts ice?",
                "choices": [
                    {"text": "heat", "label": "A"},
                    {"text": "cold", "label": "B"},
                    {"text": "dark", "label": "C"},
                ],
            },
            "answerKey": "A",
        },
        {
            "id": "a2",
            "question": {
                "stem": "Which is a planet?",
                "choices": [
                    {"text": "Mars", "label": "1"},
                    {"text": "Moon", "label": "2"},
                    {"text": "Sun", "label": "3"},
                    {"text": "Comet", "label": "4"},
                ],
            },
            "answerKey": "1",
        },
    ]
    for f in ("arc_easy/ARC-Easy-Test.jsonl", "arc_challenge/ARC-Challenge-Test.jsonl"):
        (t / f).write_text("\n".join(json.dumps(d) for d in arc) + "\n")
    piqa = [
        {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid"},
        {"goal": "Dry hair", "sol1": "use water", "sol2": "use a towel"},
    ]
    (t / "piqa/valid.jsonl").write_text("\n".join(json.dumps(d) for d in piqa) + "\n")
    (t / "piqa/valid-labels.lst").write_text("0\n1\n")
    wino = [
        {
            "qID": "w1",
            "sentence": "The cup fell off the table because _ was tilted.",
            "option1": "the cup",
            "option2": "the table",
            "answer": "2",
        },
        {
            "qID": "w2",
            "sentence": "Anna thanked Beth because _ had helped her.",
            "option1": "Anna",
            "option2": "Beth",
            "answer": "2",
        },
    ]
    (t / "winogrande/dev.jsonl").write_text("\n".join(json.dumps(d) for d in wino) + "\n")
    boolq = [
        {
            "question": "is water wet",
            "passage": "Water makes things wet.",
            "idx": 0,
            "label": "true",
        },
        {"question": "is fire cold", "passage": "Fire is hot.", "idx": 1, "label": False},
    ]
    (t / "boolq/val.jsonl").write_text("\n".join(json.dumps(d) for d in boolq) + "\n")
    (t / "hellaswag/hellaswag_val_full.txt").write_text(
        "Cooking: A man cracks an egg. he\n1\nsings loudly.\npours it into a pan.\n"
        "flies away.\n[title] reads a book.\n"
        "Running: A woman ties her shoes. she\n0\nstarts to jog.\nswims.\nsleeps.\nsits.\n"
    )
    return str(root)


@pytest.fixture
def task_dir(tmp_path) -> str:
    return write_tasks(tmp_path / "data")


# ---- item construction: lm-eval 0.4's task definitions --------------------------------------
def test_arc_piqa_boolq_items_follow_lm_eval_templates():
    arc = zs.arc_item("What melts ice?", ["heat", "cold"], ["A", "B"], "B")
    assert arc.pairs == (
        ("Question: What melts ice?\nAnswer:", " heat"),
        ("Question: What melts ice?\nAnswer:", " cold"),
    )
    assert arc.gold == 1 and arc.choices == ("heat", "cold")
    piqa = zs.piqa_item("Open a jar", "twist", "eat", 0)
    assert piqa.pairs[1] == ("Question: Open a jar\nAnswer:", " eat")
    boolq = zs.boolq_item("Fire is hot.", "is fire cold", False)
    assert boolq.pairs == (
        ("Fire is hot.\nQuestion: is fire cold?\nAnswer:", " no"),
        ("Fire is hot.\nQuestion: is fire cold?\nAnswer:", " yes"),
    )
    assert boolq.gold == 0


def test_winogrande_and_hellaswag_match_lm_eval_functions():
    from lm_eval.tasks.hellaswag.utils import preprocess
    from lm_eval.tasks.winogrande import preprocess_winogrande as wg

    doc = {
        "sentence": "The cup fell off the table because _ was tilted.",
        "option1": "the cup",
        "option2": "the table",
        "answer": "2",
    }
    item = zs.winogrande_item(**doc)
    assert [c for c, _ in item.pairs] == wg.doc_to_choice(doc)
    assert {cont for _, cont in item.pairs} == {" " + wg.doc_to_target(doc)}
    assert item.gold == wg.doc_to_text(doc)
    for text in [
        "A man [header] walks.  [title] Step one [step] go",
        " plain text ",
        "[substeps] x  y [title] z",
    ]:
        assert zs.hellaswag_preprocess(text) == preprocess(text)


def test_items_reject_bad_documents():
    with pytest.raises(DataError, match="answer key"):
        zs.arc_item("q", ["a", "b"], ["A", "B"], "E")
    with pytest.raises(DataError, match="no blank"):
        zs.winogrande_item("no blank here", "a", "b", "1")
    with pytest.raises(DataError, match=">= 2 choices"):
        zs.McItem((("c", " x"),), ("x",), 0)


# ---- local loaders ---------------------------------------------------------------------------
def test_every_local_format_loads(task_dir):
    data = {n: zs.load_task(n, task_dir) for n in zs.TASK_NAMES}
    assert [it.gold for it in data["arc_easy"].items] == [0, 0]
    assert len(data["arc_easy"].items[1].pairs) == 4  # numeric labels 1-4
    assert [it.gold for it in data["piqa"].items] == [0, 1]
    assert [it.gold for it in data["winogrande"].items] == [1, 1]
    assert [it.gold for it in data["boolq"].items] == [1, 0]  # "true" string and False bool
    hs = data["hellaswag"].items
    assert [it.gold for it in hs] == [1, 0] and hs[0].pairs[3][1] == "  reads a book."  # as lm-eval
    assert "llama.cpp" in data["hellaswag"].note
    assert len(zs.load_task("piqa", task_dir, limit=1).items) == 1


def test_winogrande_labels_file_fallback(tmp_path):
    folder = tmp_path / "tasks" / "winogrande"
    folder.mkdir(parents=True)
    doc = {"sentence": "A _ b.", "option1": "x", "option2": "y"}
    (folder / "dev.jsonl").write_text(json.dumps(doc) + "\n")
    (folder / "dev-labels.lst").write_text("1\n")
    assert zs.load_task("winogrande", str(tmp_path)).items[0].gold == 0


def test_missing_and_malformed_task_files(tmp_path, task_dir):
    with pytest.raises(DataError, match=r"missing valid-labels\.lst"):
        (tmp_path / "d" / "tasks" / "piqa").mkdir(parents=True)
        (tmp_path / "d" / "tasks" / "piqa" / "valid.jsonl").write_text("{}\n")
        zs.load_task("piqa", str(tmp_path / "d"))
    with pytest.raises(DataError, match=r"missing hellaswag_val_full\.txt"):
        zs.load_task("hellaswag", str(tmp_path / "nowhere"))
    bad = tmp_path / "data" / "tasks" / "hellaswag" / "hellaswag_val_full.txt"
    bad.write_text("one\ntwo\n")
    with pytest.raises(DataError, match="not a multiple of 6"):
        zs.load_task("hellaswag", task_dir)


def test_task_names_and_limit_are_validated():
    # the vocabulary (core.names) lists the tasks core.evaluation.tasks builds, in its order
    assert tuple(zs.TASKS) == zs.TASK_NAMES
    assert zs.parse_tasks("all") == zs.TASK_NAMES
    assert zs.parse_tasks("piqa, boolq,piqa") == ("piqa", "boolq")
    with pytest.raises(ConfigError, match="unknown task 'mmlu'"):
        ZeroShotConfig(("mmlu",))
    with pytest.raises(ConfigError, match="limit must be >= 1"):
        ZeroShotConfig(("piqa",), limit=0)
    with pytest.raises(ConfigError, match="no zero-shot task"):
        zs.parse_tasks(" , ")


# ---- scoring rule ---------------------------------------------------------------------------
def test_higher_loglikelihood_wins_and_acc_norm_divides_by_length():
    # ll -4 on a 2-char choice vs -6 on a 12-char one: acc picks 0, acc_norm picks 1 (-0.5 > -2)
    assert zs.predictions([-4.0, -6.0], ["ab", "abcdefghijkl"]) == (0, 1)
    item = zs.McItem((("c", " ab"), ("c", " abcdefghijkl")), ("ab", "abcdefghijkl"), 1)
    metrics, rows = zs.score_items([item, item], [[-4.0, -6.0], [-7.0, -6.0]], ("acc", "acc_norm"))
    assert metrics["acc"] == 0.5 and metrics["acc_norm"] == 1.0
    assert metrics["acc_stderr"] == pytest.approx(0.5)  # sd([0, 1], n-1) / sqrt(2)
    assert rows[0]["pred"] == 0 and rows[1]["pred"] == 1
    acc_only, _ = zs.score_items([item], [[-4.0, -6.0]], ("acc",))
    assert "acc_norm" not in acc_only and acc_only["chance"] == 0.5


def test_hflm_loglikelihood_equals_direct_computation(tiny):
    """lm-eval's HFLM on the in-memory model gives sum log p(continuation | context)."""
    pairs = [("Question: what melts ice?\nAnswer:", " heat"), ("Hello", " world, again")]
    got = zs.LoglikelihoodScorer(tiny.model, tiny.tokenizer, batch_size=2)(pairs)
    for (ctx, cont), ll in zip(pairs, got, strict=True):
        ctx_ids = tiny.tokenizer(ctx)["input_ids"]
        ids = torch.tensor([tiny.tokenizer(ctx + cont)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(tiny.model(ids).logits[0].double(), -1)
        n = len(ctx_ids)
        want = sum(logp[i - 1, ids[0, i]].item() for i in range(n, ids.shape[1]))
        assert ll == pytest.approx(want, abs=1e-4)


def test_evaluate_zeroshot_scores_every_task(tiny, task_dir):
    res = zs.evaluate_zeroshot(tiny.model, tiny.tokenizer, "all", task_dir, batch_size=4)
    assert set(res["tasks"]) == set(zs.TASK_NAMES)
    for name, m in res["tasks"].items():
        rows = [r for r in res["items"] if r["task"] == name]
        assert m["n"] == len(rows) == 2
        assert m["acc"] == sum(r["pred"] == r["gold"] for r in rows) / 2
        for r in rows:  # the reported pick is the highest log-likelihood
            lls = json.loads(r["lls"])
            assert r["pred"] == max(range(len(lls)), key=lls.__getitem__)
    assert "acc_norm" not in res["tasks"]["boolq"] and "acc_norm" in res["tasks"]["arc_easy"]
    assert res["mean_acc"] == pytest.approx(sum(m["acc"] for m in res["tasks"].values()) / 6)


# ---- runs ------------------------------------------------------------------------------------
def test_run_config_round_trips_with_the_same_id():
    from core.runs import plan_prune
    from core.settings.config import zeroshot_dict

    cfg = plan_prune(
        MODEL, PruneConfig("sparsegpt", 0.5, "2:4"), CALIB, EVAL, ZeroShotConfig(("piqa",), 5, "/x")
    ).cfg
    again = RunConfig.from_dict(json.loads(cfg.canonical_json()))
    assert again.run_id == cfg.run_id and again.prune == cfg.prune
    assert again.extra_value("zeroshot") == zeroshot_dict(ZeroShotConfig(("piqa",), 5, "/x"))
    plain = plan_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL).cfg
    assert plain.extra == ()  # runs without accuracy keep the ids they always had


def test_prune_run_stores_accuracy_and_rebuild_reproduces_it(store, task_dir):
    from core.runs import run_prune, run_zeroshot

    cfg = ZeroShotConfig(("piqa", "arc_easy", "boolq"), None, task_dir, 4)
    res = run_prune(MODEL, PruneConfig("wanda", 0.5), CALIB, EVAL, store, zeroshot=cfg)
    m = res["metrics"]
    assert set(m["zeroshot"]["tasks"]) == {"piqa", "arc_easy", "boolq"}
    assert "acc_piqa" in m and "acc_norm_arc_easy" in m and "dense_mean_acc" in m
    dense = store.load(m["dense_zeroshot_run"])
    assert dense.record.kind == "zeroshot" and dense.metrics["source_run"] is None
    assert "zeroshot_items" in store.load(res["run_id"]).tables()

    # A zeroshot run on the stored prune run rebuilds the pruned model: same log-likelihoods.
    again = run_zeroshot(None, cfg, store, res["run_id"])
    assert again["metrics"]["model_from"] == "rebuilt"
    a = store.load(res["run_id"]).table("zeroshot_items")["lls"].tolist()
    b = store.load(again["run_id"]).table("zeroshot_items")["lls"].tolist()
    assert a == b
    with pytest.raises(ConfigError, match="not 'tiny-llama-mha'"):
        run_zeroshot(ModelSpec("tiny-llama-mha"), cfg, store, res["run_id"])


def test_saved_model_is_used(store, task_dir, tmp_path):
    from core.runs import RunOptions, run_prune, run_zeroshot

    cfg = ZeroShotConfig(("piqa",), None, task_dir)
    opts = RunOptions(save_dir=str(tmp_path / "saved"))
    res = run_prune(MODEL, PruneConfig("magnitude", 0.5), CALIB, EVAL, store, opts=opts)
    out = run_zeroshot(None, cfg, store, res["run_id"])
    assert out["metrics"]["model_from"] == "saved"


def test_sweep_fits_the_accuracy_relation(store, task_dir):
    from core.runs import run_relation_sweep

    cfg = ZeroShotConfig(("piqa", "winogrande"), None, task_dir)
    res = run_relation_sweep(MODEL, (0.25, 0.5), CALIB, EVAL, store, zeroshot=cfg)
    run = store.load(res["run_id"])
    acc = run.table("accuracy")
    assert sorted(set(acc["s"])) == [0.0, 0.25, 0.5] and set(acc["task"]) == {"piqa", "winogrande"}
    assert list(acc[acc["s"] == 0.0]["d_prime"].unique()) == [64]
    fit = run.table("accuracy_fit")
    assert list(fit["task"]) == ["piqa", "winogrande", "mean"]
    assert "acc_fit_r2" in res["metrics"]


# ---- Paper A's accuracy relation -------------------------------------------------------------
def test_accuracy_relation_recovers_an_exact_law():
    acc0, kappa, c = 0.6, 0.8, -0.8  # ln(acc/acc0) = 0.8(1 - s) - 0.8, zero at s = 0
    s = [0.1, 0.2, 0.3, 0.5]
    acc = [acc0 * math.exp(kappa * (1 - x) + c) for x in s]
    fit = accuracy_relation(s, acc, acc0, chance=0.25)
    assert fit["kappa"] == pytest.approx(kappa) and fit["intercept"] == pytest.approx(c)
    assert fit["r2"] == pytest.approx(1.0)
    assert fit["rows"][0]["predicted"] == pytest.approx(acc0)
    # the chance reading of a law through the origin
    acc_ch = [0.25 * math.exp(0.9 * (1 - x)) for x in [0.0, *s]]
    fit_ch = accuracy_relation(s, acc_ch[1:], acc_ch[0], chance=0.25)
    assert fit_ch["kappa_chance"] == pytest.approx(0.9)
    assert fit_ch["r2_chance"] == pytest.approx(1.0)


def test_accuracy_relation_reports_noise_as_a_poor_fit():
    fit = accuracy_relation([0.1, 0.2, 0.3], [0.62, 0.55, 0.61], 0.6, 0.5)
    assert fit["r2"] < 0.9  # the verdict is core.analysis.verdicts' rule, on intervals
    zero = accuracy_relation([0.5], [0.0], 0.0, 0.5)  # a model that gets nothing right
    assert math.isnan(zero["kappa"]) and math.isnan(zero["kappa_chance"])
    with pytest.raises(ConfigError, match="accuracies must be in"):
        accuracy_relation([0.5], [1.5], 0.5, 0.5)


# ---- CLI ---------------------------------------------------------------------------------------
def test_cli_zeroshot_and_bad_input(capsys, store_root, task_dir):
    base = ["zeroshot", "--model", "tiny-llama", "--device", "cpu", "--data-dir", task_dir]
    assert main([*base, "--tasks", "piqa,boolq", "--limit", "1", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"]["zeroshot"]["limit"] == 1
    assert out["metrics"]["zeroshot"]["tasks"]["piqa"]["n"] == 1
    assert main([*base, "--tasks", "piqa", "--quiet"]) == 0
    assert "PIQA" in capsys.readouterr().out

    assert main([*base, "--tasks", "piqa,mmlu", "--quiet"]) == 2
    assert "unknown task 'mmlu'" in capsys.readouterr().err
    assert main([*base, "--tasks", "piqa", "--limit", "0", "--quiet"]) == 2
    assert "limit must be >= 1" in capsys.readouterr().err
    empty = str(task_dir) + "/nothing"
    assert main([*base[:-1], empty, "--tasks", "piqa", "--quiet"]) == 2
    assert "missing valid.jsonl, valid-labels.lst" in capsys.readouterr().err
    assert main(["zeroshot", "--run", "feedbeef", "--quiet"]) == 2
    assert "no run 'feedbeef'" in capsys.readouterr().err


def test_sliced_run_is_rebuilt_for_zeroshot(store, task_dir):
    from core.runs import run_slice, run_zeroshot

    cfg = ZeroShotConfig(("arc_easy",), None, task_dir)
    res = run_slice(MODEL, PruneConfig("slicegpt", 0.25), CALIB, EVAL, store, zeroshot=cfg)
    again = run_zeroshot(None, cfg, store, res["run_id"])
    assert again["metrics"]["model_from"] == "rebuilt"
    a = store.load(res["run_id"]).table("zeroshot_items")["lls"].tolist()
    b = store.load(again["run_id"]).table("zeroshot_items")["lls"].tolist()
    assert a == b
