import pytest

from core.data import calibration_windows, eval_windows, load_corpus
from core.errors import DataError
from core.settings.config import DataSpec


def test_wikitext_reference_join(shared_data):
    corpus = load_corpus(DataSpec("wikitext2", "test", str(shared_data)))
    assert len(corpus.documents) == 4358
    assert len(corpus.text) == 1_294_336  # the HF "\n\n".join(test rows), papers.md §1
    assert corpus.comparable


def test_pydoc_offline_corpus_is_labelled():
    test, train = load_corpus(DataSpec("pydoc", "test")), load_corpus(DataSpec("pydoc", "train"))
    assert not test.comparable and "not comparable" in test.source
    assert set(test.documents).isdisjoint(train.documents)


def test_calibration_is_seeded(tiny, shared_data):
    corpus = load_corpus(DataSpec("c4", "train", str(shared_data)))
    a = calibration_windows(tiny.tokenizer, corpus, 4, 64, seed=0)
    b = calibration_windows(tiny.tokenizer, corpus, 4, 64, seed=0)
    c = calibration_windows(tiny.tokenizer, corpus, 4, 64, seed=1)
    assert a.shape == (4, 64) and (a == b).all() and not (a == c).all()


def test_stream_calibration(tiny):
    ids = calibration_windows(tiny.tokenizer, load_corpus(DataSpec("pydoc", "train")), 3, 128, 0)
    assert ids.shape == (3, 128)


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_corpus(DataSpec("wikitext2", "test", str(tmp_path / "nope")))


def test_empty_text_file(tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("  \n\n ")
    with pytest.raises(DataError, match="empty"):
        load_corpus(DataSpec(f"file:{f}"))


def test_text_file_shorter_than_a_window(tiny, tmp_path):
    f = tmp_path / "short.txt"
    f.write_text("just a few words")
    with pytest.raises(DataError, match="fewer than one window"):
        eval_windows(tiny.tokenizer, load_corpus(DataSpec(f"file:{f}")), 512)


def test_hub_unreachable_gives_clear_error():
    with pytest.raises(DataError, match="data-dir"):
        load_corpus(DataSpec("c4", "validation", None))
