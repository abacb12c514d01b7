"""Fixtures of the verl adapter tests: real verl, CPU only, network only on 127.0.0.1 (the
``byte_tokenizer``, the BM25 ``retrieval_url`` and the real model come from the repository's
root ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from verl_testkit import Rows, build_rows, compose_verl_config


@pytest.fixture(scope="session")
def verl_config() -> Callable[..., Any]:
    return compose_verl_config


@pytest.fixture(scope="session")
def sample_rows() -> Rows:
    return build_rows()
