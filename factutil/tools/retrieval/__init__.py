"""A small retrieval service with Search-R1's HTTP API (``factutil serve``), and a client for it.

``corpus`` (documents, Search-R1's ``contents`` form, reading a corpus file, the BM25 index) and
``client`` (the client and the reply reader) are re-exported here; ``server`` (the FastAPI app,
:func:`~factutil.tools.retrieval.server.running_server` and ``serve``) is imported from its module,
as it needs the ``retrieval`` extra (fastapi, uvicorn) that a client does not. The API, reply shapes
and request limits are in docs/retrieval.md. ``bm25s`` is imported when an index is built, and
``import factutil`` imports none of this.
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
    BM25Retriever,
    Document,
    load_corpus,
    split_contents,
)

__all__ = [
    "DEFAULT_CORPUS", "DEFAULT_TOPK", "BM25Retriever", "Document", "Passage", "RetrievalClient",
    "SearchResult", "format_observation", "load_corpus", "parse_reply", "split_contents",
]
