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


def test_static_vectors_missing_raise_naming_the_command_that_makes_them(tmp_path):
    embedder = StaticEmbedder(str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match=r"python -m factutil\.tools\.static_vectors .*none"):
        embedder.encode(["a | b | c"])
    assert not (tmp_path / "none").exists()  # nothing distilled behind the caller's back


@pytest.mark.slow
def test_onnx_int8_matches_the_full_model(minilm):
    full = minilm.encode(TEXTS)
    fast = OnnxMiniLMEmbedder(batch_size=2).encode(TEXTS)  # two batches of different lengths
    assert fast.shape == full.shape == (4, 384) and fast.dtype == np.float32
    cosine = np.sum(full * fast, axis=1)
    assert cosine.min() > 0.998, cosine


@pytest.mark.slow
def test_distilled_static_model_keeps_paraphrases_closer_than_unrelated(tmp_path, capsys):
    """``python -m factutil.tools.static_vectors PATH --dims 64`` makes the vectors the static
    embedder reads."""
    path = str(tmp_path / "static")
    static_vectors_command([path, "--dims", "64"])
    # The minute-long command says what it does (BERT's uncased WordPiece vocabulary: 30,522
    # tokens), shows a bar over the batches and says when it is done.
    err = capsys.readouterr().err
    assert f"factutil: distilling static vectors (30522 tokens) from the bundled MiniLM into {path}" in err
    assert "Batches" in err and f"factutil: static vectors ready in {path} (" in err
    config = json.loads((tmp_path / "static" / "config.json").read_text())
    assert config["dims"] == 64
    vectors = StaticEmbedder(path).encode(TEXTS)
    assert vectors.shape == (4, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > 0.8 and sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[0, 3]
