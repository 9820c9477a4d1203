import pytest

from core.data import Corpus, calibration_documents, calibration_windows, eval_windows, load_corpus
from core.errors import DataError
from core.models.load import byte_tokenizer
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


# ---- the whole-document sampler (SliceGPT's reference rule) -------------------------------------
# 40 short documents of 11-29 characters (one token per byte) and a few empty rows.
DOCS = tuple(
    "" if i % 9 == 4 else f"doc{i:02d} " + "abcdefghij"[i % 10] * (5 + 3 * (i % 7))
    for i in range(40)
)


def _docs_corpus(docs=DOCS) -> Corpus:
    return Corpus("file:docs.txt", "train", tuple(docs), "\n\n", "test", comparable=False)


def test_document_samples_start_at_a_document_and_join_with_blank_lines():
    tok = byte_tokenizer()
    ids = calibration_documents(tok, _docs_corpus(), 4, 48, seed=0)
    assert ids.shape == (4, 48)
    used: list[int] = []
    for row in ids:
        parts = tok.decode(row.tolist()).split("\n\n")
        assert len(parts) >= 2  # each sample needs several documents: they were joined
        index = [DOCS.index(p) for p in parts[:-1]]  # whole documents, the first from its start
        assert index == sorted(index) and all(DOCS[i] for i in index)  # corpus order, no empties
        rest = [i for i in range(index[-1] + 1, len(DOCS)) if DOCS[i].startswith(parts[-1])]
        assert parts[-1] and rest  # the last document is cut at the sample's length
        used += index
    assert len(used) == len(set(used))  # a document is used once


def test_document_sampler_is_seeded():
    tok, corpus = byte_tokenizer(), _docs_corpus()
    a = calibration_documents(tok, corpus, 4, 48, seed=0)
    b = calibration_documents(tok, corpus, 4, 48, seed=0)
    c = calibration_documents(tok, corpus, 4, 48, seed=1)
    assert (a == b).all() and not (a == c).all()


def test_document_sampler_refuses_a_corpus_too_small():
    with pytest.raises(DataError, match="whole-document samples of 48 tokens, fewer than 2"):
        calibration_documents(byte_tokenizer(), _docs_corpus(DOCS[:5]), 2, 48, seed=0)


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


# ---- a corpus must be text (core.data.check_text_file) ------------------------------------------
def test_binary_file_corpus_is_refused(tmp_path):
    """Negative control: 4 KB of random bytes, a NUL-free binary and a binary .jsonl."""
    import os

    noise = tmp_path / "noise.bin"
    noise.write_bytes(os.urandom(4096))
    high = tmp_path / "high.txt"  # no NUL: caught by its undecodable bytes alone
    high.write_bytes(bytes(range(128, 256)) * 32)
    lines = tmp_path / "x.jsonl"
    lines.write_bytes(b'{"text": "a"}\n' + os.urandom(2048))
    for path in (noise, high, lines):
        with pytest.raises(DataError, match="is not a text file"):
            load_corpus(DataSpec(f"file:{path}"))


def test_text_in_other_encodings_is_accepted(tmp_path):
    """Positive control: UTF-8 text, Latin-1 prose with a few accented letters, and UTF-8 text
    whose 1 MiB sample ends inside a multi-byte character are all text."""
    prose = "Le château était déjà fermé quand nous sommes arrivés à la forêt.\n\n" * 40
    utf8, latin = tmp_path / "utf8.txt", tmp_path / "latin1.txt"
    utf8.write_text(prose, encoding="utf-8")
    latin.write_bytes(prose.encode("latin-1"))
    cut = tmp_path / "cut.txt"
    cut.write_bytes(b"a" * (2**20 - 1) + "é".encode() + b"\n\nmore text")
    for path in (utf8, latin, cut):
        assert load_corpus(DataSpec(f"file:{path}")).documents


def test_cli_refuses_a_binary_corpus_before_loading(tmp_path, capsys):
    import os

    from core.cli.main import main

    noise = tmp_path / "noise.bin"
    noise.write_bytes(os.urandom(4096))
    store = tmp_path / "store"
    argv = ["eval", "--model", "tiny-llama", "--dataset", f"file:{noise}", "--store", str(store)]
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "is not a text file" in err
    assert not (store / "runs").exists() or not any((store / "runs").iterdir())
