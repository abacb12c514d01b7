"""The faster embedding backends: int8 ONNX MiniLM and static vectors distilled locally."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from factutil import FactUtilConfig
from factutil.cluster import SemanticClusterer
from factutil.embed import (
    OnnxMiniLMEmbedder,
    StaticEmbedder,
    default_model_path,
    make_embedder,
    minilm_tokenizer,
)
from factutil.tools.static_vectors import main as static_vectors_command

TEXTS = [
    "david lynch | place of birth | missoula, montana",
    "david lynch | was born in | missoula",
    "ernest i, prince of anhalt-dessau | date of death | 12 june 1516",
    "a much longer text about the director of the film ronnie rocket and where he was born",
]


def test_make_embedder_names_each_backend():
    assert isinstance(make_embedder("minilm-int8"), OnnxMiniLMEmbedder)
    assert isinstance(make_embedder("static", "/tmp/nowhere"), StaticEmbedder)
    with pytest.raises(ValueError, match="embedding_backend"):
        make_embedder("word2vec")
    clusterer = SemanticClusterer(FactUtilConfig(embedding_backend="minilm-int8"))
    assert isinstance(clusterer.embedder, OnnxMiniLMEmbedder)


def test_static_encode_is_the_normalised_mean_of_token_vectors(tmp_path):
    """A hand-made static model: 4-d vectors for a few vocabulary ids of the real tokenizer."""
    import shutil

    tokenizer = minilm_tokenizer()
    vocab = tokenizer.get_vocab()
    vectors = np.zeros((len(vocab), 4), dtype=np.float32)
    vectors[vocab["paris"]] = [1, 0, 0, 0]
    vectors[vocab["france"]] = [0, 1, 0, 0]
    vectors[vocab["capital"]] = [0, 0, 2, 0]
    np.save(tmp_path / "vectors.npy", vectors)
    shutil.copy(os.path.join(default_model_path(), "tokenizer.json"), tmp_path / "tokenizer.json")
    out = StaticEmbedder(str(tmp_path)).encode(["Paris France", "capital", "", "PARIS | capital"])
    s2 = np.sqrt(0.5)
    # "|" has a zero vector here; padding and special tokens are never counted.
    np.testing.assert_allclose(out, [[s2, s2, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0],
                                     [1 / np.sqrt(5), 0, 2 / np.sqrt(5), 0]], atol=1e-6)


class SpelledEmbedder:
    """A stand-in for MiniLM in the distillation: a token's vector is fixed by its vocabulary
    id (the one-hot of id mod 384, with a spread), so a distillation takes seconds."""

    max_tokens = 256

    def __init__(self, *args, **kwargs):
        self.ids = minilm_tokenizer().get_vocab()

    def encode(self, texts, progress=False):
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, self.ids[text] % 384] = 1.0
            out[row, (7 * self.ids[text]) % 384] += 0.5
        return out


def test_the_static_backend_makes_its_vectors_on_first_use_with_one_line(tmp_path, monkeypatch, capfd):
    """No vectors yet: the first encode distils them into the folder (one line on stderr, the
    files whole, a new file's folder mode), then reads them; the next embedder reads them and
    prints nothing. MiniLM's pass stands in (SpelledEmbedder): the quality is the next test's."""
    from factutil.embed import backends

    monkeypatch.setattr(backends, "SentenceTransformerEmbedder", SpelledEmbedder)
    path = tmp_path / "cache" / "static-minilm-256"
    first = StaticEmbedder(str(path)).encode(TEXTS[:2])
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1 and err.endswith(" s\n")
    assert err.startswith(f"factutil: distilling static vectors from the bundled MiniLM into {path} "
                          f"(once, 30522 tokens, under a minute on 2 CPU cores) ... done in ")
    assert sorted(os.listdir(path)) == ["config.json", "tokenizer.json", "vectors.npy"]
    assert os.listdir(path.parent) == ["static-minilm-256"]  # no staging folder left
    assert np.load(path / "vectors.npy").shape == (30522, 256) and path.stat().st_mode & 0o777 == 0o755
    again = StaticEmbedder(str(path)).encode(TEXTS[:2])
    assert np.array_equal(first, again) and capfd.readouterr().err == ""


def test_two_first_uses_at_once_both_read_whole_vectors(tmp_path, monkeypatch):
    """Two threads distil into one folder at the same time: both end with the same vectors."""
    import threading

    from factutil.embed import backends

    monkeypatch.setattr(backends, "SentenceTransformerEmbedder", SpelledEmbedder)
    path, found = str(tmp_path / "static"), []
    threads = [threading.Thread(target=lambda: found.append(StaticEmbedder(path).encode(TEXTS)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 2 and np.array_equal(found[0], found[1])
    assert sorted(os.listdir(tmp_path)) == ["static"]


def test_an_unwritable_cache_fails_at_once_naming_the_folder(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="file"):
        StaticEmbedder(str(tmp_path / "file" / "static")).encode(["a | b | c"])


def test_the_command_makes_the_vectors_where_asked(tmp_path, monkeypatch, capsys):
    """``python -m factutil.tools.static_vectors PATH --dims 64 --quiet``: (64,) vectors, no line."""
    from factutil.embed import backends

    monkeypatch.setattr(backends, "SentenceTransformerEmbedder", SpelledEmbedder)
    static_vectors_command([str(tmp_path / "s"), "--dims", "64", "--quiet"])
    assert json.loads((tmp_path / "s" / "config.json").read_text())["dims"] == 64
    assert np.load(tmp_path / "s" / "vectors.npy").shape == (30522, 64)
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_onnx_int8_matches_the_full_model(minilm):
    full = minilm.encode(TEXTS)
    fast = OnnxMiniLMEmbedder(batch_size=2).encode(TEXTS)  # two batches of different lengths
    assert fast.shape == full.shape == (4, 384) and fast.dtype == np.float32
    cosine = np.sum(full * fast, axis=1)
    assert cosine.min() > 0.998, cosine


@pytest.mark.slow
def test_distilled_static_model_keeps_paraphrases_closer_than_unrelated(static_vectors):
    """The run's static vectors, distilled from MiniLM on first use: 256 dimensions, unit
    vectors, a paraphrase closer than unrelated facts."""
    with open(os.path.join(static_vectors, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    assert config["dims"] == 256
    vectors = StaticEmbedder(static_vectors).encode(TEXTS)
    assert vectors.shape == (4, 256)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > 0.8 and sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[0, 3]