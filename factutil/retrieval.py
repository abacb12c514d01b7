"""Deprecated import path: the retrieval server and client are :mod:`factutil.tools.retrieval`.

Kept as a thin re-export because the adapters, their READMEs and the examples documented
``factutil.retrieval``; new code imports from :mod:`factutil.tools.retrieval`. It will be removed
in a later release.
"""

from factutil.tools.retrieval import (
    DEFAULT_CORPUS,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_TOPK,
    MAX_QUERIES,
    MAX_REQUEST_BYTES,
    MAX_TOPK,
    BM25Retriever,
    Document,
    Passage,
    RetrievalClient,
    RetrieveRequest,
    SearchResult,
    format_observation,
    load_corpus,
    make_server,
    parse_reply,
    retrieve_reply,
    serve,
    split_contents,
)

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_REQUEST_TIMEOUT_S", "DEFAULT_TOPK",
    "MAX_QUERIES", "MAX_REQUEST_BYTES", "MAX_TOPK", "BM25Retriever", "Document", "Passage",
    "RetrievalClient", "RetrieveRequest", "SearchResult", "format_observation", "load_corpus",
    "make_server", "parse_reply", "retrieve_reply", "serve", "split_contents",
]
