"""A small retrieval service with Search-R1's HTTP API (``factutil serve``), and a client for it.

``corpus`` (documents, Search-R1's ``contents`` form, reading a corpus file), ``server`` (the BM25
index and the HTTP server) and ``client`` (the client and the reply reader); their public names are
re-exported here. The API, reply shapes and request limits are in docs/retrieval.md. ``bm25s`` is
imported when an index is built, and ``import factutil`` imports none of this.
"""

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
    Document,
    load_corpus,
    split_contents,
)
from factutil.tools.retrieval.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    MAX_QUERIES,
    MAX_REQUEST_BYTES,
    MAX_TOPK,
    BM25Retriever,
    RetrieveRequest,
    make_server,
    retrieve_reply,
    serve,
)

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_HOST", "DEFAULT_PORT", "DEFAULT_REQUEST_TIMEOUT_S", "DEFAULT_TOPK",
    "MAX_QUERIES", "MAX_REQUEST_BYTES", "MAX_TOPK", "BM25Retriever", "Document", "Passage",
    "RetrievalClient", "RetrieveRequest", "SearchResult", "format_observation", "load_corpus",
    "make_server", "parse_reply", "retrieve_reply", "serve", "split_contents",
]
