"""Fixtures of the verl adapter tests: real verl, CPU only, network only on 127.0.0.1 (the
``byte_tokenizer`` and the real model come from the repository's root ``conftest.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from verl_testkit import CORPUS, Rows, build_rows, compose_verl_config


@pytest.fixture(scope="session")
def verl_config() -> Callable[..., Any]:
    return compose_verl_config


@pytest.fixture(scope="session")
def retrieval_url() -> Iterator[str]:
    from factutil.retrieval import BM25Retriever, load_corpus, make_server

    server = make_server(BM25Retriever(load_corpus(CORPUS)), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def sample_rows() -> Rows:
    return build_rows()
