"""A small retrieval service with Search-R1's HTTP API (``factutil serve``), and its client
(API, reply shapes and request limits: docs/retrieval.md).

``server`` is not re-exported: it needs the ``retrieval`` extra (fastapi, uvicorn), a client not.
"""

from factutil.search_r1 import split_contents
from factutil.tools.retrieval.client import (
    Passage,
    RetrievalClient,
    SearchResult,
    format_observation,
    parse_reply,
)
from factutil.tools.retrieval.corpus import (
    DEFAULT_CORPUS,
    DEFAULT_TOPK,
    BM25Retriever,
    Document,
    load_corpus,
)

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_TOPK", "BM25Retriever", "Document", "Passage", "RetrievalClient",
    "SearchResult", "format_observation", "load_corpus", "parse_reply", "split_contents",
]
